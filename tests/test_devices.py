"""``device``: its forms, a GPU the machine lacks refused in one line before any model work, ``auto``, the weights'
dtype on each device, and the rows an evaluation draws at once on a GPU (sesa_cli.devices), all on a CPU."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from sesa_cli.config import ConfigError, device_form
from sesa_cli.devices import (
    LOGIT_COPIES,
    MEMORY_SHARE,
    auto_batch_rows,
    device_problem,
    kv_bytes_per_token,
    resolve_device,
    rows_for_memory,
    weights_dtype,
)
from tests.conftest import run_cli
from tests.test_damaged_inputs import check_one_line

SMOLLM2 = LlamaConfig(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                      intermediate_size=1536, vocab_size=49152, max_position_embeddings=8192)  # fmt: skip


@pytest.mark.parametrize(("value", "form"), [("auto", ("auto", None)), ("cpu", ("cpu", None)),
                                             ("cuda", ("cuda", None)), ("cuda:1", ("cuda", 1))])  # fmt: skip
def test_the_device_forms(value, form):
    assert device_form(value) == form


@pytest.mark.parametrize("value", ["gpu", "cuda:", "cuda:x", "cpu:0", "auto:1", "mps", ""])
def test_anything_else_is_no_device(value):
    with pytest.raises(ConfigError, match="choose auto, cpu, cuda or cuda:N"):
        device_form(value)


def no_gpu(monkeypatch: pytest.MonkeyPatch, cuda_build: str | None = None) -> None:
    """This process's torch as a CPU build (``cuda_build`` None) or a CUDA build that finds no GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", cuda_build)


def gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_a_gpu_the_machine_lacks_is_named_with_the_fix(monkeypatch):
    no_gpu(monkeypatch)
    assert "built without CUDA; use device=cpu, or device=auto" in str(device_problem("cuda"))
    no_gpu(monkeypatch, cuda_build="13.0")
    assert "finds no CUDA GPU on this machine" in str(device_problem("cuda:0"))
    assert device_problem("cpu") is None
    assert device_problem("auto") is None
    gpus(monkeypatch, 2)
    assert device_problem("cuda") is None
    assert device_problem("cuda:1") is None
    assert device_problem("cuda:2") == "device=cuda:2: this machine has 2 CUDA GPUs (cuda:0 to cuda:1)"


def test_auto_is_the_gpu_where_there_is_one(monkeypatch):
    no_gpu(monkeypatch)
    assert resolve_device("auto") == "cpu"
    gpus(monkeypatch, 1)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("cuda:0") == "cuda:0"


def test_bfloat16_weights_on_a_gpu_only():
    assert weights_dtype("bfloat16", "cuda") == torch.bfloat16
    assert weights_dtype("bfloat16", "cuda:3") == torch.bfloat16
    assert weights_dtype("bfloat16", "cpu") == torch.float32  # the CPU autocasts around float32 weights
    assert weights_dtype("float32", "cuda") == torch.float32


@pytest.mark.parametrize("command", ["train", "eval"])
def test_device_cuda_without_a_gpu_is_one_line_before_any_model_work(command, monkeypatch, capsys, tmp_path):
    """The acceptance check of issue 54, on any machine (this process's torch made to find no GPU): exit 2, one line,
    and no model work: no warm start wrote its cache."""
    no_gpu(monkeypatch)
    cache = tmp_path / "cache"
    code = run_cli([command, "device=cuda", f"model.cache_dir={cache}", f"hydra.run.dir={tmp_path / 'run'}"],
                   monkeypatch)  # fmt: skip
    check_one_line(code, capsys.readouterr().err, "device=cuda: this torch")
    assert not cache.exists()
    assert not (tmp_path / "run").exists()


def test_a_gpu_past_the_last_is_one_line(monkeypatch, capsys, tmp_path):
    gpus(monkeypatch, 1)
    code = run_cli(["train", "device=cuda:1", f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch)
    check_one_line(code, capsys.readouterr().err, "device=cuda:1: this machine has 1 CUDA GPU (cuda:0)")


def test_key_value_bytes_of_a_grouped_query_model():
    """SmolLM2-135M's shape: 30 layers x 3 key/value heads x 64 wide, keys and values, 2 bytes each in bfloat16."""
    assert kv_bytes_per_token(SMOLLM2, 2) == 2 * 30 * 3 * 64 * 2 == 23040
    plain = LlamaConfig(hidden_size=128, num_hidden_layers=4, num_attention_heads=4)  # no num_key_value_heads given
    assert kv_bytes_per_token(plain, 4) == 2 * 4 * 128 * 4


def test_rows_from_free_memory_by_the_formula():
    """SmolLM2 in bfloat16 at its 8192 positions on an H200 with 140 GB free: a row takes 8192 x 23040 bytes of
    cache and 8 x 49152 x 4 of logits, 190.3 MB; half of 140 GB holds 367.8 of them, so 256 rows."""
    per_row = 8192 * 23040 + LOGIT_COPIES * 49152 * 4
    assert per_row == 190_316_544
    assert MEMORY_SHARE * 140e9 / per_row == pytest.approx(367.8, abs=0.1)
    assert rows_for_memory(140e9, 8192, 23040, 49152) == 256
    # the same power of two anywhere in its band: a little more or less free memory chooses the same rows
    assert {rows_for_memory(free, 8192, 23040, 49152) for free in (98e9, 120e9, 140e9, 190e9)} == {256}
    assert rows_for_memory(200e9, 8192, 23040, 49152) == 512
    assert rows_for_memory(0.1e9, 8192, 23040, 49152) == 1  # never 0: one row is always tried
    assert rows_for_memory(0.0, 8192, 23040, 49152) == 1


def test_a_cpu_model_keeps_every_row_at_once(path_setup, monkeypatch):
    """On a CPU ``model.max_batch_rows=0`` stays "all rows at once", and no GPU memory is asked for."""
    _, _, policy = path_setup
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *_: pytest.fail("asked the GPU on a CPU model"))
    assert auto_batch_rows(policy.model) == 0


def test_a_cluster_launcher_leaves_the_device_to_the_jobs_machines(monkeypatch):
    """``sesa train -m hydra/launcher=submitit_slurm device=cuda`` is typed on a login node without a GPU: the jobs
    run on the cluster's GPU nodes, where loading the model checks the device (one line there too)."""
    from sesa_cli.commands.validate import runs_here

    assert runs_here([])
    assert runs_here(["seed=0,1", "hydra/launcher=joblib"])
    assert not runs_here(["hydra/launcher=submitit_slurm", "device=cuda"])
    assert not runs_here(["hydra/launcher=ray"])


def test_loading_onto_a_gpu_the_machine_lacks_is_one_line_before_the_warm_start(path_setup, monkeypatch, tmp_path):
    """What a cluster's job (or a library call) meets: a ConfigError before any weights are built or read."""
    from dataclasses import replace

    from sesa_cli.models.loading import load_base, load_pretrained_dir

    cfg, task, _ = path_setup
    no_gpu(monkeypatch)
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match=r"^device=cuda: this torch"):
        load_base(replace(cfg.model, cache_dir=str(cache)), task, "cuda")
    assert not cache.exists()
    with pytest.raises(ConfigError, match=r"^device=cuda:0: this torch"):
        load_pretrained_dir(tmp_path, "cuda:0")
