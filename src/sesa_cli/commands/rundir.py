"""Whose run dir it is: the lock a command takes on it (sesa_cli.run_lock), what a dir that already holds a run
means for the command, and whether ``sesa train`` resumes it (``train.resume``).

Order, for ``sesa train|revive|eval`` (one run, rank 0): the dispatcher validates the overrides, then
:func:`claim_planned_run_dir` locks the dir the job will write (before Hydra's job writes ``.hydra/`` there) and
checks what the dir holds, so a second command into a dir in use, or into a finished run, stops with one line having
changed nothing in it. The job itself locks its actual run dir too (sesa_cli.commands.common's ``user_errors``: a
sweep's job dir is locked there) and ``sesa train``/``revive`` ask :func:`check_existing` and :func:`resume_point`
whether they continue the run they found. Never imports torch.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from sesa_cli.config import ConfigError
from sesa_cli.deprecations import upgrade_config
from sesa_cli.runs import read_json_object, read_yaml

RUN_FILES = ("metrics.jsonl", "metrics.json", "checkpoints")
"""What makes a dir hold a run (its records would be overwritten or mixed)."""

RUN_COMMANDS = ("train", "revive", "eval")
RESUMABLE = ("train", "revive")
"""Commands that continue their own unfinished run when rerun into its dir (``train.resume=auto``)."""


def planned_run_dir(config_name: str, overrides: list[str]) -> Path | None:
    """The run dir ``sesa <command> <overrides>`` will write (``hydra.run.dir`` resolved as its job will), or None
    when it writes none here (``-m``: each job locks its own dir; ``--cfg``, ``--info``: nothing is written)."""
    from hydra._internal.utils import get_args_parser

    from sesa_cli.commands.compose import compose

    args = get_args_parser().parse_args(overrides)
    if args.multirun or args.cfg or args.info or args.shell_completion or args.help or args.hydra_help:
        return None
    hydra = compose(config_name, args.overrides, hydra=True).hydra
    return Path(str(hydra.run.dir)).expanduser()


def claim_planned_run_dir(command: str, overrides: list[str]) -> tuple[Path | None, list[str]]:
    """Lock the run dir of ``sesa <command> <overrides>`` for this process and check what it holds (a one-line
    ConfigError, the lock given back, when the command must not write there). Returns the dir (None when there is
    none to lock; the caller releases it when the command ends) and the overrides the job runs with: the default
    dir, which names the current second, is pinned so the job writes the dir that was locked."""
    import os

    from sesa_cli import run_lock

    if command not in RUN_COMMANDS or os.environ.get("RANK", "0") != "0":  # rank 0 owns a data-parallel run's dir
        return None, overrides
    run_dir = planned_run_dir(command, overrides)
    if run_dir is None:
        return None, overrides
    created = not run_dir.exists()
    run_lock.claim(run_dir, command, overrides)
    try:
        resolved = _resolved_config(command, overrides)
        check_existing(command, run_dir, resolved)
        run_lock.record(run_dir, command, overrides)
    except BaseException:
        run_lock.release(run_dir)
        if created:  # leave no empty dir behind a refused command
            with contextlib.suppress(OSError):
                run_dir.rmdir()
        raise
    if not any(o.lstrip("+").startswith("hydra.run.dir=") for o in overrides) and re.fullmatch(
        r"[\w./:-]+", str(run_dir)
    ):
        overrides = [*overrides, f"hydra.run.dir={run_dir}"]  # outputs/<command>/<date>/<time>: no quoting needed
    return run_dir, overrides


def _resolved_config(command: str, overrides: list[str]) -> str | None:
    """The resolved config ``sesa train``/``revive`` write to config.yaml for ``overrides`` (a revive's: its parent's
    config with the overrides and its total of steps), else None."""
    if command not in RESUMABLE:
        return None
    from hydra._internal.utils import get_args_parser

    from sesa_cli.commands.common import resolved_yaml
    from sesa_cli.commands.compose import compose

    args = get_args_parser().parse_args(overrides).overrides
    composed = compose(command, args)
    if command == "train":
        return resolved_yaml(composed)
    from sesa_cli.commands.reload import command_config, with_total_steps

    return resolved_yaml(with_total_steps(command_config(command, composed, args))[0])


def held_files(run_dir: Path) -> list[str]:
    return [name for name in RUN_FILES if (run_dir / name).exists()]


def check_existing(command: str, run_dir: Path, resolved: str | None, key: str = "hydra.run.dir") -> bool:
    """Whether ``run_dir`` holds a run the command continues (``sesa train``/``revive`` with ``train.resume=auto``,
    of a run of the same command that did not finish and has the same config ``resolved``); False for a dir that
    holds no run. A one-line ConfigError when the dir holds a run the command must not touch."""
    held = held_files(run_dir)
    if not held:
        return False
    refuse = f"{key}={run_dir} already holds a run ({held[0]})"
    if command not in RESUMABLE or resolved is None:
        raise ConfigError(f"{refuse}; choose a new directory")
    import yaml

    wanted = yaml.safe_load(resolved) or {}
    resume = (wanted.get("train") or {}).get("resume", "auto")
    if resume == "never":
        raise ConfigError(f"{refuse}; choose a new directory (train.resume=never)")
    info = _run_info(run_dir)
    if info.get("status") == "finished":
        raise ConfigError(f"{refuse} that finished; choose a new directory, or continue it with sesa revive")
    if info.get("command") not in (None, command):
        raise ConfigError(f"{refuse} of sesa {info['command']}; choose a new directory")
    config = run_dir / "config.yaml"
    if not config.is_file():
        raise ConfigError(f"{refuse} without its config.yaml; choose a new directory")
    try:
        found = read_yaml(config)
    except ConfigError as exc:
        raise ConfigError(f"{refuse} whose config.yaml cannot be read ({exc}); choose a new directory") from None
    # a run written before a config key was renamed compares under the current names
    diff = config_differences(upgrade_config(found) if isinstance(found, dict) else {}, wanted)
    if diff:
        shown = ", ".join(diff[:3]) + (f" and {len(diff) - 3} more" if len(diff) > 3 else "")
        raise ConfigError(
            f"{refuse} of another config ({shown}); choose a new directory, or rerun that run's own command to "
            "continue it"
        )
    return True


def _run_info(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    try:
        return read_json_object(path) if path.is_file() else {}
    except ConfigError:
        return {}


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def config_differences(found: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """``key: run's value -> this command's value`` for every key that differs (``train.resume`` aside: how to
    start, not what to run)."""
    a, b = _flat(found), _flat(wanted)
    keys = sorted((set(a) | set(b)) - {"train.resume"})
    missing = "(unset)"
    a, b = ({k: v for k, v in d.items() if v != []} for d in (a, b))  # an empty list: a key a run did not have
    return [f"{k}: {a.get(k, missing)} -> {b.get(k, missing)}" for k in keys if a.get(k, missing) != b.get(k, missing)]


def resume_point(run_dir: Path) -> Path | None:
    """The checkpoint a resumed run continues from: the run dir's last complete one (None: it has none, the run
    starts over). The records written after it (metrics and policy_probs rows of later steps, samples of later
    steps, unfinished ``.tmp`` checkpoints) are removed, so the resumed run's files read as one uninterrupted run."""
    import shutil

    from sesa_cli.runs import CHECKPOINT_RE, check_checkpoint, list_checkpoints

    ckpts = list_checkpoints(run_dir)
    ckpt = ckpts[-1][1] if ckpts else None
    step = int(check_checkpoint(ckpt, training=True)["step"]) if ckpt is not None else 0
    for tmp in (run_dir / "checkpoints").glob("*.tmp"):
        shutil.rmtree(tmp, ignore_errors=True)
    for name in ("metrics.jsonl", "policy_probs.jsonl"):
        _keep_rows(run_dir / name, step if ckpt is not None else -1)
    for dump in (run_dir / "samples").glob("step_*.jsonl"):
        m = CHECKPOINT_RE.match(dump.stem)
        if m and int(m.group(1)) > step:
            dump.unlink()
    return ckpt


def _keep_rows(path: Path, step: int) -> None:
    """Keep the rows of ``path`` (JSON lines) at or before ``step`` (all gone for -1); a cut last line goes too."""
    import json

    from sesa_cli.runs import atomic_write_text

    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] <= step:
            kept.append(line + "\n")
    atomic_write_text(path, "".join(kept))
