"""``sesa revive ckpt=RUN_DIR|CHECKPOINT [step=auto|last|N] [overrides]``: continue a run with new settings.

Reloads the parent run's config, applies the overrides (typically ``sampler=sequential``), restores weights,
optimizer, step counter, data position and RNG, and trains ``more_steps`` further steps in a new run dir whose
metrics continue the parent's step numbering. ``run.json`` records the parent checkpoint and the overrides.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from sesa_cli.commands.common import (
    resolved_yaml,
    seed_everything,
)
from sesa_cli.commands.reload import checkpoint_job
from sesa_cli.commands.schemas import register_configs
from sesa_cli.commands.sweep import run_command
from sesa_cli.config import ConfigError, ReviveConfig, conf_dir

log = logging.getLogger("sesa.revive")
register_configs()


def run(cfg: ReviveConfig, run_dir: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    from sesa_cli.commands.reload import check_checkpoint_model, with_total_steps
    from sesa_cli.commands.rundir import check_existing, resume_point
    from sesa_cli.runs import (
        ReplicaRunDir,
        RunDir,
        check_checkpoint,
        read_metrics,
        read_trainer_state,
        run_dir_of_checkpoint,
    )

    cfg, ckpt, start = with_total_steps(cfg)
    check_checkpoint(ckpt, training=True)  # every file it holds, before any model work (or its imports)
    check_checkpoint_model(ckpt, cfg)  # the run's own checkpoint, able to write this task's prompts
    resolved = resolved_yaml(cfg)

    from sesa_cli.commands.registered import check_registered
    from sesa_cli.commands.train import fit, last_checkpoint, previous_resumes
    from sesa_cli.distributed import replicas
    from sesa_cli.loggers import attached
    from sesa_cli.models.loading import load_base, load_checkpoint
    from sesa_cli.models.reference import check_rebuilt, parent_record
    from sesa_cli.progress import phase
    from sesa_cli.runs import ended_badly
    from sesa_cli.tasks.base import make_task
    from sesa_cli.trainer import Trainer

    check_registered(cfg)  # every name a registry holds, before any model work
    if cfg.step == "auto":
        flagged = read_trainer_state(ckpt, training=True)["collapse"].get("first_flag_step")
        log.info("step=auto: the collapse monitor first flagged step %s; reviving from its first checkpoint since, "
                 "step %d (%s)", flagged, start, ckpt)  # fmt: skip
    parent_run = run_dir_of_checkpoint(ckpt)
    bad = ended_badly(parent_run)
    if bad:
        log.warning("%s is %s; reviving its checkpoint at step %d", parent_run, bad, start)
    # The parent's metrics up to the checkpoint, so the new run's curves read as one continuous history.
    history = [r for r in read_metrics(parent_run / "metrics.jsonl") if r.get("step", 0) <= start]
    reference = parent_record(parent_run)
    dist = replicas(cfg.device)  # one process unless started by `accelerate launch` (sesa_cli.distributed)
    # The same revive command rerun into its own dir continues it (train.resume=auto, as sesa train does).
    own = None
    if dist.is_main:
        own = resume_point(run_dir) if check_existing("revive", run_dir, resolved) else None
    elif cfg.train.resume == "auto":  # rank 0 decided before any replica could write a checkpoint
        own = last_checkpoint(run_dir)
    run = RunDir(run_dir) if dist.is_main else ReplicaRunDir(run_dir)
    run.write_config(resolved)
    parent = {"checkpoint": ckpt, "run_dir": parent_run, "loggers": parent_loggers(parent_run)}
    # The trackers start (or fail, one line) before any model work.
    with attached(run, cfg.logger, cfg.logger_options, resolved, parent) as trackers:
        seed_everything(cfg.seed)
        task = make_task(cfg.task, cfg.seed)
        device = dist.device or cfg.device
        base = None
        if cfg.model.lora or cfg.algo.kl_coef > 0:
            # The KL reference is the base the parent's lineage started from (sesa_cli.models.reference), never the
            # checkpoint; a LoRA checkpoint's adapter also sits on that base.
            try:
                with phase(f"model load (the base of {parent_run})"):
                    base = load_base(cfg.model, task, device)
            except ConfigError as exc:
                raise ConfigError(f"the base model {parent_run} started from cannot be rebuilt: {exc}") from None
            reference = check_rebuilt(reference, base, parent_run)
        resumed: dict[str, Any] = {"resumed": [*previous_resumes(run_dir), int(own.name[5:])]} if own else {}
        run.write_run_info("revive", overrides or [], parent=str(ckpt), parent_step=start, parent_run=str(parent_run),
                           kl_reference=reference, loggers=trackers.references(), **resumed)  # fmt: skip
        if own is None:
            for row in history:
                run.log_metrics({**row, "revive/parent": 1})
            for record in read_metrics(parent_run / "policy_probs.jsonl"):
                if record.get("step", 0) <= start:
                    run.log_policy_probs(record)
        restore = own or ckpt
        with phase(f"model load ({restore})"):
            policy = load_checkpoint(restore, cfg.model, task, device, base=base)
        # LoRA: the trainer disables the adapter for the reference; otherwise the rebuilt base is the reference model.
        trainer = Trainer(cfg, task, policy, run, dist,
                          reference=None if cfg.model.lora or base is None else base.model)  # fmt: skip
        trainer.load_checkpoint(restore)
        trainer.resumed = own is not None
        log.info("reviving %s at step %d with overrides %s%s", ckpt, start, overrides,
                 f" (resumed from its own checkpoint at step {trainer.step})" if own else "")  # fmt: skip
        return fit(trainer, run_dir, show_progress=dist.is_main, command="revive")


def parent_loggers(parent_run: Path) -> dict[str, Any]:
    """The tracker references the parent's run.json recorded (sesa_cli.loggers), so a revived run links to its parent
    in the same tracker; {} when it has none."""
    from sesa_cli.runs import read_run_info

    try:
        refs = read_run_info(parent_run / "run.json").get("loggers")
    except ConfigError:
        return {}
    return refs if isinstance(refs, dict) else {}


def job(cfg: DictConfig) -> tuple[Path, dict[str, Any]]:
    """The command inside its Hydra job (``main`` and sesa_cli.api run it): (run dir, final metrics)."""
    return checkpoint_job("revive", cfg, run)


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="revive")
def main(cfg: DictConfig) -> None:
    run_command("revive", lambda: job(cfg))
