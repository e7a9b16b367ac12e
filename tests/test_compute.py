"""A run's compute on record (sesa_cli.compute): the analytic FLOPs equal torch's own count of the same matrix products,
the tokens a ledger counts are the tokens drawn and scored, and the block run.json holds is checked and read back.

FLOPs are compared with ``torch.utils.flop_counter.FlopCounterMode`` exactly, not within a tolerance: both count
2 x m x n x k per matrix product from the operands' shapes, whatever kernel runs them, so the counts are integers
that hold on any CPU. FlopCounterMode does not see the CPU's fused attention kernel, so attention is compared on
models built with eager attention (explicit batched products); the projections are compared on SDPA models too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import LlamaConfig, LlamaForCausalLM

from sesa_cli import compute
from sesa_cli.compute import ComputeLedger, ModelShape, PhaseCost, check_block, model_shape, run_cost
from sesa_cli.config import ConfigError
from sesa_cli.rollout.engine import Engine, SamplingParams
from sesa_cli.rollout.scoring import build_batch, completion_logps
from sesa_cli.runs import RunDir, read_run_info

VOCAB, PAD, BOS, STOP = 50, 0, 1, 2


def _model(attention: str = "eager", layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=128,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=STOP,
        attn_implementation=attention,
    )
    return LlamaForCausalLM(config).eval()


def _products(counter: FlopCounterMode, *ops: str) -> int:
    """FLOPs FlopCounterMode counted in the named ops (``mm``, ``bmm``, ...), over the whole run."""
    return sum(n for op, n in counter.get_flop_counts()["Global"].items() if str(op).split(".")[1] in ops)


# ------------------------------------------------------------------------------------------------ the shapes
def test_the_shape_of_the_tiny_llama_is_its_layers_sums():
    model = _model(layers=3)
    per_layer = 4 * 64 * 64 + 3 * 64 * 128  # q, k, v, o; gate, up, down
    assert model_shape(model) == ModelShape(linear=3 * per_layer, attention=3 * 4 * 16, head=64 * VOCAB)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_decoder_forward_counts_what_flop_counter_counts(attention):
    model = _model(attention)
    shape = model_shape(model)
    ids = torch.randint(3, VOCAB, (3, 7), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.get_decoder()(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    assert _products(counter, "mm", "addmm") == 2 * 3 * 7 * shape.linear
    if attention == "eager":  # Q K^T and A V as batched products: the attention term, exactly
        assert counter.get_total_flops() == shape.forward_flops(3, 7, 0, 0)


def test_lora_adapters_are_counted_as_the_linear_layers_they_are():
    from sesa_cli.config import ModelConfig
    from sesa_cli.models.lora import add_lora

    base = _model("eager")
    plain = model_shape(base).linear
    model = add_lora(
        base, ModelConfig(lora=True, lora_rank=4, lora_dropout=0.0, lora_target_modules=["q_proj", "v_proj"])
    )
    shape = model_shape(model)
    assert shape.linear == plain + 2 * 2 * (64 * 4 + 4 * 64)  # two layers x (q, v) x (A, B)
    ids = torch.randint(3, VOCAB, (2, 5), generator=torch.Generator().manual_seed(1))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.get_decoder()(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    assert counter.get_total_flops() == shape.forward_flops(2, 5, 0, 0)


# ------------------------------------------------------------------------------------------------ the engine
@pytest.mark.parametrize("backend", ["hf", "llama"])
def test_an_engine_draw_counts_its_forwards_and_its_sampled_tokens(backend):
    """Prompts of different lengths (right-padded chunks: holes in the cache), rows that share a physical row, a
    teacher-forced extension and a second draw: the ledger's FLOPs are what FlopCounterMode counts over the whole
    draw, its sampled tokens the completions' tokens."""
    model = _model("eager" if backend == "hf" else "sdpa")
    engine = Engine(model, PAD, backend=backend)
    if backend == "llama":  # SDPA: FlopCounterMode sees the products only, so the ledger counts them only
        engine.shape = ModelShape(engine.shape.linear, 0, engine.shape.head)
    ledger = ComputeLedger()
    params = SamplingParams()
    with FlopCounterMode(display=False) as counter, ledger.phase("sample") as cost:
        session = engine.start([[BOS, 5, 6, 7], [BOS, 8], [BOS, 9, 9, 9, 9, 9], [BOS, 5, 6, 7]])
        first = session.sample(6, [STOP], params, torch.Generator().manual_seed(0))
        session.extend([[3, 4], [3], [], [4, 4, 4]])
        second = session.sample(5, [STOP], params, torch.Generator().manual_seed(1))
    assert cost.forward_flops == _products(counter, "mm", "addmm", "bmm")
    assert cost.sampled_tokens == sum(len(c.ids) for c in first + second) > 0
    assert cost.forward_tokens >= cost.sampled_tokens  # physical rows x chunk widths, the prompts' prefill included
    assert (cost.backward_tokens, cost.backward_flops) == (0, 0)


def test_chains_count_their_items_tokens_and_not_what_is_fed_between():
    engine = Engine(_model(), PAD)
    ledger = ComputeLedger()
    with ledger.phase("sample") as cost:
        session = engine.start([[BOS, 5]] * 5)
        chains = session.sample_chains(
            3, 4, [STOP], SamplingParams(), torch.Generator().manual_seed(2), between=lambda row, item: [7, 7, 7]
        )
    assert cost.sampled_tokens == sum(len(item.ids) for chain in chains for _, item in chain)


def test_nothing_is_counted_outside_a_phase():
    engine = Engine(_model(), PAD)
    ledger = ComputeLedger()
    with ledger.phase("eval"):
        pass
    engine.start([[BOS, 5]]).sample(3, [STOP], SamplingParams(), torch.Generator().manual_seed(0))
    assert ledger.cost("eval") == PhaseCost(seconds=ledger.cost("eval").seconds)


# ------------------------------------------------------------------------------------------------ scoring
@pytest.mark.parametrize("padding_free", [False, True])
def test_a_scoring_pass_with_its_backward_counts_what_flop_counter_counts(padding_free):
    """The update's pass: the decoder over the padded rows (or packed without padding), the head at the completion
    positions, then backward. Backward costs exactly twice the forward here (every weight trains: a gradient for
    each product's input and one for its weight)."""
    model = _model("eager").train()
    batch = build_batch([[BOS, 5, 6], [BOS, 7], [BOS, 8, 8, 8]], [[4, 4, STOP], [5, STOP], [6]], PAD)
    ledger = ComputeLedger()
    with FlopCounterMode(display=False) as counter, ledger.phase("update") as cost:
        logps, _ = completion_logps(model, batch, padding_free=padding_free)
        (logps * batch.response_mask).sum().backward()
    assert cost.forward_flops + cost.backward_flops == counter.get_total_flops()
    assert cost.backward_flops == 2 * cost.forward_flops
    assert cost.backward_tokens == cost.forward_tokens
    if not padding_free:
        assert cost.forward_tokens == batch.input_ids.numel()  # 3 rows x the longest, padding included
    before = (cost.forward_flops, cost.backward_tokens, cost.backward_flops)
    with ledger.phase("update"), torch.no_grad():  # no gradient: a forward only (old log-probs, the reference)
        completion_logps(model, batch, padding_free=padding_free)
    assert (cost.forward_flops, cost.backward_tokens, cost.backward_flops) == (2 * before[0], *before[1:])


# ------------------------------------------------------------------------------------------------ the ledger
def test_phases_nest_and_their_seconds_exclude_what_ran_inside(monkeypatch):
    clock = iter([0.0, 1.0, 3.0, 6.0, 10.0])  # enter outer, enter inner, leave inner, leave outer (+ spare)
    monkeypatch.setattr(compute.time, "perf_counter", lambda: next(clock))
    ledger = ComputeLedger()
    shape = ModelShape(linear=10, attention=0, head=0)
    with ledger.phase("eval"):
        compute.count_forward(shape, 1, 1, 0, 0)
        with ledger.phase("policy"):
            compute.count_forward(shape, 2, 1, 0, 0)
        compute.count_forward(shape, 4, 1, 0, 0)
    assert (ledger.cost("eval").seconds, ledger.cost("policy").seconds) == (4.0, 2.0)  # (1 - 0) + (6 - 3); 3 - 1
    assert (ledger.cost("eval").forward_tokens, ledger.cost("policy").forward_tokens) == (5, 2)


def test_the_totals_are_the_training_phases():
    ledger = ComputeLedger()
    ledger.phases = {
        "sample": PhaseCost(1.0, 100, 1000, 0, 0, 40),
        "update": PhaseCost(2.0, 300, 3000, 200, 4000, 0),
        "eval": PhaseCost(5.0, 900, 9000, 0, 0, 500),
        "policy": PhaseCost(1.5, 50, 500, 0, 0, 0),
    }
    assert (ledger.sampled_tokens, ledger.scored_tokens, ledger.train_flops) == (40, 200, 1000 + 3000 + 4000)
    block = ledger.block()
    assert set(block) == {"phases", "sampled_tokens", "scored_tokens", "train_flops", "from_step", "processes"}
    assert block["phases"]["update"] == {"seconds": 2.0, "forward_tokens": 300, "forward_flops": 3000,
                                         "backward_tokens": 200, "backward_flops": 4000, "sampled_tokens": 0}  # fmt: skip
    again = ComputeLedger()
    again.load_state_dict(json.loads(json.dumps(ledger.state_dict())))
    assert again.block() == block
    cost = run_cost({"compute": block})
    assert cost is not None
    assert cost["train_flops"] == 8000.0
    assert (cost["sampled_tokens"], cost["scored_tokens"], cost["train_seconds"]) == (40.0, 200.0, 3.0)
    assert (cost["eval_flops"], cost["eval_seconds"], cost["update_flops"]) == (9000.0, 5.0, 7000.0)
    two = run_cost({"compute": {**block, "processes": 2}})
    assert two is not None
    assert two["train_flops"] == 16000.0  # rank 0's counts x the processes
    assert two["train_seconds"] == 3.0


def test_a_run_from_before_compute_was_recorded_has_no_cost():
    assert run_cost({"command": "train", "status": "finished"}) is None


_WHOLE = ComputeLedger().block()


@pytest.mark.parametrize(
    ("block", "named"),
    [
        ([], "'compute' is not an object with 'phases'"),
        ({"phases": {"sample": 3}}, "compute phase 'sample' is not an object"),
        ({"phases": {"eval": {"seconds": 1.0}}}, "compute phase 'eval': 'forward_tokens' is None"),
        ({**_WHOLE, "phases": {"eval": {"seconds": -1.0}}}, "'seconds' is -1.0"),
        ({**_WHOLE, "train_flops": 1.5}, "compute 'train_flops' is 1.5, not a non-negative integer"),
        ({**_WHOLE, "processes": True}, "compute 'processes' is True"),
    ],
)
def test_a_damaged_block_is_one_line_naming_it(block, named):
    with pytest.raises(ConfigError, match=named):
        check_block(block, "run.json")
    assert check_block(_WHOLE, "run.json") is _WHOLE


def test_run_json_keeps_its_compute_and_refuses_a_damaged_one(tmp_path: Path):
    run = RunDir(tmp_path / "run")
    run.write_run_info("train", ["seed=1"])
    ledger = ComputeLedger()
    with ledger.phase("sample"):
        compute.count_sampled(7)
    run.add_run_info(compute=ledger.block())
    run.mark_ended("finished")
    info = read_run_info(run.path / "run.json")
    assert info["status"] == "finished"
    assert info["compute"]["sampled_tokens"] == 7
    info["compute"]["phases"]["sample"]["forward_flops"] = -1
    (run.path / "run.json").write_text(json.dumps(info))
    with pytest.raises(ConfigError, match=r"run.json: compute phase 'sample': 'forward_flops' is -1"):
        read_run_info(run.path / "run.json")


# ------------------------------------------------------------------------------------------------ a training step
@pytest.mark.parametrize("sampler", ["parallel", "sequential"])
def test_a_training_step_counts_the_tokens_it_drew_and_trained_on(frozenlake_setup, tmp_path, sampler):
    """FrozenLake's episodes (teacher-forced feedback between turns) drawn i.i.d. or two-stage (sketches, then their
    expansions): the sample phase's sampled tokens are the policy's tokens of every episode and of every sketch; the
    step's row carries the run's totals so far."""
    import copy
    from dataclasses import replace

    from sesa_cli.rollout.rollouts import Expansion
    from sesa_cli.trainer import Trainer

    cfg, task, policy = frozenlake_setup
    # at temperature 1.5 some replies are invalid, so groups differ (the format penalty) and the step updates: a
    # batch without a policy-gradient signal takes no update (sesa_cli.learner), and then scores nothing
    sampling = replace(cfg.sampler, name=sampler, temperature=1.5)
    cfg = replace(cfg, sampler=sampling, train=replace(cfg.train, batch_size=2))
    trainer = Trainer(cfg, task, copy.deepcopy(policy), RunDir(tmp_path / "run"))
    row = trainer.train_step()
    rows = [r for g in trainer._last_groups for r in g]
    sketches = {id(r.origin.sketch): r.origin.sketch for r in rows if isinstance(r.origin, Expansion)}
    assert bool(sketches) == (sampler == "sequential")
    drawn = sum(r.completion.n_sampled for r in rows) + sum(s.completion.n_sampled for s in sketches.values())
    ledger = trainer.compute
    assert ledger.sampled_tokens == drawn == row["compute/sampled_tokens"]
    assert ledger.cost("sample").forward_tokens > drawn  # the prompts' prefill and the feedback too
    assert ledger.scored_tokens == ledger.cost("update").backward_tokens == row["compute/scored_tokens"] > 0
    assert row["compute/train_flops"] == ledger.train_flops > 0
    assert set(ledger.phases) == {"sample", "update"}
    assert ledger.cost("sample").seconds > 0
