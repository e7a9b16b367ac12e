"""``sesa train``: RL training. ``main`` is the Hydra app; ``run`` does the work and is what tests call."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from omegaconf import DictConfig

from sesa_cli import plugins
from sesa_cli.commands.common import (
    hydra_context,
    resolved_yaml,
    seed_everything,
    torch_threads,
)
from sesa_cli.commands.schemas import register_configs
from sesa_cli.commands.sweep import finished_metrics, run_command
from sesa_cli.config import TrainConfig, conf_dir, to_object

if TYPE_CHECKING:
    from sesa_cli.trainer import Trainer

log = logging.getLogger("sesa.train")
register_configs()


def run(
    cfg: TrainConfig,
    run_dir: Path,
    overrides: list[str] | None = None,
    resolved: str | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Train as configured, writing everything under ``run_dir``; returns the final metrics."""
    from sesa_cli.commands.registered import check_registered
    from sesa_cli.commands.reload import check_checkpoint_model
    from sesa_cli.commands.rundir import check_existing, resume_point
    from sesa_cli.distributed import replicas
    from sesa_cli.loggers import attached
    from sesa_cli.models.loading import load_base, load_checkpoint, load_policy
    from sesa_cli.models.reference import describe
    from sesa_cli.runs import ReplicaRunDir, RunDir
    from sesa_cli.tasks.base import make_task
    from sesa_cli.trainer import Trainer

    check_registered(cfg)  # every name a registry holds, before any model work
    dist = replicas(cfg.device)  # one process unless started by `accelerate launch` (sesa_cli.distributed)
    seed_everything(cfg.seed)
    resolved = resolved or resolved_yaml(cfg)
    # A dir that holds an unfinished run of this config: continue it from its last checkpoint (train.resume=auto);
    # one that holds another run is refused (sesa_cli.commands.rundir). Replicas follow rank 0's files.
    ckpt = None
    if dist.is_main:
        if check_existing("train", run_dir, resolved):
            ckpt = resume_point(run_dir)
            if ckpt is not None:
                check_checkpoint_model(ckpt, cfg)  # its own, not one linked in from another run
    elif cfg.train.resume == "auto":  # rank 0 decided before any replica could write a checkpoint
        ckpt = last_checkpoint(run_dir)
    run = RunDir(run_dir) if dist.is_main else ReplicaRunDir(run_dir)
    run.write_config(resolved)
    # The trackers start (or fail, one line) before any model work.
    with attached(run, cfg.logger, cfg.logger_options, resolved) as trackers:
        task = make_task(cfg.task, cfg.seed)
        from sesa_cli.progress import phase

        device = dist.device or cfg.device
        with phase(f"model load (model={cfg.model.name}, task={task.name})"):
            base = load_base(cfg.model, task, device)
        # The KL reference of this run and of every run revived from it (sesa_cli.models.reference): fingerprinted
        # before a LoRA adapter wraps the base.
        resumed: dict[str, Any] = {"resumed": [*previous_resumes(run_dir), int(ckpt.name[5:])]} if ckpt else {}
        run.write_run_info("train", overrides or [], kl_reference=describe(base), loggers=trackers.references(),
                           **resumed)  # fmt: skip
        if ckpt is None:
            policy = load_policy(cfg.model, task, device, base=base)
            trainer = Trainer(cfg, task, policy, run, dist)
        else:  # as sesa revive restores a checkpoint: the reference stays the base the run started from
            with phase(f"model load ({ckpt})"):
                policy = load_checkpoint(ckpt, cfg.model, task, device, base=base)
            trainer = Trainer(cfg, task, policy, run, dist, reference=None if cfg.model.lora else base.model)
            trainer.load_checkpoint(ckpt)
            trainer.resumed = True
            log.info("resuming %s from its checkpoint at step %d (train.resume=auto)", run_dir, trainer.step)
        return fit(trainer, run_dir, show_progress and dist.is_main, overrides=overrides)


def previous_resumes(run_dir: Path) -> list[int]:
    """The steps an earlier resume of this run continued from (run.json ``resumed``)."""
    from sesa_cli.config import ConfigError
    from sesa_cli.runs import read_run_info

    try:
        steps = read_run_info(run_dir / "run.json").get("resumed") if (run_dir / "run.json").is_file() else None
    except ConfigError:
        return []
    return [s for s in steps if isinstance(s, int)] if isinstance(steps, list) else []


def last_checkpoint(run_dir: Path) -> Path | None:
    from sesa_cli.runs import list_checkpoints

    ckpts = list_checkpoints(run_dir)
    return ckpts[-1][1] if ckpts else None


def fit(trainer: Trainer, run_dir: Path, show_progress: bool = True, command: str = "train",
        overrides: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Run a prepared trainer with the live display; print the ending (base -> trained, the run dir, what to run
    next; for a sequential ``sesa train`` given its ``overrides``, its parallel baseline too), or after Ctrl-C how to
    continue."""
    from sesa_cli.commands.ending import base_row, resume_hint, train_summary
    from sesa_cli.progress import TrainProgress, phase

    cfg = trainer.cfg
    n_params = sum(p.numel() for p in trainer.model.parameters())
    stage1 = trainer.sampler.stage1  # a sequential sampler's resolved stage1 (auto -> ...)
    n_trainable = sum(p.numel() for p in trainer.learner.trainable)
    world = trainer.dist.world
    per_group = trainer.sampler.rows_per_group
    per_step = cfg.train.batch_size * per_group
    log.info(
        "run dir %s | task=%s sampler=%s%s algo=%s | %s params%s | %d prompts x %d = %d rollouts/step%s, <= %d new "
        "tokens each | steps %d..%d",
        run_dir,
        cfg.task.name,
        cfg.sampler.name,
        f"({stage1})" if stage1 else "",
        cfg.algo.name,
        f"{n_params:,}",
        f" ({n_trainable:,} trainable)" if n_trainable != n_params else "",
        cfg.train.batch_size,
        per_group,
        per_step,
        f" over {world} processes ({trainer.local_batch} prompts each)" if world > 1 else "",
        cfg.task.max_new_tokens,
        trainer.step + 1,
        cfg.train.steps,
    )
    from sesa_cli.commands import interrupt

    start = trainer.step
    stop = interrupt.StopRequest()
    monitor = trainer.monitor
    flagged_before = monitor.first_flag_step  # a revived run's parent may have been flagged already

    def on_step(step: int, row: dict[str, Any]) -> None:
        progress.update(step, row)
        if show_progress and flagged_before is None and monitor.first_flag_step == step:
            log.info("collapse flagged at step %d: %s", step, monitor.reading({**progress.policy, **row}))
        stop.check()  # Ctrl-C, SIGTERM, SIGUSR1: the step finished; a checkpoint, then user_errors' one line

    try:
        with (
            TrainProgress(cfg.train.steps, start, show_progress, cfg.train.log_every) as progress,
            interrupt.stop_after_step(f"sesa {command}", stop),
        ):
            final = trainer.fit(on_step=on_step, phase=phase if show_progress else None)
    except KeyboardInterrupt:
        if show_progress and trainer.saved_step:
            resume_hint(run_dir, trainer.saved_step, cfg.train.steps, command)
        if stop.chained is not None and stop.signal is not None and trainer.dist.is_main:
            # submitit's preemption signal: the run dir says so, then submitit requeues this job and exits
            trainer.run.mark_ended("interrupted", interrupt.reason(), interrupt.exit_code())
        stop.after_checkpoint()
        raise
    if trainer.dist.is_main:
        trainer.run.mark_ended("finished")
        protocol = trainer.evaluation.describe()
        base = base_row(trainer.run.read_metrics(), 0 if trainer.resumed else start)
        sequential = command == "train" and cfg.sampler.name == "sequential" and overrides is not None
        train_summary(command, final, base, protocol, run_dir, remaining=cfg.train.steps - start,
                      ran=trainer.step - start, baseline_of=overrides if sequential else None)  # fmt: skip
    return final


def job(cfg: DictConfig) -> tuple[Path, dict[str, Any]]:
    """The command inside its Hydra job (``main`` and sesa_cli.api run it): (run dir, final metrics)."""
    plugins.load(cfg.get("plugins") or [])  # a sweep's job may run in a process of its own
    config = to_object(cfg)
    torch_threads(config.threads)
    run_dir, overrides = hydra_context()
    return run_dir, run(config, run_dir, overrides, resolved_yaml(cfg))


def objective(final: dict[str, Any], name: str) -> float:
    """The value of ``sweep.objective`` in a run's final metrics, as a sweeper reads it; NaN (Optuna records a failed
    trial) when it is not finite (metrics rows hold None there) or the run never logged the key (with a warning: the
    run itself is complete)."""
    value = final.get(name)
    if name not in final:
        logged = ", ".join(sorted(k for k in final if k.startswith(("eval/", "policy/"))))
        log.warning("sweep.objective=%s is not in this run's final metrics; returning NaN (logged: %s)", name, logged)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else math.nan


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="train")
def main(cfg: DictConfig) -> float:
    """The Hydra app; returns ``sweep.objective`` to a sweeper (hydra/sweeper=optuna): a sweep job whose run finished
    earlier returns that run's, one that did not run (refused, failed) NaN."""
    final = run_command("train", lambda: job(cfg)[1], done=finished_metrics)
    return math.nan if final is None else objective(final, str(cfg.sweep.objective))
