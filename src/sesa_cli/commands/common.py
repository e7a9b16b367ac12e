"""What every command does at its boundary: typed config, seeding, run-dir metadata, one-line user errors."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sesa_cli.commands import interrupt
from sesa_cli.config import ConfigError, cut, first_line
from sesa_cli.cpus import free_cores
from sesa_cli.paths import user_path_problem
from sesa_cli.runs import ResumeRefused

log = logging.getLogger("sesa")


@contextlib.contextmanager
def user_errors(command: str, on_end: Callable[[str, str], None] | None = None) -> Iterator[None]:
    """Bad input -> one line on stderr and exit 2; Ctrl-C -> a clean exit 130 (the trainer saved a checkpoint).
    Either way, and on any other error, the run dir's run.json records how it ended (``RunDir.mark_ended``), so a
    command that later meets the dir can say it is a failed run; a run dir the command wrote nothing into but its
    bookkeeping is removed instead (:func:`drop_empty_run_dir`). ``on_end(status, reason)`` hears how a command
    that did not finish ended (a sweep job's record: sesa_cli.commands.sweep)."""
    from sesa_cli.progress import use_console

    use_console()
    ended = on_end or (lambda status, reason: None)
    with contextlib.ExitStack() as owning:  # released after the handlers below marked the dir
        try:
            owning.enter_context(_owned_job_dir(command))
            yield
        except KeyboardInterrupt:
            _mark_run_dir(command, "interrupted", interrupt.reason(), interrupt.exit_code())
            drop_empty_run_dir(command)
            ended("interrupted", interrupt.reason())
            interrupt.interrupted(command)
        except Exception as exc:
            problem = user_problem(exc)
            reason = cut(problem) if problem is not None else f"{type(exc).__name__}: {first_line(exc)}"
            if not isinstance(exc, ResumeRefused):  # a refused resume leaves the run's record of how it ended
                _mark_run_dir(command, "failed", reason, 1 if problem is None else 2)
            drop_empty_run_dir(command)
            ended("failed", reason)
            if problem is None:  # a bug: Hydra prints the traceback and exits 1
                raise
            print(f"sesa {command}: error: {reason}", file=sys.stderr)
            raise SystemExit(2) from None


def user_problem(exc: Exception) -> str | None:
    """The one line of an error the user can fix: a ConfigError, or an OSError on a path they named (a name too long,
    a file in the way: sesa_cli.paths); None for a bug."""
    if isinstance(exc, ConfigError):
        return str(exc)
    return user_path_problem(exc, hydra_overrides()) if isinstance(exc, OSError) else None


@contextlib.contextmanager
def _owned_job_dir(command: str) -> Iterator[None]:
    """The Hydra job's run dir locked for this process (sesa_cli.run_lock): a no-op where it was taken before Hydra
    wrote into it (a single run's dir by the dispatcher or sesa_cli.api, a sweep job's by sesa_cli.commands.sweep's
    resolver), else taken here and given back when the job ends. Rank 0 alone: it owns a data-parallel run's dir."""
    from sesa_cli import run_lock

    if command not in ("train", "revive", "eval") or os.environ.get("RANK", "0") != "0":
        yield
        return
    run_dir, overrides = hydra_context()
    taken = run_lock.claim(run_dir, command, overrides)
    try:
        if taken:
            run_lock.record(run_dir, command, overrides)
        yield
    finally:
        if taken:
            run_lock.release(run_dir)


BOOKKEEPING = (".hydra", "config.yaml", "run.json", ".sesa.lock")
"""What a run dir holds before the command produced anything: Hydra's .hydra/ and log, the resolved config,
run.json (started, then how it ended) and the owner's record (sesa_cli.run_lock.LOCK_NAME)."""


def drop_empty_run_dir(command: str) -> None:
    """Remove the running Hydra job's run dir when a failed command left nothing in it but :data:`BOOKKEEPING` and
    logs: no metrics, checkpoint or report to read, revive or compare, and the error went to stderr. Only those
    files are deleted, then the dir if it is empty, so a dir holding anything else is left as it was (best effort:
    the error being reported matters more). A run command removes only a dir it holds the lock of (never the
    bookkeeping of a run another command owns: one refused for a busy dir)."""
    import shutil

    from sesa_cli import run_lock

    if os.environ.get("RANK", "0") != "0":
        return
    try:
        run_dir, _ = hydra_context()
        if command in ("train", "revive", "eval") and not run_lock.holds(run_dir):
            return
        entries = list(run_dir.iterdir()) if run_dir.is_dir() else []
        if not entries or not all(p.name in BOOKKEEPING or p.suffix == ".log" for p in entries):
            return
        for path in entries:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        run_dir.rmdir()
    except Exception:  # noqa: BLE001, S110  (no Hydra job, a file held open elsewhere: the dir stays)
        pass


def _mark_run_dir(command: str, status: str, reason: str, exit_code: int) -> None:
    """Mark the running Hydra job's run dir as ended badly (rank 0 of a run command that holds the dir's lock: not a
    dir another command owns; best effort: the error being reported matters more than the marker)."""
    if command not in ("train", "revive", "eval") or os.environ.get("RANK", "0") != "0":
        return
    try:
        from sesa_cli import run_lock

        run_dir, _ = hydra_context()
        if run_dir.is_dir() and run_lock.holds(run_dir):
            from sesa_cli.runs import RunDir

            RunDir(run_dir).mark_ended(status, reason, exit_code, command=command)
    except Exception:  # noqa: BLE001, S110  (no Hydra job, an unwritable dir: the error line still goes out)
        pass


def seed_everything(seed: int) -> None:
    """The one place seeds are set (python, numpy, torch)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def hydra_overrides() -> list[str]:
    """Every override of the running Hydra job, the user's and Hydra's own ([] outside one)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    hc = HydraConfig.get()
    return [str(o) for o in (*hc.overrides.task, *hc.overrides.hydra)]


def hydra_context() -> tuple[Path, list[str]]:
    """(run dir, the user's overrides) of the running Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    return Path(hc.runtime.output_dir), list(hc.overrides.task)


def resolved_yaml(cfg: Any) -> str:
    """A DictConfig or a config dataclass as resolved YAML."""
    from omegaconf import OmegaConf

    if not isinstance(cfg, dict) and not OmegaConf.is_config(cfg):
        cfg = OmegaConf.structured(cfg)
    return OmegaConf.to_yaml(cfg, resolve=True)


def joblib_cpu_budget() -> int | None:
    """Under ``hydra/launcher=joblib``, this job's share of the CPUs (cpus // n_jobs) for ``threads=auto``.

    joblib's loky workers already export OMP_NUM_THREADS = cpus // n_jobs; ``threads=auto`` makes it explicit for
    torch's intra-op pool (a job that spun up every core's OpenMP threads would starve its neighbours: on a 2-core
    machine 2 jobs x 2 threads run slower than 2 x 1). Returns the thread count, or None when not in a joblib sweep.
    """
    from hydra.core.hydra_config import HydraConfig

    launcher = HydraConfig.get().launcher
    if "JoblibLauncher" not in str(launcher.get("_target_", "")):
        return None
    cpus = os.cpu_count() or 1
    n_jobs = int(launcher.get("n_jobs") or -1)
    if n_jobs < 0:  # joblib: -1 = all cpus, -2 = all but one, ...
        n_jobs = max(1, cpus + 1 + n_jobs)
    threads = max(1, cpus // n_jobs)
    log.info("joblib sweep job: %d of %d cpus (n_jobs=%d)", threads, cpus, n_jobs)
    return threads


HEAP_BYTES = 1 << 30
"""Blocks up to this size come from glibc's heap, and up to this much freed heap is kept (:func:`keep_freed_memory`)."""


def keep_freed_memory() -> None:
    """Let glibc serve tensors up to :data:`HEAP_BYTES` from its heap and keep what they free for the next ones
    (``mallopt``: mmap and trim thresholds), instead of mapping fresh zeroed pages for every large tensor and
    unmapping them when it is freed. The KV cache grows by concatenation (a new tensor per layer and token: 60 MB for
    an evaluation's 1024 FrozenLake rows), above glibc's largest automatic mmap threshold (32 MB), so every decode
    step page-faulted its cache in anew: 3.7 of 10.3 s of one evaluation's draw were the kernel's (page faults),
    0.4 s with the thresholds raised; a 10-step run's system time 5.9 -> 1.0 s, its peak memory +8%. Changes no
    number. Elsewhere than glibc (macOS, musl) nothing is done."""
    if platform.libc_ver()[0] != "glibc":
        return
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    libc.mallopt(m_mmap_threshold, HEAP_BYTES)
    libc.mallopt(m_trim_threshold, HEAP_BYTES)


def torch_threads(requested: str = "1") -> int:
    """Set torch's intra-op thread count for this command and return it (run.json records it); the process keeps
    freed tensor memory too (:func:`keep_freed_memory`).

    A count (the ``threads`` key, default 1) is used as given: ``OMP_NUM_THREADS`` in the environment is not read, so
    the same command gives the same numbers whatever the environment and the load. ``threads=auto`` (opt-in): a
    joblib sweep job's share (:func:`joblib_cpu_budget`), else the cores not busy now: cores minus the 1-minute load
    average (or the tasks running right now, if fewer), rounded, at least 1 (:func:`sesa_cli.cpus.free_cores`). On
    a machine whose cores other jobs keep busy, a thread per core makes every parallel op wait until all its
    threads get a core, which slowed the warm start far more than the load alone (docs/measurements.md, "Threads"); one
    thread per free
    core degrades gracefully instead.
    """
    import torch

    from sesa_cli.config import thread_count

    count = thread_count(requested)
    if count is not None:
        threads, why = count, f"threads={count}"
    elif (budget := joblib_cpu_budget()) is not None:
        threads, why = budget, "threads=auto: the joblib job's share"
    else:
        threads, busy = free_cores()
        why = f"threads=auto: {os.cpu_count() or 1} cores, {busy:.1f} busy"
    torch.set_num_threads(threads)
    keep_freed_memory()
    log.info("torch threads: %d (%s)", threads, why)
    return threads
