"""Data parallelism (sesa_cli.distributed): 2 CPU processes under ``accelerate launch`` (gloo).

Checks the documented semantics: train.batch_size is the global batch, split across the processes; the gradients
are averaged, so a 2-process step equals a 1-process step on the union of the two shards (exactly, for the
per-sequence aggregation used here); both replicas end with identical weights; rank 0 alone writes the run dir.
algo.off_policy=distinct_solutions, which counts repeated solutions over the whole batch, gathers them from both
shards: its 2-process step equals the 1-process step too, on a batch where the shards alone count otherwise.
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

from sesa_cli.algos import off_policy_strategy
from sesa_cli.models.loading import load_policy
from sesa_cli.runs import RunDir
from sesa_cli.tasks.base import make_task
from sesa_cli.trainer import Trainer
from sesa_cli.update import loss_inputs
from tests.conftest import compose_train

pytestmark = pytest.mark.e2e  # two `accelerate launch` processes per case
WORKER = Path(__file__).with_name("dp_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory: pytest.TempPathFactory, tiny_overrides: list[str], path_setup) -> tuple[Path, list[str]]:
    """Run the 2-process training once (path_setup has built the cached tiny base both ranks load)."""
    out = tmp_path_factory.mktemp("dp")
    overrides = [*_common(tiny_overrides), "train.steps=2", "optim.lr=1e-3"]
    _launch(out, overrides)
    return out, overrides


@pytest.fixture(scope="module")
def dp_distinct(
    tmp_path_factory: pytest.TempPathFactory, tiny_overrides: list[str], path_setup
) -> tuple[Path, list[str]]:
    """One 2-process step of distinct_solutions on the sequential sampler's chains, each rank's batch the worker's
    PLANTED chains (tests/dp_worker.py): a rewarded solution repeated across the two shards."""
    out = tmp_path_factory.mktemp("dp_distinct")
    overrides = [
        *_common(tiny_overrides),
        "sampler=sequential",
        "sampler.stage1=solution",
        "algo.off_policy=distinct_solutions",
        "train.steps=1",
        "train.eval_before=false",
        # Adam's first step moves each weight by lr * g / (|g| + eps): a gradient component near 0, where the two
        # runs' float noise is relatively large, moves by up to ~lr in either; at 1e-4 that stays well inside the
        # weights' tolerance, while a miscounted batch (components of flipped sign: 2 lr) stays far outside it
        "optim.lr=1e-4",
    ]
    _launch(out, overrides, "--planted")
    return out, overrides


def _common(tiny_overrides: list[str]) -> list[str]:
    """The overrides both runs share: two prompts of four rollouts per process."""
    # Every leaf of the 64-leaf test world is a target (the reward is validity), so step 1 has rewarded and unrewarded
    # samples whatever the draw: a gradient to compare
    return [
        *tiny_overrides,
        "task=path",
        "task.num_targets=64",
        "train.batch_size=4",
        "sampler.group_size=4",
        "algo.aggregation=seq_mean_token_mean",
        "eval.samples=4",
        "train.checkpoint_every=0",
    ]


def _launch(out: Path, overrides: list[str], *worker_flags: str) -> None:
    """Train with ``overrides`` on 2 processes of tests/dp_worker.py, which save their records in ``out``."""
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
        *worker_flags,
        *overrides,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]


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
    out, overrides = dp_run
    r0, r1 = _load(out, 0), _load(out, 1)
    _, grads, _ = _one_process_step(overrides, r0["groups"] + r1["groups"], tmp_path)
    assert any(float(g.abs().sum()) > 0 for g in grads)  # a real update, not two zero gradients
    for single, parallel in zip(grads, r0["grads"], strict=True):
        torch.testing.assert_close(single, parallel, rtol=1e-4, atol=1e-6)


def _one_process_step(overrides: list[str], groups: list, tmp_path: Path) -> tuple[Trainer, list[torch.Tensor], dict]:
    """One process's first step on ``groups`` (the global batch): (its trainer, the gradients its optimizer step
    received, the step's metrics row)."""
    cfg = compose_train(overrides)
    task = make_task(cfg.task, cfg.seed)
    trainer = Trainer(cfg, task, load_policy(cfg.model, task), RunDir(tmp_path))
    trainer._draw_batch = lambda: (groups, 0)  # type: ignore[method-assign]
    grads: list[list[torch.Tensor]] = []
    trainer.learner.optimizer.register_step_pre_hook(
        lambda *_: grads.append([p.grad.detach().clone() for p in trainer.learner.trainable])
    )
    row = trainer.train_step()
    assert len(grads) == 1
    return trainer, grads[0], row


def test_distinct_solutions_batch_repeats_a_solution_across_the_shards(dp_distinct) -> None:
    """The planted batch can tell a gathering replica from one that counts its own shard: the second shard's
    advantages differ between the two."""
    out, overrides = dp_distinct
    g0, g1 = _load(out, 0)["groups"], _load(out, 1)["groups"]
    assert all(r.context_ids != r.prompt_ids for g in g0 + g1 for r in g[1:])  # items 1-3: off-policy
    repeated = g0[0][1].score.key
    assert g0[0][1].score.reward == 1
    assert [r.score.key for g in g0 for r in g[1:]].count(repeated) == 2
    assert [r.score.key for g in g1 for r in g[1:]].count(repeated) == 1
    cfg = compose_train(overrides)
    strategy = off_policy_strategy(cfg.algo)  # one process's: no other shard to gather
    shard, union = loss_inputs(g1, strategy, cfg.algo), loss_inputs(g0 + g1, strategy, cfg.algo)
    alone, _ = strategy.rows(shard.advantages, shard.off_policy, None, shard.solution, shard.solutions)
    whole, _ = strategy.rows(union.advantages, union.off_policy, None, union.solution, union.solutions)
    assert not torch.allclose(alone, whole[len(union.solutions) - len(shard.solutions) :])


def test_two_process_distinct_solutions_step_equals_one_process_on_the_global_batch(dp_distinct, tmp_path) -> None:
    """Both replicas end the step with the weights one process reaches on both shards together, through the same
    all-reduced gradient; the logged distinct_rewarded_frac is the whole batch's."""
    out, overrides = dp_distinct
    r0, r1 = _load(out, 0), _load(out, 1)
    for a, b in zip(r0["weights"], r1["weights"], strict=True):
        assert torch.equal(a, b)
    trainer, grads, row = _one_process_step(overrides, r0["groups"] + r1["groups"], tmp_path)
    assert any(float(g.abs().sum()) > 0 for g in grads)
    for single, parallel in zip(grads, r0["grads"], strict=True):
        torch.testing.assert_close(single, parallel, rtol=1e-4, atol=1e-6)
    for single, parallel in zip(trainer.learner.trainable, r0["weights"], strict=True):
        torch.testing.assert_close(single.detach(), parallel, rtol=1e-4, atol=1e-6)
    rows = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if "loss/distinct_rewarded_frac" in r]
    assert len(logged) == 1
    # rewarded off-policy rows: 7, of 5 distinct solutions (one drawn three times); each shard alone has 4 of 3 and
    # 3 of 3
    assert row["loss/distinct_rewarded_frac"] == logged[0]["loss/distinct_rewarded_frac"] == 5 / 7
