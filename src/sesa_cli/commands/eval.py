"""``sesa eval``: success, pass@k, coverage@k, distinct@k and entropy of a checkpoint (or a base model), and the exact
``policy/*`` metrics where the task can enumerate its solutions."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from sesa_cli.commands.common import (
    hydra_context,
    joblib_cpu_budget,
    resolved_yaml,
    seed_everything,
    user_errors,
)
from sesa_cli.config import EvalConfig, conf_dir, register_configs

log = logging.getLogger("sesa.eval")
register_configs()


def run(cfg: EvalConfig, run_dir: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Evaluate and write ``samples.jsonl`` + ``metrics.json`` (+ ``policy_probs.jsonl`` where the task has exact
    policy metrics) under ``run_dir``; return the metrics."""
    from sesa_cli.runs import RunDir, atomic_write_text, check_checkpoint, resolve_checkpoint

    ckpt = resolve_checkpoint(cfg.ckpt) if cfg.ckpt else None
    step = check_checkpoint(ckpt)["step"] if ckpt else 0  # every file it holds, before any model work (or imports)

    import torch
    from rich.console import Console
    from rich.table import Table

    from sesa_cli.evaluation import ExactPolicy, draw, greedy_summary, sample_records, summarize
    from sesa_cli.models.loading import load_checkpoint, load_policy
    from sesa_cli.rollout.samplers import ParallelSampler, make_sampler
    from sesa_cli.tasks.base import make_task

    seed_everything(cfg.seed)
    run = RunDir(run_dir)
    task = make_task(cfg.task, cfg.seed)
    policy = load_checkpoint(ckpt, cfg.model, task, cfg.device) if ckpt else load_policy(cfg.model, task, cfg.device)
    run.write_run_info("eval", overrides or [], parent=str(ckpt) if ckpt else None)
    sampler = make_sampler(cfg.sampler, task, policy, cfg.model.dtype)
    instances = [task.instance("val", i) for i in range(cfg.eval.instances)]
    groups = draw(sampler, instances, cfg.eval.n, torch.Generator().manual_seed(cfg.seed), cfg.model.max_batch_rows)
    metrics: dict[str, Any] = {"step": step, **summarize(task, groups)}
    greedy = ParallelSampler(cfg.sampler, task, policy, cfg.model.dtype, greedy=True)
    metrics.update(greedy_summary(greedy, instances, cfg.model.max_batch_rows))
    plain = ParallelSampler(cfg.sampler, task, policy, cfg.model.dtype)  # the plain prompt, whatever cfg.sampler is
    exact = ExactPolicy(plain, instances, rows=cfg.model.max_batch_rows or 256)
    if exact.available:
        probs = exact.probs()
        metrics.update(exact.summary(probs, cfg.eval.n))
        run.log_policy_probs(exact.record(metrics["step"], probs))
    metrics.update({"eval/n": cfg.eval.n, "eval/instances": cfg.eval.instances, "ckpt": str(ckpt) if ckpt else None})
    records = sample_records(groups, policy.decode)
    atomic_write_text(run.path / "samples.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    atomic_write_text(run.path / "metrics.json", json.dumps(metrics, indent=2))
    table = Table(title=f"sesa eval: {ckpt or cfg.model.name} on task={task.name} sampler={cfg.sampler.name}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        if key.startswith(("eval/", "policy/")):
            table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    Console().print(table)
    log.info("wrote %s and %s", run.path / "metrics.json", run.path / "samples.jsonl")
    return metrics


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="eval")
def main(cfg: DictConfig) -> None:
    from sesa_cli.commands.reload import command_config

    with user_errors("eval"):
        joblib_cpu_budget()
        run_dir, overrides = hydra_context()
        config = command_config("eval", cfg, overrides)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(resolved_yaml(config))
        run(config, run_dir, overrides)
