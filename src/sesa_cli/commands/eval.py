"""``sesa eval``: success, pass@k, coverage@k, distinct@k and entropy of a checkpoint (or a base model), and the exact
``policy/*`` metrics where the task can enumerate its solutions."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from sesa_cli.commands.common import (
    resolved_yaml,
    seed_everything,
)
from sesa_cli.commands.ending import number
from sesa_cli.commands.schemas import register_configs
from sesa_cli.commands.sweep import run_command
from sesa_cli.config import EvalConfig, conf_dir
from sesa_cli.intervals import exact_text, over_pruned, pruned_note

log = logging.getLogger("sesa.eval")
register_configs()


def run(cfg: EvalConfig, run_dir: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Evaluate and write ``config.yaml``, ``run.json``, ``samples.jsonl`` + ``metrics.json`` (+
    ``policy_probs.jsonl`` where the task has exact policy metrics) under ``run_dir``; return the metrics. Called
    alone it leaves the same run dir as the Hydra app (which adds only Hydra's own ``.hydra/`` and log file)."""
    from sesa_cli.commands.reload import check_checkpoint_model
    from sesa_cli.runs import (
        RunDir,
        atomic_write_text,
        check_checkpoint,
        ended_badly,
        json_text,
        resolve_checkpoint,
        run_dir_of_checkpoint,
    )

    ckpt = resolve_checkpoint(cfg.ckpt) if cfg.ckpt else None
    step = check_checkpoint(ckpt)["step"] if ckpt else 0  # every file it holds, before any model work (or imports)
    if ckpt is not None:
        check_checkpoint_model(ckpt, cfg)  # the run's own checkpoint, able to write this task's prompts
    bad = ended_badly(run_dir_of_checkpoint(ckpt)) if ckpt else None
    if bad and ckpt:
        log.warning("%s is %s; evaluating its checkpoint at step %d", run_dir_of_checkpoint(ckpt), bad, step)

    from rich.table import Table

    from sesa_cli.commands.ending import eval_ending
    from sesa_cli.commands.registered import check_registered
    from sesa_cli.compute import ComputeLedger
    from sesa_cli.evaluation import Evaluation, sample_records, success_counts
    from sesa_cli.models.loading import load_checkpoint, load_policy
    from sesa_cli.progress import console, phase
    from sesa_cli.rollout.samplers import make_sampler
    from sesa_cli.tasks.base import make_task

    check_registered(cfg)  # every name a registry holds, before any model work
    seed_everything(cfg.seed)
    run = RunDir(run_dir)
    run.write_config(resolved_yaml(cfg))
    task = make_task(cfg.task, cfg.seed)
    with phase(f"model load ({ckpt or 'model=' + cfg.model.name})"):
        policy = (
            load_checkpoint(ckpt, cfg.model, task, cfg.device) if ckpt else load_policy(cfg.model, task, cfg.device)
        )
    run.write_run_info("eval", overrides or [], parent=str(ckpt) if ckpt else None)
    # The run's own evaluation (sesa_cli.evaluation.Evaluation, with the run's config and seed): its checkpoint's row
    # here is the run's row at that step, draws included. A sequential sampler draws only when asked (sampler=).
    sampler = make_sampler(cfg.sampler, task, policy, cfg.model.dtype) if cfg.sampler.name != "parallel" else None
    evaluation = Evaluation(task, policy, cfg.sampler, cfg.eval, cfg.seed, cfg.model.dtype, cfg.model.max_batch_rows,
                            sampler=sampler)  # fmt: skip
    instances, n = evaluation.instances, evaluation.samples
    ledger = ComputeLedger()  # the evaluation's tokens, FLOPs and seconds, in run.json (sesa_cli.compute)
    with phase(f"evaluation ({len(instances)} instances x {n} samples)"), ledger.phase("eval"):
        result = evaluation.run(step)
    if result.policy_record is not None:
        run.log_policy_probs(result.policy_record)
    run.log_eval_counts(success_counts(step, result.groups))
    metrics: dict[str, Any] = dict(result.row)
    metrics.update({"eval/samples": n, "eval/instances": len(instances), "ckpt": str(ckpt) if ckpt else None})
    groups = result.groups
    health = evaluation.sampler.chain_health(groups)
    if health is not None:
        metrics.update(chain_metrics(health))
    records = sample_records(groups, policy.decode)
    atomic_write_text(run.path / "samples.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    atomic_write_text(run.path / "metrics.json", json_text(metrics))
    table = Table(title=f"sesa eval: task={task.name} sampler={cfg.sampler.name}", title_justify="left")
    table.caption = evaluation.describe()
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        if key.startswith(("eval/", "policy/")):
            exact = isinstance(value, float) and math.isfinite(value)
            table.add_row(key, exact_text(key, value, metrics, number) if exact else number(value))
    console.print(table)
    pruned = over_pruned(metrics)
    if pruned is not None:
        console.print(pruned_note(pruned), soft_wrap=True, markup=False, highlight=False)
    if health is not None:
        console.print(chain_table(health))
    run.add_run_info(compute=ledger.block())
    run.mark_ended("finished")
    log.info("wrote %s and %s", run.path / "metrics.json", run.path / "samples.jsonl")
    eval_ending(run.path, ckpt, cfg.sampler.name == "sequential")
    return metrics


def chain_metrics(health: Any) -> dict[str, Any]:
    """metrics.json entries of a sequential sampler's chain health: the ``chain/*`` scalars training logs, and each
    per-position array as ``chain/<name>_by_position`` (index 0 = the first item of a chain)."""
    out: dict[str, Any] = {f"chain/{k}": v for k, v in health.scalars().items()}
    out["chain/chains"] = health.chains
    for name in ("valid", "new", "cut", "followed"):
        out[f"chain/{name}_by_position"] = getattr(health, name)
    return out


def chain_table(health: Any) -> Any:
    """A rich table of chain health: one column per chain position, then the whole chain."""
    from rich.table import Table

    items = "sketches" if health.sketches else "solutions"
    table = Table(title=f"chain health: {health.chains} chains of {len(health.valid)} {items} (rollout statistics)")
    table.add_column("per position")
    for k in range(len(health.valid)):
        table.add_column(str(k + 1), justify="right")
    table.add_column("chain", justify="right")
    scalars = health.scalars()
    table.caption = (
        "valid: share of items that are valid; new: valid and unlike every earlier item of the chain (its "
        "sum is the distinct valid items per chain); cut: hit the length limit without the stop"
        + ("; followed: share of stage-II solutions that follow their sketch" if health.sketches else "")
    )
    rows = [
        ("valid", health.valid, number(scalars["valid"], ".2f")),
        ("new", health.new, f"{number(health.distinct, '.2f')} distinct"),
        ("cut", health.cut, number(scalars["cut"], ".2f")),
    ]
    if health.sketches:
        rows.append(("followed", health.followed, number(scalars.get("followed"), ".2f")))
    for name, values, whole in rows:
        table.add_row(name, *(number(v, ".2f") for v in values), whole)
    return table


def tracked(cfg: EvalConfig, run_dir: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """:func:`run` with the trackers ``cfg.logger`` names started first (one line and exit 2 if one cannot start),
    sent the metrics at the checkpoint's step, and closed as the evaluation ended. The tracker run is linked to the
    evaluated run as a revived run is (sesa_cli.loggers)."""
    from sesa_cli.commands.revive import parent_loggers
    from sesa_cli.loggers import attached
    from sesa_cli.runs import RunDir, atomic_write_text, read_run_info, resolve_checkpoint, run_dir_of_checkpoint

    parent = None
    if cfg.ckpt and cfg.logger:
        ckpt = resolve_checkpoint(cfg.ckpt)
        parent_run = run_dir_of_checkpoint(ckpt)
        parent = {"checkpoint": ckpt, "run_dir": parent_run, "loggers": parent_loggers(parent_run)}
    with attached(RunDir(run_dir), cfg.logger, cfg.logger_options, resolved_yaml(cfg), parent) as trackers:
        metrics = run(cfg, run_dir, overrides)
        trackers.log(metrics)
        if trackers:  # run.json names the tracker runs, as a training run's does
            info = read_run_info(run_dir / "run.json")
            atomic_write_text(run_dir / "run.json", json.dumps({**info, "loggers": trackers.references()}, indent=2))
    return metrics


def job(cfg: DictConfig) -> tuple[Path, dict[str, Any]]:
    """The command inside its Hydra job (``main`` and sesa_cli.api run it): (run dir, metrics)."""
    from sesa_cli.commands.reload import checkpoint_job

    return checkpoint_job("eval", cfg, tracked)


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="eval")
def main(cfg: DictConfig) -> None:
    run_command("eval", lambda: job(cfg))
