"""Whose run dir it is: the lock a command takes on it (sesa_cli.run_lock), what a dir that already holds a run (or
a report) means for the command, whether ``sesa train`` resumes it (``train.resume``), and a report's dir.

Order, for ``sesa train|revive|eval`` (one run, rank 0): the dispatcher validates the overrides, then
:func:`claim_planned_run_dir` locks the dir the job will write (before Hydra's job writes ``.hydra/`` there) and
checks what the dir holds (:func:`existing_run`), so a second command into a dir in use, into a finished run or into
a report stops with one line having changed nothing in it; a sweep's job takes its dir the same way where Hydra asks
for it (sesa_cli.commands.sweep). ``sesa train``/``revive`` then ask :func:`check_existing` and :func:`resume_point`
whether they continue the run they found. ``sesa diversity-report`` locks its dir likewise, never into a run
(:func:`check_report_dir`), and writes into a staging dir that replaces the report dir whole when it is done
(:func:`stage_report`, :func:`publish_report`). Never imports torch.
"""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path
from typing import Any

from sesa_cli.config import ConfigError, cut
from sesa_cli.deprecations import upgrade_config
from sesa_cli.paths import hydra_value, path_error, replace_dir
from sesa_cli.run_lock import DirTaken
from sesa_cli.runs import ResumeRefused, atomic_write_text, read_run_info
from sesa_cli.yaml_files import read_yaml

log = logging.getLogger("sesa")

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
    none to lock; the caller releases it when the command ends, and calls :func:`discard_staged`) and the overrides
    the job runs with: the default dir, which names the current second, is pinned so the job writes the dir that
    was locked; a report is written into a staging dir beside its own and replaces it whole when it is done
    (:func:`stage_report`)."""
    import os

    from sesa_cli import run_lock

    if command not in (*RUN_COMMANDS, "diversity-report") or os.environ.get("RANK", "0") != "0":
        return None, overrides  # rank 0 owns a data-parallel run's dir
    run_dir = planned_run_dir(command.replace("-", "_"), overrides)
    if run_dir is None:
        return None, overrides
    check_own_dir(run_dir, overrides)
    created = not run_dir.exists()
    run_lock.claim(run_dir, command, overrides)
    try:
        if command == "diversity-report":
            check_report_dir(run_dir, f"hydra.run.dir={run_dir}")
        elif check_existing(command, run_dir, _resolved_config(command, overrides)):
            resume_plan(run_dir)  # a resume it would refuse is refused now, before Hydra's job writes into the dir
        run_lock.record(run_dir, command, overrides)
        if command == "diversity-report":
            staging = stage_report(run_dir, f"hydra.run.dir={run_dir}")
    except BaseException:
        run_lock.release(run_dir)
        if created:  # leave no empty dir behind a refused command
            with contextlib.suppress(OSError):
                run_dir.rmdir()
        raise
    if command == "diversity-report":
        if created:
            _created.add(run_dir.resolve())
        return run_dir, [*overrides, f"hydra.run.dir={hydra_value(str(staging))}"]
    if not any(o.lstrip("+").startswith("hydra.run.dir=") for o in overrides) and re.fullmatch(
        r"[\w./:-]+", str(run_dir)
    ):
        overrides = [*overrides, f"hydra.run.dir={run_dir}"]  # outputs/<command>/<date>/<time>: no quoting needed
    return run_dir, overrides


def _resolved_config(command: str, overrides: list[str], sweep_job: bool = False) -> str | None:
    """The resolved config ``sesa <command> <overrides>`` writes to config.yaml (a revive's: its parent's config
    with the overrides and its total of steps), where the command continues or skips a run it finds (``train`` and
    ``revive``; ``eval`` in a sweep, which skips a finished job); else None."""
    if command not in RESUMABLE and not (sweep_job and command == "eval"):
        return None
    from hydra._internal.utils import get_args_parser

    from sesa_cli.commands.compose import compose

    args = get_args_parser().parse_args(overrides).overrides
    return wanted_config(command, compose(command, args), args)


def wanted_config(command: str, composed: Any, overrides: list[str]) -> str:
    """The resolved YAML a run of ``command`` (its composed DictConfig, its task ``overrides``) writes to its
    config.yaml: what a run found in its dir must equal for the command to continue or skip it."""
    from sesa_cli.commands.common import resolved_yaml

    if command == "train":
        return resolved_yaml(composed)
    from sesa_cli.commands.reload import command_config, with_total_steps

    config = command_config(command, composed, overrides)
    return resolved_yaml(with_total_steps(config)[0] if command == "revive" else config)


def check_own_dir(run_dir: Path, overrides: list[str]) -> None:
    """A one-line ConfigError when ``run_dir`` is the working directory (``hydra.run.dir=.``, or empty): a command
    writes config.yaml, run.json, its log and its records into its dir, and there they would land among the user's
    own files (a rerun would even take them for a run's)."""
    import os

    if os.path.abspath(run_dir) != os.getcwd():
        return
    typed = [line.partition("=")[2] for line in overrides if line.lstrip("+").startswith("hydra.run.dir=")]
    where = f"hydra.run.dir={typed[-1]}" if typed and typed[-1].strip("'\"") else "hydra.run.dir= (empty)"
    raise ConfigError(
        f"{cut(where)} is the working directory; a command writes config.yaml, run.json and more into its dir: name "
        "a directory of its own, e.g. hydra.run.dir=outputs/mine"
    )


SESA_MARKS = (".hydra", ".sesa.lock", "run.json")
"""What a dir a sesa command wrote into holds from its first moment (Hydra's .hydra/, the owner's record, run.json):
a dir without any of them holds no sesa run, whatever its files are named."""


def foreign_files(run_dir: Path) -> list[str]:
    """The names in an existing ``run_dir`` that no sesa command wrote: every entry, when the dir holds none of
    :data:`SESA_MARKS` (or its run.json is not a sesa run's); [] for a new or empty dir, or a sesa run dir."""
    try:
        names = sorted(p.name for p in run_dir.iterdir())
    except OSError:
        return []
    marks = [name for name in SESA_MARKS if name in names]
    if marks == ["run.json"] and not {"id", "command"} <= set(_run_info(run_dir)):
        marks = []  # another program's run.json
    return [] if marks else names


def foreign_problem(run_dir: Path, where: str) -> str | None:
    """The refusal of a run dir (named ``where``) that holds files no sesa command wrote (:func:`foreign_files`)."""
    foreign = foreign_files(run_dir)
    if not foreign:
        return None
    shown = ", ".join(cut(name, 40) for name in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
    return (
        f"{where} holds files sesa did not write ({shown}); a command writes config.yaml, run.json and its log into "
        "its dir: choose a new or empty directory"
    )


def held_files(run_dir: Path) -> list[str]:
    return [name for name in RUN_FILES if (run_dir / name).exists()]


REPORT_FILES = ("report.html", "report.md", "summary.csv", "groups.csv")
"""What makes a dir hold a diversity report (sesa_cli.report.document.write_report)."""


def report_files(path: Path) -> list[str]:
    return [name for name in REPORT_FILES if (path / name).exists()]


def check_existing(command: str, run_dir: Path, resolved: str | None, key: str = "hydra.run.dir") -> bool:
    """Whether ``run_dir`` holds a run the command continues (``sesa train``/``revive`` with ``train.resume=auto``,
    of a run of the same command that did not finish and has the same config ``resolved``); False for a dir that
    holds no run. A one-line ConfigError (:class:`~sesa_cli.run_lock.DirTaken`) when the dir holds a run the
    command must not touch, or a report."""
    return existing_run(command, run_dir, resolved, f"{key}={run_dir}") == "resume"


def existing_run(command: str, run_dir: Path, resolved: str | None, where: str, sweep_job: bool = False) -> str:
    """What ``run_dir`` (named ``where`` in a refusal) holds for ``sesa <command>`` whose config.yaml would be
    ``resolved``: ``"none"`` (no run: the command starts its own), ``"resume"`` (an unfinished run of this command
    and config that it continues: ``train.resume=auto``) or, for a sweep job (``sweep_job``), ``"finished"`` (a
    finished run of this very command and config: the job is done, a rerun of the sweep skips it). A one-line
    :class:`~sesa_cli.run_lock.DirTaken` when the dir holds a run or a report the command must not touch."""
    held = held_files(run_dir)
    if not held:
        reports = report_files(run_dir)
        if reports:
            raise DirTaken(f"{where} holds a report ({reports[0]}); choose a new directory")
        problem = foreign_problem(run_dir, where)
        if problem:  # the user's own files: a run would write over config.yaml or train.log, and mix with the rest
            raise DirTaken(problem)
        return "none"
    refuse = f"{where} already holds a run ({held[0]})"
    info = _run_info(run_dir)
    finished = info.get("status") == "finished"
    if resolved is None:
        raise DirTaken(f"{refuse}; choose a new directory")
    import yaml

    wanted = yaml.safe_load(resolved) or {}
    resume = (wanted.get("train") or {}).get("resume", "auto")
    if resume == "never" and not (sweep_job and finished):
        raise DirTaken(f"{refuse}; choose a new directory (train.resume=never)")
    if finished and not sweep_job:
        raise DirTaken(f"{refuse} that finished; choose a new directory, or continue it with sesa revive")
    if info.get("command") not in (None, command):
        raise DirTaken(f"{refuse} of sesa {cut(str(info['command']))}; choose a new directory")
    config = run_dir / "config.yaml"
    if not config.is_file():
        raise DirTaken(f"{refuse} without its config.yaml; choose a new directory")
    try:
        found = read_yaml(config)
    except ConfigError as exc:
        raise DirTaken(f"{refuse} whose config.yaml cannot be read ({exc}); choose a new directory") from None
    # a run written before a config key was renamed compares under the current names
    diff = config_differences(upgrade_config(found) if isinstance(found, dict) else {}, wanted)
    if diff:
        shown = ", ".join(cut(d, 60) for d in diff[:3]) + (f" and {len(diff) - 3} more" if len(diff) > 3 else "")
        raise DirTaken(
            f"{refuse}{' that finished' if finished else ''} of another config ({shown}); choose a new directory, "
            "or rerun that run's own command to continue it"
        )
    if finished:
        return "finished"
    if command not in RESUMABLE:
        raise DirTaken(f"{refuse} that did not finish; choose a new directory")
    return "resume"


_created: set[Path] = set()
"""Report dirs this process created to lock them: removed again if the report is not published."""
_staged: dict[Path, Path] = {}
"""Staging dir -> the report dir it replaces when the report is done (:func:`publish_report`)."""

REPORT_BOOKKEEPING = (".hydra", ".sesa.lock")
"""What a report dir may hold besides :data:`REPORT_FILES`, plots and logs, and still be replaced whole."""


def check_report_dir(target: Path, where: str) -> None:
    """A one-line :class:`~sesa_cli.run_lock.DirTaken` when the report dir ``target`` holds a run (a report never
    writes into a run dir), a sweep, or files that are not a report (a rerun replaces the dir whole: they would be
    deleted); a report dir, an empty or a new one pass."""
    held = [name for name in (*RUN_FILES, "run.json", "multirun.yaml") if (target / name).exists()]
    if held:
        what = "a sweep" if held[0] == "multirun.yaml" else "a run"
        raise DirTaken(
            f"{where} holds {what} ({held[0]}); a report never writes into a run dir: choose a new directory"
        )
    if target.is_dir():
        foreign = sorted(
            p.name
            for p in target.iterdir()
            if p.name not in (*REPORT_FILES, *REPORT_BOOKKEEPING, "compare.csv") and p.suffix not in (".png", ".log")
        )
        if foreign:
            shown = ", ".join(cut(name, 40) for name in foreign[:3])
            raise DirTaken(
                f"{where} holds files that are not a sesa report ({shown}); a report replaces its dir whole: choose "
                "a new directory"
            )


def stage_report(target: Path, where: str) -> Path:
    """The staging dir a report for ``target`` (checked: :func:`check_report_dir`, and locked by this process) is
    written into: a hidden dir beside it, which :func:`publish_report` swaps into its place when the report is done,
    so a rerun into a report dir replaces it whole (no stale compare.csv) and a failed or interrupted one leaves the
    old report as it was."""
    import shutil

    staging = target.parent / f".{target.name}.sesa-report"
    try:
        if staging.exists():  # left by a report that was killed: never published
            shutil.rmtree(staging)
        staging.mkdir()
    except OSError as exc:
        raise path_error(exc, where, staging) from None
    _staged[staging.resolve()] = target.resolve()
    return staging


def report_dir_of(out_dir: Path) -> Path:
    """The report dir a report written into ``out_dir`` (a staging dir: :func:`stage_report`) is for; ``out_dir``
    itself when it is not a staging dir."""
    return _staged.get(Path(out_dir).resolve(), Path(out_dir))


def publish_report(out_dir: Path) -> Path:
    """Put a finished report in its place: the staging dir ``out_dir`` (:func:`stage_report`) takes the place
    of its report dir in one step (sesa_cli.paths.replace_dir), and the old report is removed. Returns the report
    dir (``out_dir`` itself when it is not a staging dir)."""
    staging = Path(out_dir).resolve()
    target = _staged.pop(staging, None)
    if target is None:
        return Path(out_dir)
    _created.discard(target)
    replace_dir(staging, target)
    return target


def discard_staged() -> None:
    """Remove the staging dirs of reports that were not published (the report failed or was stopped) and the report
    dirs this process created for them: the old report, if any, stays as it was."""
    import shutil

    for staging in list(_staged):
        _staged.pop(staging)
        shutil.rmtree(staging, ignore_errors=True)
    for target in list(_created):
        _created.discard(target)
        with contextlib.suppress(OSError):
            (target / ".sesa.lock").unlink(missing_ok=True)
            target.rmdir()


def _run_info(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "run.json"
    try:
        return read_run_info(path) if path.is_file() else {}
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
    starts over), checked by :func:`resume_plan`. The records written after it (metrics, policy_probs and eval_counts rows of later
    steps, samples of later steps, unfinished ``.tmp`` checkpoints) are removed, so the resumed run's files read as
    one uninterrupted run; rows of the checkpoint's own step that were cut since are put back."""
    import shutil

    from sesa_cli.runs import CHECKPOINT_RE

    ckpt, step, rows = resume_plan(run_dir)
    for tmp in (run_dir / "checkpoints").glob("*.tmp"):
        shutil.rmtree(tmp, ignore_errors=True)
    for name, lines in rows.items():
        if lines is not None:
            atomic_write_text(run_dir / name, "".join(line + "\n" for line in lines))
    for dump in (run_dir / "samples").glob("step_*.jsonl"):
        m = CHECKPOINT_RE.match(dump.stem)
        if m and int(m.group(1)) > max(step, 0):
            dump.unlink()
    return ckpt


def resume_plan(run_dir: Path) -> tuple[Path | None, int, dict[str, list[str] | None]]:
    """What a resume of ``run_dir`` continues from, changing nothing: (its last checkpoint or None, that step or -1,
    the lines each records file keeps: :func:`kept_rows`). A last checkpoint that fails its checks, or records that
    lost rows the checkpoint's copy cannot give back, is a one-line :class:`~sesa_cli.runs.ResumeRefused`; for a
    damaged checkpoint it names the last intact one and how to continue from it (:func:`damaged_checkpoint`)."""
    from sesa_cli.runs import RECORD_FILES, check_checkpoint, checkpoint_records, list_checkpoints

    ckpts = list_checkpoints(run_dir)
    ckpt = ckpts[-1][1] if ckpts else None
    step, records = -1, {}
    if ckpt is not None:
        try:
            step = int(check_checkpoint(ckpt, training=True)["step"])
            records = checkpoint_records(ckpt)
        except ConfigError as exc:
            raise ResumeRefused(damaged_checkpoint(str(exc), [path for _, path in ckpts], run_dir)) from None
    return ckpt, step, {name: kept_rows(run_dir / name, step, records.get(name), ckpt) for name in RECORD_FILES}


def damaged_checkpoint(problem: str, ckpts: list[Path], run_dir: Path) -> str:
    """The refusal of a resume whose last checkpoint (the last of ``ckpts``) fails its checks (``problem``): the last
    earlier checkpoint that passes them, and how to continue from it (a damaged checkpoint is the user's to move:
    sesa never deletes one)."""
    from sesa_cli.runs import check_checkpoint

    last = ckpts[-1]
    for earlier in reversed(ckpts[:-1]):
        try:
            step = check_checkpoint(earlier, training=True)["step"]
        except ConfigError:
            continue
        return (
            f"{problem}; the run's previous checkpoint, step {step} ({earlier}), is intact: to continue from it, move "
            f"{last} out of {last.parent} and rerun this command"
        )
    return f"{problem}; no earlier checkpoint of the run is intact: choose a new directory"


def kept_rows(path: Path, step: int, copy: dict[str, Any] | None, ckpt: Path | None) -> list[str] | None:
    """The lines of the records file ``path`` (JSON lines) a run resumed at ``step`` keeps: those at or before
    ``step`` (none for -1), byte for byte; a cut last line goes too, and a damaged row earlier than the last is a
    one-line ConfigError naming it (sesa_cli.runs.metric_lines). ``copy``: what the checkpoint ``ckpt`` recorded of
    the file (sesa_cli.manifest.step_records): the rows of its step that a cut end of the file lost are put back
    from it, never dropped without a word (a last row once cut by 40 bytes vanished from the resumed run's
    metrics); rows lost that it cannot give back refuse the resume. None when there is no file."""
    from sesa_cli.runs import checked, metric_lines

    if not path.is_file():
        return None
    lines = [(line, int(row["step"])) for line, row in metric_lines(path)]
    kept = [line for line, at in lines if at <= step]
    if not copy or ckpt is None:
        return kept
    where = f"{ckpt}/records.json: {path.name}"
    copy = checked(copy, where, {"rows": "count", "last": "texts"})
    if len(kept) == copy["rows"]:
        return kept
    before = [line for line, at in lines if at < step]
    if len(before) + len(copy["last"]) == copy["rows"]:
        log.warning("%s: %d row(s) of step %d were cut; restored from the checkpoint's copy (%s)", path,
                    len(copy["last"]) - (len(kept) - len(before)), step, where)  # fmt: skip
        return [*before, *copy["last"]]
    raise ResumeRefused(
        f"{path} holds {len(kept)} rows up to step {step} and its checkpoint recorded {copy['rows']} ({where}): rows "
        "were lost, and the resumed run's records would not read as one run; choose a new directory, or revive the "
        f"checkpoint into one: sesa revive ckpt={ckpt}"
    )
