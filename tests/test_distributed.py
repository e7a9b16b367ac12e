"""Data parallelism (sesa_cli.distributed): 2 CPU processes under ``accelerate launch`` (gloo).

Checks the documented semantics: train.batch_size is the global batch, split across the processes; the gradients
are averaged, so a 2-process step equals a 1-process step on the union of the two shards (exactly, for the
per-sequence aggregation used here); both replicas end with identical weights; rank 0 alone writes the run dir.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import compose_train

WORKER = Path(__file__).with_name("dp_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory: pytest.TempPathFactory, tiny_overrides: list[str], path_setup) -> tuple[Path, list[str]]:
    """Run the 2-process training once (path_setup has built the cached tiny base both ranks load)."""
    out = tmp_path_factory.mktemp("dp")
    # Every leaf of the 64-leaf test world is a target (the reward is validity), so step 1 has rewarded and unrewarded
    # samples whatever the draw: a gradient to compare
    overrides = [
        *tiny_overrides,
        "task=path",
        "task.num_targets=64",
        "train.steps=2",
        "train.batch_size=4",
        "sampler.group_size=4",
        "algo.aggregation=seq_mean_token_mean",
        "eval.samples=4",
        "train.checkpoint_every=0",
        "optim.lr=1e-3",
    ]
    # --multi_gpu is accelerate's torchrun launcher; without GPUs the replicas run on CPU with gloo (a plain --cpu
    # launch would start one process)
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(_free_port()),
        str(WORKER),
        str(out),
        *overrides,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, overrides


def _load(out: Path, rank: int) -> dict:
    return torch.load(out / f"rank{rank}.pt", weights_only=False)


def test_replicas_hold_identical_weights(dp_run) -> None:
    out, _ = dp_run
    r0, r1 = _load(out, 0), _load(out, 1)
    assert len(r0["weights"]) == len(r1["weights"]) > 0
    for a, b in zip(r0["weights"], r1["weights"], strict=True):
        assert torch.equal(a, b)
    for a, b in zip(r0["grads"], r1["grads"], strict=True):
        assert torch.equal(a, b)


def test_shards_are_disjoint_halves_of_the_global_batch(dp_run) -> None:
    out, _ = dp_run
    g0, g1 = _load(out, 0)["groups"], _load(out, 1)["groups"]
    assert len(g0) == len(g1) == 2  # train.batch_size=4 global -> 2 prompts per process
    # path has one prompt; the shards differ by their rollouts (each rank samples with its own generator)
    assert [r.completion.ids for g in g0 for r in g] != [r.completion.ids for g in g1 for r in g]


def test_rank0_alone_writes_the_run_dir(dp_run) -> None:
    out, _ = dp_run
    run = out / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "rollout/reward_mean" in r]
    assert [r["step"] for r in train_rows] == [1, 2]  # logged once, not once per rank
    assert (run / "checkpoints" / "step_000002" / "model.safetensors").is_file()


def test_two_process_gradient_equals_one_process_on_the_global_batch(dp_run, tmp_path: Path) -> None:
    """The all-reduced gradient of step 1 = the gradient one process computes on both shards together."""
    from sesa_cli.models.loading import load_policy
    from sesa_cli.runs import RunDir
    from sesa_cli.tasks.base import make_task
    from sesa_cli.trainer import Trainer

    out, overrides = dp_run
    r0, r1 = _load(out, 0), _load(out, 1)
    cfg = compose_train(overrides)
    task = make_task(cfg.task, cfg.seed)
    trainer = Trainer(cfg, task, load_policy(cfg.model, task), RunDir(tmp_path))
    trainer._draw_batch = lambda: (r0["groups"] + r1["groups"], 0)  # type: ignore[method-assign]
    grads: list[list[torch.Tensor]] = []
    trainer.optimizer.register_step_pre_hook(
        lambda *_: grads.append([p.grad.detach().clone() for p in trainer.trainable])
    )
    trainer.train_step()
    assert len(grads) == 1
    assert any(float(g.abs().sum()) > 0 for g in grads[0])  # a real update, not two zero gradients
    for single, parallel in zip(grads[0], r0["grads"], strict=True):
        torch.testing.assert_close(single, parallel, rtol=1e-4, atol=1e-6)
