"""Fabricated run dirs laid out as ``sesa train`` / ``sesa revive`` write them, for the report tests.

The numbers follow simple formulas (see :func:`success_at`) so tests can check the report's arithmetic by hand.
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import numpy as np
import yaml

from sesa_cli.metric_keys import key as K

KS = (1, 2, 4, 8, 16)  # 16 checks that @k sorts as a number
STEPS = 10
EVAL_EVERY = 5
TARGETS = [f"r{i}/c{i}/d{i}" for i in range(4)]


def success_at(step: int, seed: int, sampler: str) -> float:
    """The fabricated rollout/success curve: sequential learns faster; seeds offset by 0.01."""
    slope = 0.05 if sampler == "sequential" else 0.03
    return round(0.1 + slope * step + 0.01 * seed, 6)


def target_probs(step: int, seed: int, sampler: str) -> list[float]:
    """Exact probabilities of the 4 fabricated targets: parallel piles onto the first, sequential spreads."""
    t = step / STEPS
    if sampler == "parallel":
        return [0.1 + 0.8 * t, 0.1 * (1 - t) + 0.001, 0.1 * (1 - t) + 0.001, 0.05 + 0.01 * seed]
    return [0.1 + 0.2 * t, 0.1 + 0.2 * t, 0.1 + 0.1 * t, 0.05 + 0.01 * seed]


def write_run(
    run_dir: Path,
    overrides: dict[str, object],
    task: str = "path",
    coverage: bool = True,
    command: str = "train",
    policy: bool = False,
    threads: int | None = 1,
    extra_config: dict[str, object] | None = None,
) -> Path:
    """Fabricate a run dir: metrics.jsonl, config.yaml, .hydra/, run.json (and with ``policy``, exact policy
    metrics and policy_probs.jsonl). ``threads=None`` writes a run.json from before thread counts were recorded."""
    sampler = str(overrides.get("sampler", "parallel"))
    seed = int(overrides.get("seed", 0))
    run_dir.mkdir(parents=True)
    override_list = [f"task={task}", *(f"{k}={v}" for k, v in overrides.items()), f"train.steps={STEPS}"]
    config = {
        "task": {"name": task},
        "sampler": {"name": sampler, "group_size": 8, "stage1": "auto"},
        "algo": {"name": str(overrides.get("algo", "grpo")), "off_policy": "paper"},
        "optim": {"lr": 1e-4},
        "model": {"name": "tiny"},
        "seed": seed,
        "train": {"steps": STEPS},
        **(extra_config or {}),
    }
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(override_list))
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    info: dict[str, object] = {
        "id": uuid.uuid4().hex,  # as every run writes (fabricated runs of one seed log identical metrics)
        "command": command,
        "parent": None,
        "overrides": override_list,
        "started": "2026-11-22T10:00:00",
    }
    if threads is not None:
        info.update(torch_threads=threads, versions={"python": "3.11.7", "torch": "2.13.0+cpu", "sesa": "0.1.0"})
    (run_dir / "run.json").write_text(json.dumps(info))
    rng = np.random.default_rng(seed)
    lines, probs = [], []
    for step in range(STEPS + 1):
        decay = 0.9 if sampler == "sequential" else 0.75
        row = {
            "step": step,
            K("rollout/reward_mean"): success_at(step, seed, sampler),
            K("rollout/reward_std"): 0.3,
            K("rollout/success"): success_at(step, seed, sampler),
            K("rollout/entropy"): round(2.0 * decay**step + 0.05 * rng.random(), 6),
            K("rollout/frac_zero_std"): 0.1,
            K("rollout/distinct"): 6.0 - step * (0.1 if sampler == "sequential" else 0.4),
            K("rollout/distinct_correct"): 1.0 + 0.1 * step,
            K("optim/lr"): 1e-4,
            K("time/step_s"): 0.5,
            K("collapse/flag"): int(sampler == "parallel" and step >= 8),
        }
        if coverage:
            row[K("rollout/coverage")] = 0.05 * step * (1.5 if sampler == "sequential" else 1.0)
        lines.append(json.dumps(row))
        if step % EVAL_EVERY == 0:
            ev: dict[str, object] = {"step": step, K("eval/success"): success_at(step, seed, sampler) / 2}
            ev[K("eval/entropy")] = 1.5 * decay**step
            for k in KS:
                ev[K("eval/pass@{k}", k=k)] = min(1.0, ev[K("eval/success")] * (1 + 0.5 * math.log2(k)))  # type: ignore[operator]
                ev[K("eval/distinct@{k}", k=k)] = min(k, 1 + step / 5)
                ev[K("eval/distinct_correct@{k}", k=k)] = min(k, step / 5)
                if coverage:
                    ev[K("eval/coverage@{k}", k=k)] = min(1.0, 0.02 * k * (1 + step))
            if policy:
                p = target_probs(step, seed, sampler)
                total = sum(p)
                ev[K("policy/target_mass")] = total
                ev[K("policy/effective_solutions")] = math.exp(-sum(q / total * math.log(q / total) for q in p))
                ev[K("policy/valid_mass")] = min(1.0, total + 0.1)
                probs.append(
                    {
                        "step": step,
                        "instances": [
                            {
                                "instance": 0,
                                "targets": TARGETS,
                                "probs": {**dict(zip(TARGETS, p, strict=True)), "x/y/z": 0.02},
                            }
                        ],
                    }
                )
            lines.append(json.dumps(ev))
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if probs:
        (run_dir / "policy_probs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in probs))
    return run_dir


def write_multirun(
    sweep: Path, task: str = "path", coverage: bool = True, seeds: tuple[int, ...] = (0, 1), policy: bool = False
) -> Path:
    """A Hydra sweep dir: sampler=parallel,sequential × seeds as jobs 0..n-1."""
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"mode": "MULTIRUN"}}))
    job = 0
    for sampler in ("parallel", "sequential"):
        for seed in seeds:
            write_run(
                sweep / str(job), {"sampler": sampler, "seed": seed}, task=task, coverage=coverage, policy=policy
            )
            job += 1
    return sweep


def write_revival(
    run_dir: Path, parent: Path, at: int, overrides: dict[str, object], more: int = 4, solutions: float | None = None
) -> Path:
    """A revived run as ``sesa revive`` writes it: the parent's rows up to ``at`` (marked ``revive/parent``), then
    its own rows at ``at + 1 .. at + more`` whose rollout/success is 0.9 (the parent's never exceeds 0.7); with
    ``solutions``, its final evaluation row has that ``policy/effective_solutions``."""
    seed = int(yaml.safe_load((parent / "config.yaml").read_text())["seed"])
    run_dir.mkdir(parents=True)
    overrides = {"step": "auto", **overrides}  # the checkpoint the revival names (its parent's step ``at``)
    override_list = [f"ckpt={parent}", *(f"{k}={v}" for k, v in overrides.items())]
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(override_list))
    config = yaml.safe_load((parent / "config.yaml").read_text())
    config["sampler"]["name"] = str(overrides.get("sampler", config["sampler"]["name"]))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    info = {
        "id": uuid.uuid4().hex,
        "command": "revive",
        "parent": str(parent / "checkpoints" / f"step_{at:06d}"),
        "overrides": override_list,
        "parent_step": at,
        "parent_run": str(parent),
        "torch_threads": 1,
    }
    (run_dir / "run.json").write_text(json.dumps(info))
    rows = [json.loads(line) for line in (parent / "metrics.jsonl").read_text().splitlines()]
    lines = [json.dumps({**r, K("revive/parent"): 1}) for r in rows if r["step"] <= at]
    for step in range(at + 1, at + more + 1):
        lines.append(
            json.dumps({"step": step, K("rollout/success"): 0.9, K("rollout/entropy"): 0.5, K("optim/lr"): 1e-4})
        )
    final: dict[str, object] = {"step": at + more, K("eval/success"): 0.8 + 0.01 * seed}
    if solutions is not None:
        final[K("policy/effective_solutions")] = solutions
    lines.append(json.dumps(final))
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def compute_block(train_flops: int) -> dict[str, object]:
    """A run.json compute block (sesa_cli.compute) whose training cost is ``train_flops``: sampling a third of it,
    the update the rest."""
    phase = {"seconds": 1.0, "forward_tokens": 10, "backward_tokens": 0, "sampled_tokens": 0}
    return {
        "phases": {
            "sample": {**phase, "forward_flops": train_flops // 3, "backward_flops": 0, "sampled_tokens": 10},
            "update": {**phase, "forward_flops": 0, "backward_flops": train_flops - train_flops // 3},
        },
        "sampled_tokens": 10,
        "scored_tokens": 10,
        "train_flops": train_flops,
        "from_step": 0,
        "processes": 1,
    }


def write_sized_head_to_head(tmp_path: Path) -> tuple[Path, Path]:
    """Two sweeps with recorded compute: parallel GRPO (cost 1) and sequential (2.1) at seeds 0, 1, then GRPO with
    a group of 16 (2.0) and Pass@k (1.0): the head to head at equal compute sets sequential against the group of 16
    and Pass@k against GRPO's group of 8."""
    sweep = write_multirun(tmp_path / "sweep", seeds=(0, 1))  # parallel seeds 0, 1; sequential seeds 0, 1
    more = tmp_path / "more"
    grpo16, passk = {"sampler": "parallel", "sampler.group_size": 16}, {"sampler": "parallel", "algo": "passk"}
    for job, overrides in enumerate((grpo16, grpo16, passk, passk)):
        write_run(more / str(job), {**overrides, "seed": job % 2})
    for runs, gflops in ((sweep, (100, 100, 210, 210)), (more, (200, 200, 100, 100))):
        for job, flops in enumerate(gflops):
            info = json.loads((runs / str(job) / "run.json").read_text())
            (runs / str(job) / "run.json").write_text(json.dumps({**info, "compute": compute_block(flops * 10**9)}))
    return sweep, more
