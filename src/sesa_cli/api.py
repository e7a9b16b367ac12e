"""A Python API for notebooks and scripts: every command, run exactly as ``sesa <command> <overrides>`` runs it.

Each function takes the overrides a command line would (``["task=path", "train.steps=20"]``), checks them the way the
CLI does (renamed keys upgraded, every value validated: a :class:`~sesa_cli.config.ConfigError` with the CLI's
one-line message instead of exit 2), composes the config with Hydra and runs the command's own Hydra job
(``sesa_cli.commands.<command>.job``) through Hydra's run mode, so the run dir, its ``.hydra/`` files and its log are
the same as the CLI's. ``run_dir`` sets ``hydra.run.dir`` (otherwise the command's default under ``outputs/``)::

    from sesa_cli import api

    parent = api.train(["task=path", "train.steps=20"], run_dir="outputs/api/parent")
    parent.metrics["eval/success"]
    api.revive([f"ckpt={parent.run_dir}", "sampler=sequential", "more_steps=10"], run_dir="outputs/api/revived")
    api.report([f"runs=[{parent.run_dir},outputs/api/revived]"]).files["html"]

One run at a time per process (Hydra's run state is global); sweeps (``-m``) are the CLI's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

__all__ = ["Result", "eval", "report", "revive", "train"]


@dataclass(frozen=True)
class Result:
    """What a command wrote: its run dir, and its final metrics (``train``/``revive``: the last training row merged
    with the final evaluation; ``eval``: metrics.json) or, for ``report``, the files it wrote (``files``)."""

    run_dir: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)


def _dropping_empty_run_dir(command: str, job: Any) -> Any:
    """The command's job, removing its run dir when it fails before writing anything (as the CLI does)."""

    def run(cfg: Any) -> Any:
        from sesa_cli.commands.common import drop_empty_run_dir

        try:
            return job(cfg)
        except BaseException:
            drop_empty_run_dir(command)
            raise

    return run


def _run(command: str, overrides: Sequence[str], run_dir: str | Path | None) -> tuple[Path, dict[str, Any]]:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from sesa_cli.cli import checked_overrides
    from sesa_cli.commands.table import COMMANDS
    from sesa_cli.config import conf_dir

    if isinstance(overrides, str):  # a lone string would be split into characters
        raise TypeError("overrides must be a list of strings, e.g. ['task=path']")
    args = [*overrides, *([f"hydra.run.dir={run_dir}"] if run_dir is not None else [])]
    if any(a in ("-m", "--multirun") or a.startswith("-") for a in args):
        raise ValueError("sesa_cli.api takes overrides only; Hydra flags (-m, --cfg, ...) are the CLI's")
    rest = checked_overrides(command, args)
    module_name = COMMANDS[command][0]
    module = import_module(f"sesa_cli.commands.{module_name}")
    from sesa_cli import run_lock
    from sesa_cli.commands.rundir import claim_planned_run_dir, discard_staged

    GlobalHydra.instance().clear()  # a composition a caller left open (e.g. Hydra's compose API in a notebook)
    locked, rest = claim_planned_run_dir(command, rest)  # the run dir is this call's, as the CLI's (sesa_cli.run_lock)
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir()), job_name=module_name):
            # Hydra's run mode, as @hydra.main runs it: output dir, .hydra/ files, logging, then the job; the job's
            # exception, if any, is raised here.
            hydra_app = GlobalHydra.instance().hydra
            assert hydra_app is not None  # initialize_config_dir just set it
            ret = hydra_app.run(
                config_name=module_name,
                task_function=_on_the_console(_dropping_empty_run_dir(command, module.job)),
                overrides=rest,
            )
    finally:
        discard_staged()  # a report that did not finish: its staging dir (the old report stays)
        if locked is not None:
            run_lock.release(locked)
    path, result = ret.return_value
    return Path(path), result


def _on_the_console(job: Any) -> Any:
    """``job`` with the CLI's console (sesa_cli.progress.use_console) set up inside Hydra's job, after Hydra has
    configured its logging: log lines print once, through the one console, in its format, and third-party progress
    bars (transformers' "Writing model shards") stay off, as in ``sesa <command>``."""

    def run(cfg: Any) -> Any:
        from sesa_cli.progress import use_console

        use_console()
        return job(cfg)

    return run


def train(overrides: Sequence[str] = (), run_dir: str | Path | None = None) -> Result:
    """``sesa train <overrides>``; returns the run dir and the final metrics."""
    path, metrics = _run("train", overrides, run_dir)
    return Result(path, metrics)


def eval(overrides: Sequence[str] = (), run_dir: str | Path | None = None) -> Result:
    """``sesa eval <overrides>`` (``ckpt=RUN_DIR`` or a base model); returns the run dir and metrics.json."""
    path, metrics = _run("eval", overrides, run_dir)
    return Result(path, metrics)


def revive(overrides: Sequence[str] = (), run_dir: str | Path | None = None) -> Result:
    """``sesa revive ckpt=... <overrides>``; returns the new run dir and its final metrics."""
    path, metrics = _run("revive", overrides, run_dir)
    return Result(path, metrics)


def report(overrides: Sequence[str] = (), run_dir: str | Path | None = None) -> Result:
    """``sesa diversity-report runs=[...] <overrides>``; returns the report dir and the files written (``html``,
    ``markdown``, plots, ``notes``)."""
    path, files = _run("diversity-report", overrides, run_dir)
    return Result(path, files=files)
