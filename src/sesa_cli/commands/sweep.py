"""A sweep's jobs own their dirs before Hydra writes into them, and rerunning a sweep resumes it.

Hydra's ``run_job`` creates a job's dir, configures its log file and writes ``.hydra/`` there before any callback or
task code runs, and a job that raises ``SystemExit`` ends the whole sweep. So the decision is taken where Hydra asks
for the job's dir: ``hydra.sweep.subdir`` goes through sesa's resolver ``${sesa_job_dir:...}`` (conf/hydra/default.yaml;
a user's own ``hydra.sweep.subdir`` is wrapped the same way by :func:`wrapped_subdir`), which every launcher
(basic, joblib, Ray, submitit) evaluates inside ``run_job``, on the machine that runs the job, before anything is
written. The resolver locks the job's dir (sesa_cli.run_lock) and reads what it holds (sesa_cli.commands.rundir):

* nothing, or an unfinished run of this very job (an interrupted sweep's): the job owns the dir, and resumes that
  run (``train.resume=auto``);
* a finished run of this very job: the job is done already (a rerun of the sweep skips it);
* another run, a report, a dir in use by another command: the job is **refused**; a dir that cannot be written (a
  file in the way, a name too long, no permission): the job **failed**.

A job that does not own its dir is pointed at a scratch dir of its own for Hydra's bookkeeping (removed when it
ends), prints one line and returns; the other jobs run. Each job records how it ended in ``<sweep dir>/.sesa-jobs/``
(:func:`record`), and the sweep ends with a summary read from those records (sesa_cli.commands.ending.SweepEnding):
N finished, M refused, K failed, each with its dir; the exit code is non-zero only if a job failed (or the sweep
was stopped). A stop signal to the sweep's own process stops it after the running jobs' checkpoints
(:func:`stop_sweep`): jobs not started yet do nothing, and the same command resumes the sweep. The jobs of a sweep
whose own process is gone (killed) stop after their step's checkpoint too (:func:`_asked_to_stop`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sesa_cli import run_lock
from sesa_cli.commands import interrupt
from sesa_cli.commands.common import drop_empty_run_dir, user_errors
from sesa_cli.commands.compose import compose
from sesa_cli.commands.rundir import (
    check_report_dir,
    discard_staged,
    existing_run,
    resume_plan,
    stage_report,
    wanted_config,
)
from sesa_cli.config import ConfigError, cut, first_line
from sesa_cli.paths import hydra_value, os_reason, sesa_program
from sesa_cli.runs import atomic_write_text, read_metrics
from sesa_cli.yaml_files import read_yaml

T = TypeVar("T")

RESOLVER = "sesa_job_dir"
"""The OmegaConf resolver ``hydra.sweep.subdir`` goes through (conf/hydra/default.yaml)."""
RECORDS = ".sesa-jobs"
"""The sweep dir's record of how each job ended: per run of the sweep's command (its session, :data:`SESSION`),
``<session>/<num>.json`` and, once the sweep is stopped, ``<session>/STOP``."""
COMMANDS = ("train", "revive", "eval", "diversity-report")

_claims: dict[str, JobClaim] = {}
"""Absolute output dir Hydra gave a job -> the job's claim (this process's jobs)."""


@dataclass
class JobClaim:
    """What the resolver decided for one job of a sweep."""

    num: int
    command: str
    sweep_dir: Path
    job_dir: Path
    """The dir the job's run lives in (``hydra.sweep.dir``/``hydra.sweep.subdir``)."""
    outcome: str
    """``own`` (the job runs in ``job_dir``), ``finished`` (done earlier), ``refused`` or ``failed``."""
    reason: str = ""
    output: str = ""
    """The dir Hydra writes the job's bookkeeping to: ``job_dir`` when owned (a report's staging dir), else a scratch
    dir removed when the job ends."""
    resumes: bool = False
    """An owned dir holding an unfinished run of this job: the job continues it."""


def register_resolver() -> None:
    """Register :data:`RESOLVER` (idempotent; every command module does at import, so every launcher's worker that
    unpickles a command's task function has it)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, _job_subdir)


def wrapped_subdir(value: str) -> str:
    """The OmegaConf value of ``hydra.sweep.subdir`` that sends a user's own subdir ``value`` (Hydra's parsed
    value, interpolations and all) through :data:`RESOLVER`."""
    body = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"${{{RESOLVER}:'{body}'}}"


def _in_sweep_job(root: Any) -> bool:
    from omegaconf import OmegaConf

    mode = OmegaConf.select(root, "hydra.mode", default=None)
    return getattr(mode, "name", str(mode)) == "MULTIRUN" and OmegaConf.select(root, "hydra.job.num") is not None


def _job_subdir(subdir: Any, *, _root_: Any) -> str:
    """The resolver: ``subdir`` when the job owns ``hydra.sweep.dir/subdir`` (or outside a sweep job), else an
    absolute scratch dir (os.path.join then ignores the sweep dir) for Hydra's bookkeeping."""
    text = str(subdir)
    if not _in_sweep_job(_root_):
        return text
    sweep_dir = Path(str(_root_.hydra.sweep.dir))
    job_dir = Path(os.path.join(sweep_dir, text))
    for claim in _claims.values():
        if claim.job_dir == job_dir:  # asked again: the same answer
            return claim.output
    num = int(_root_.hydra.job.num)
    command = str(_root_.hydra.job.name).replace("_", "-")
    claim = _claim_job(command, num, sweep_dir, job_dir, _root_)
    if claim.outcome == "own":
        claim.output = claim.output or text
        output = os.path.abspath(os.path.join(sweep_dir, claim.output))
    else:
        claim.output = output = tempfile.mkdtemp(prefix=f"sesa-{command}-job{num}-")
    _claims[output] = claim
    return claim.output


def _claim_job(command: str, num: int, sweep_dir: Path, job_dir: Path, root: Any) -> JobClaim:
    """Lock ``job_dir`` for this process and decide what the job does with it (never raises: a problem is the job's
    outcome)."""
    claim = JobClaim(num, command, sweep_dir, job_dir, "own")
    where = f"job dir {job_dir}"
    overrides = [str(o) for o in root.hydra.overrides.task]
    created = not os.path.lexists(job_dir)
    try:
        run_lock.claim(job_dir, command, overrides, where=where)
        check_writable(job_dir, str(root.hydra.job.name), where)
        if command == "diversity-report":
            check_report_dir(job_dir, where)
        elif command in COMMANDS:
            state = existing_run(command, job_dir, wanted_config(command, _task_config(root), overrides), where,
                                 sweep_job=True)  # fmt: skip
            claim.outcome = "finished" if state == "finished" else "own"
            claim.resumes = state == "resume"
            if claim.resumes:
                resume_plan(job_dir)  # a resume it would refuse fails the job now, before Hydra writes into its dir
        if claim.outcome == "own":
            run_lock.record(job_dir, command, overrides)
            if command == "diversity-report":
                claim.output = str(stage_report(job_dir, where).resolve())  # absolute: os.path.join keeps it
    except run_lock.DirTaken as exc:
        claim.outcome, claim.reason = "refused", str(exc)
    except ConfigError as exc:
        claim.outcome, claim.reason = "failed", str(exc)
    except Exception as exc:  # noqa: BLE001  (the resolver must never raise: Hydra would end the sweep)
        claim.outcome, claim.reason = "failed", f"{where}: {type(exc).__name__}: {first_line(exc)}"
    if claim.outcome != "own":
        run_lock.release(job_dir)
        if created:
            with contextlib.suppress(OSError):
                job_dir.rmdir()  # made only to lock it
    return claim


def _task_config(root: Any) -> Any:
    """The job's config without Hydra's node: what its task function receives."""
    import copy

    from omegaconf import open_dict, read_write

    cfg = copy.deepcopy(root)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    return cfg


def check_writable(run_dir: Path, job_name: str, where: str) -> None:
    """A one-line ConfigError unless Hydra can write its bookkeeping into ``run_dir`` (a file created there, a
    ``.hydra`` dir and a ``<job_name>.log`` file where they exist): what ``run_job`` writes before any sesa code."""
    try:
        tempfile.TemporaryDirectory(dir=run_dir).cleanup()  # os.access is not enough: root passes it
    except OSError as exc:
        raise ConfigError(f"{where} is not writable ({os_reason(exc, run_dir)})") from None
    hydra_dir, log = run_dir / ".hydra", run_dir / f"{job_name}.log"
    if os.path.lexists(hydra_dir) and not hydra_dir.is_dir():
        raise ConfigError(f"{where} is not writable: {hydra_dir} is not a directory")
    if os.path.lexists(log) and not log.is_file():
        raise ConfigError(f"{where} is not writable: {log} is not a file")
    for path in (hydra_dir, log):
        if path.exists() and not os.access(path, os.W_OK):
            raise ConfigError(f"{where} is not writable: permission denied on {path}")


# ------------------------------------------------------------------------------------------------- the job itself
def current_claim() -> JobClaim | None:
    """The claim of the sweep job running in this process (None outside a sweep job)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if getattr(hc.mode, "name", str(hc.mode)) != "MULTIRUN":
        return None
    return _claims.get(os.path.abspath(str(hc.runtime.output_dir)))


def run_command(command: str, body: Callable[[], T], done: Callable[[Path], T] | None = None) -> T | None:
    """A command's Hydra job: ``body()`` inside ``user_errors``. In a sweep job it never ends the sweep: a job that
    does not own its dir prints one line and returns None (``done(run_dir)`` for a job whose run finished earlier);
    an error in ``body`` is that job's failure (one line, or the traceback of a bug), recorded, and None is
    returned; a stop signal checkpoints the job (sesa_cli.commands.interrupt) and records it interrupted. Returns
    ``body()``'s value, or None."""
    claim = current_claim()
    if claim is None:
        with user_errors(command):
            return body()
    try:
        if claim.outcome != "own":
            _announce(claim)
            record(claim, claim.outcome, claim.reason)
            if done is None or claim.outcome != "finished":
                return None
            try:
                return done(claim.job_dir)
            except ConfigError as exc:  # its files cannot be read back: said, and the sweep goes on
                print(cut(f"sesa {command}: job {claim.num}: {exc}"), file=sys.stderr, flush=True)
                record(claim, "failed", str(exc))
                return None
        if _stopped(claim.sweep_dir):
            line = "not started: the sweep was stopped (rerun its command to resume it)"
            print(f"sesa {command}: job {claim.num}: {line}", file=sys.stderr, flush=True)
            record(claim, "not started", "the sweep was stopped")
            drop_empty_run_dir(command)  # Hydra's bookkeeping only
            return None
        return _run_owned(command, claim, body)
    finally:
        _end_job(claim)


def _run_owned(command: str, claim: JobClaim, body: Callable[[], T]) -> T | None:
    ended: list[tuple[str, str]] = []
    record(claim, "running", "")
    try:
        with (
            _stop_noted_in_worker(),
            _asked_to_stop(claim),
            user_errors(command, on_end=lambda status, reason: ended.append((status, reason))),
        ):
            result = body()
    except SystemExit as exc:
        status, reason = ended[-1] if ended else ("failed", f"exit code {exc.code}")
        record(claim, status, reason)
        if status == "interrupted" and _runs_in_sweep_process():
            raise  # the basic launcher runs every job in the sweep's process: the stop ends the sweep
        return None
    except Exception as exc:  # noqa: BLE001  (a bug in one job: its traceback, and the sweep goes on)
        traceback.print_exc()
        record(claim, "failed", f"{type(exc).__name__}: {first_line(exc)}")
        return None
    record(claim, "finished", "")
    return result


def _announce(claim: JobClaim) -> None:
    if claim.outcome == "finished":
        line = f"job {claim.num}: {claim.job_dir} holds this job's finished run: skipped"
    elif claim.outcome == "refused":
        line = f"job {claim.num} skipped: {claim.reason}"
    else:
        line = f"job {claim.num} failed: {claim.reason}"
    print(cut(f"sesa {claim.command}: {line}"), file=sys.stderr, flush=True)


def _end_job(claim: JobClaim) -> None:
    """Give the job's dir back (a worker process runs the next job) and remove its scratch dir, and a report's
    staging dir when the report was not published (the old report stays)."""
    discard_staged()
    run_lock.release(claim.job_dir)
    if claim.outcome != "own":
        shutil.rmtree(claim.output, ignore_errors=True)
    for key, value in list(_claims.items()):
        if value is claim:
            del _claims[key]


def finished_metrics(run_dir: Path) -> dict[str, Any]:
    """A finished run's final metrics as its training returned them: the rows of its last step merged (the last
    training row and the final evaluation)."""
    rows = read_metrics(run_dir / "metrics.jsonl")  # every row's step checked there
    last = max((row["step"] for row in rows), default=None)
    merged: dict[str, Any] = {}
    for row in rows:
        if row["step"] == last:
            merged.update(row)
    return merged


# --------------------------------------------------------------------------------------------------- the records
def record(claim: JobClaim, outcome: str, reason: str) -> None:
    """How job ``claim.num`` ended (or that it is ``running``, with its pid: :func:`stop_sweep`), in the sweep dir
    (best effort: an unwritable sweep dir only loses the summary's line)."""
    data = {"num": claim.num, "dir": str(claim.job_dir), "outcome": outcome, "reason": reason,
            "earlier": claim.outcome == "finished", "resumed": claim.resumes, "pid": os.getpid(),
            "host": socket.gethostname()}  # fmt: skip
    folder = records_dir(claim.sweep_dir)
    with contextlib.suppress(OSError, ConfigError):
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / f"{claim.num}.json", json.dumps(data))


def records_dir(sweep_dir: Path) -> Path:
    """Where this run of the sweep's command (its :data:`SESSION`) records its jobs. A job of an earlier run of the
    same sweep that still runs (a killed sweep's orphan) writes into its own session's folder, never over this run's
    records (the orphans' records once overwrote a rerun's refusals, and its summary said "3 finished, 0
    refused")."""
    return Path(sweep_dir) / RECORDS / os.environ.get(SESSION, "")


def read_records(sweep_dir: Path) -> list[dict[str, Any]]:
    """The records of this run of a sweep's jobs, by job number (a damaged record is skipped)."""
    out = []
    folder = records_dir(sweep_dir)
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("num"), int) and isinstance(data.get("outcome"), str):
            out.append(data)
    return sorted(out, key=lambda d: int(d["num"]))


def clear_records(sweep_dir: Path) -> None:
    """Start a sweep's records afresh (the sweep's own process, before its first job)."""
    shutil.rmtree(Path(sweep_dir) / RECORDS, ignore_errors=True)


def summary(sweep_dir: Path) -> tuple[list[str], int]:
    """The lines that end a sweep (counts, then each job with its dir) and its exit code: 1 if a job failed, else
    0 (a stopped sweep: its signal's code, sesa_cli.commands.interrupt)."""
    records = read_records(sweep_dir)
    if not records:
        return [], 0
    counts: dict[str, int] = {}
    lines = []
    for rec in records:
        outcome = str(rec["outcome"])
        counts[outcome] = counts.get(outcome, 0) + 1
        note = (
            " (earlier)"
            if rec.get("earlier")
            else " (resumed)"
            if rec.get("resumed") and outcome == "finished"
            else ""
        )
        reason = f": {rec['reason']}" if rec.get("reason") and outcome != "finished" else ""
        lines.append(cut(f"  {outcome:<11} {rec.get('dir')}{note}{reason}"))
    order = ["finished", "refused", "failed", "interrupted", "not started", "running"]
    head = ", ".join(f"{counts.get(o, 0)} {o}" for o in order if o in counts or o in ("finished", "refused", "failed"))
    code = 1 if counts.get("failed") else 0
    if _stopped(sweep_dir) or counts.get("interrupted"):
        code = interrupt.exit_code() if code == 0 else code
    return [f"sweep {sweep_dir}: {head}", *lines], code


# ------------------------------------------------------------------------------------------------ stopping a sweep
def _stopped(sweep_dir: Path) -> bool:
    return (records_dir(sweep_dir) / "STOP").exists()


def _stop_signal(sweep_dir: Path) -> int | None:
    """The stop signal this run of the sweep was stopped with (its STOP file), or None while it runs on."""
    try:
        name = (records_dir(sweep_dir) / "STOP").read_text().strip()
    except OSError:
        return None
    return int(getattr(signal, name, signal.SIGTERM))


def _runs_in_sweep_process() -> bool:
    return os.environ.get(MAIN_PID) == str(os.getpid())


MAIN_PID = "SESA_SWEEP_PID"
"""Set by the sweep's own process (the dispatcher) for its jobs: a job running in another process is in a worker."""
SESSION = "SESA_SWEEP_SESSION"
"""Set by the sweep's own process for its jobs: which run of the sweep's command they belong to (:func:`records_dir`)."""


def stop_sweep(sweep_dir: Path, signum: int) -> bool:
    """The sweep's own process got a stop signal while its jobs run in other processes (joblib, Ray, submitit):
    mark the sweep stopped. Jobs not started yet do nothing, and the running ones see the mark at their next step
    boundary (:func:`_asked_to_stop`) and stop after that step's checkpoint, as a single run does. False when a job
    runs in this very process (the basic launcher: the job's own stop policy applies)."""
    records = read_records(sweep_dir)
    host = socket.gethostname()
    if any(r["outcome"] == "running" and r.get("host") == host and r.get("pid") == os.getpid() for r in records):
        return False
    with contextlib.suppress(OSError):
        records_dir(sweep_dir).mkdir(parents=True, exist_ok=True)
        (records_dir(sweep_dir) / "STOP").write_text(signal.Signals(signum).name)
    return True


@contextlib.contextmanager
def _asked_to_stop(claim: JobClaim) -> Iterator[None]:
    """While the job runs, its trainer asks at every step boundary (sesa_cli.commands.interrupt.stop_poll) whether
    the sweep asks it to stop: the sweep was stopped (its STOP mark, with the signal it got), or the sweep's own
    process is gone while this job runs in a worker it started (joblib's: the worker's parent changed), whose
    orphaned jobs used to train to their end and hold their dirs."""
    parent = os.getppid()
    started_by_sweep = os.environ.get(MAIN_PID) == str(parent)

    def poll() -> tuple[int, str | None] | None:
        signum = _stop_signal(claim.sweep_dir)
        if signum is not None:
            return signum, None
        if started_by_sweep and os.getppid() != parent:
            return int(signal.SIGTERM), "the sweep's own process is gone"
        return None

    previous = interrupt.stop_poll
    interrupt.stop_poll = poll
    try:
        yield
    finally:
        interrupt.stop_poll = previous


@contextlib.contextmanager
def _stop_noted_in_worker() -> Iterator[None]:
    """In a launcher's worker process (no dispatcher there to catch a stop signal), a stop signal during the job's
    start-up is noted instead of killing the worker: the trainer stops after its first step's checkpoint
    (sesa_cli.commands.interrupt.stop_after_step reads it)."""
    if _runs_in_sweep_process():
        yield
        return
    with interrupt.noting_stops():
        yield


# ------------------------------------------------------------------------------------- the sweep's own process
SWEEP_COMMAND = "SESA_SWEEP_COMMAND"
"""The command line that resumes the sweep (set by :func:`prepare_sweep`, read by an interrupted job's ending)."""


def task_overrides(overrides: list[str]) -> list[str]:
    """The overrides Hydra counts as the job's (``hydra.overrides.task``): all but Hydra's own."""
    return [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]


def other_sweep(sweep_dir: Path, config_name: str, overrides: list[str]) -> str | None:
    """A one-line refusal when ``sweep_dir`` holds another sweep (its multirun.yaml names another command or other
    overrides): its job dirs and its multirun.yaml would describe two sweeps. None for a new dir, or a rerun of the
    same sweep (which resumes it)."""

    path = Path(sweep_dir) / "multirun.yaml"
    if not path.is_file():
        return None
    where = f"hydra.sweep.dir={sweep_dir} holds another sweep"
    try:
        found = read_yaml(path, "sweep file")
    except ConfigError as exc:
        return f"{where} (its multirun.yaml cannot be read: {exc}); choose a new directory"
    hydra = found.get("hydra") if isinstance(found, dict) else None
    job = hydra.get("job") if isinstance(hydra, dict) else None
    recorded = (hydra.get("overrides") or {}).get("task") if isinstance(hydra, dict) else None
    name = job.get("config_name") if isinstance(job, dict) else None
    if name != config_name:
        return f"{where} (of sesa {cut(str(name), 40).replace('_', '-')}); choose a new directory"
    wanted = task_overrides(overrides)
    if recorded != wanted:
        theirs = [str(o) for o in recorded] if isinstance(recorded, list) else []
        only_theirs = [o for o in theirs if o not in wanted]
        only_mine = [o for o in wanted if o not in theirs]
        if only_theirs or only_mine:
            ran = " ".join(cut(o, 60) for o in only_theirs[:4]) or "nothing more"
            here = " ".join(cut(o, 60) for o in only_mine[:4]) or "nothing more"
            differs = f"it ran {ran} where this command has {here}"
        else:
            differs = "its overrides in another order, which numbers its jobs otherwise"
        return f"{where} ({differs}); rerun that sweep's own command to resume it, or choose a new directory"
    return None


def prepare_sweep(command: str, argv: list[str], overrides: list[str]) -> list[str]:
    """What the dispatcher does before handing a sweep (``-m``) to Hydra: the sweep dir pinned (its default names the
    current second) and locked for this process (a second sweep into it is refused), every job's dir routed through
    :data:`RESOLVER`, the command that resumes the sweep noted for the jobs, stop signals passed to the jobs
    (:func:`stop_sweep`), and the callback that prints the sweep's summary. ``argv``: the user's own arguments
    (what the resume command repeats); returns the overrides Hydra runs with."""
    import shlex

    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = get_args_parser().parse_args(overrides)
    if not args.multirun or args.cfg or args.info or args.help or args.hydra_help or args.shell_completion:
        return overrides
    parsed = OverridesParser.create().parse_overrides(args.overrides)
    fixed = [line for line, ov in zip(args.overrides, parsed, strict=True) if not ov.is_sweep_override()]
    hydra = compose(command.replace("-", "_"), fixed, hydra=True).hydra
    sweep_dir = Path(str(hydra.sweep.dir)).expanduser()
    rest = list(overrides)
    resume = ["sesa", command, *argv]
    if not any(o.lstrip("+").startswith("hydra.sweep.dir=") for o in overrides):
        pinned = f"hydra.sweep.dir={hydra_value(str(sweep_dir))}"
        rest.append(pinned)
        resume.append(pinned)
    run_lock.claim(sweep_dir, command, argv, key="hydra.sweep.dir")
    run_lock.record(sweep_dir, command, argv)
    subdir = next((o for o in overrides if o.lstrip("+").startswith("hydra.sweep.subdir=")), None)
    if subdir is not None:  # the user's own subdir, through the resolver too
        value = str(OverridesParser.create().parse_overrides([subdir])[0].value())
        wrapped = wrapped_subdir(value)
        line = f'hydra.sweep.subdir="{wrapped.replace(chr(34), chr(92) + chr(34))}"'
        if str(OverridesParser.create().parse_overrides([line])[0].value()) != wrapped:
            raise ConfigError(f"{cut(subdir)}: a sweep subdir with both quotes and backslashes is not supported")
        rest = [line if o is subdir else o for o in rest]
    os.environ[MAIN_PID] = str(os.getpid())
    os.environ[SESSION] = uuid.uuid4().hex[:12]
    os.environ[SWEEP_COMMAND] = " ".join([sesa_program(), *(shlex.quote(a) for a in resume[1:])])
    interrupt.on_first_stop = lambda signum: stop_sweep(sweep_dir, signum)
    if "ray" in str(hydra.launcher.get("_target_", "")).lower():
        _keep_stop_policy_under_ray()
    return [*rest, "+hydra.callbacks.sesa_ending._target_=sesa_cli.commands.ending.SweepEnding"]


def resume_command() -> str | None:
    """The command line that resumes the sweep this job belongs to, when its process knows it (a worker on another
    machine may not)."""
    return os.environ.get(SWEEP_COMMAND)


def end_sweep() -> None:
    """Forget what :func:`prepare_sweep` set in this process (a sweep run in-process, from tests or a notebook)."""
    os.environ.pop(MAIN_PID, None)
    os.environ.pop(SESSION, None)
    os.environ.pop(SWEEP_COMMAND, None)
    interrupt.on_first_stop = None


def _keep_stop_policy_under_ray() -> None:
    """Hydra's Ray launcher calls ``ray.init`` in the sweep's own process, which replaces its SIGTERM handling twice:
    a Python handler that exits at once and a C-level crash handler that aborts, so a SIGTERM to the sweep would end
    it without its jobs' checkpoints (the Ray workers then die with the driver). The sweep's process keeps sesa's
    stop policy instead (:func:`stop_sweep`); Ray's workers keep Ray's own handling, which sesa's trainer replaces
    while a job trains. Only in this process, only for the sweep."""
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")  # read by ray.init (the driver's core worker)
    try:
        import ray._private.utils as ray_utils
    except ImportError:  # no Ray: hydra/launcher=ray is refused before this (sesa_cli.commands.compose)
        return
    original: Callable[[Any], None] = ray_utils.set_sigterm_handler
    sweep_process = os.getpid()

    def keep_sesas(handler: Any) -> None:
        if os.getpid() != sweep_process:
            original(handler)

    ray_utils.set_sigterm_handler = keep_sesas
