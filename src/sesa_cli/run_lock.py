"""A run owns its dir: an exclusive lock on the run dir, held from before anything is written into it until the
command exits.

``sesa train|revive|eval|diversity-report`` take it in the dispatcher, before Hydra's job writes ``.hydra/`` and
the log file into the dir (``sesa_cli.cli.dispatch``, ``sesa_cli.api``); a sweep takes its sweep dir there and each
job its own dir where Hydra asks for it (sesa_cli.commands.sweep), and the command's job takes it again for its
actual run dir (a no-op when the process holds it already). A second command into the same dir stops with one line
naming the holder (pid, host, command, start time) and exit code 2, having changed nothing in the dir; a dir that
cannot be made is one line too (sesa_cli.paths).

The lock is ``fcntl.flock`` on the directory itself, which the kernel releases when the process ends however it ends
(SIGKILL included), so a dead holder never blocks the dir. Once the command decided to use the dir it records itself
in ``<run_dir>/.sesa.lock`` (removed when it ends; a record left by a process that died is taken over, and noted). On
a file system without ``flock`` on directories the record decides: a live process of this host, or any process of
another host, holds the dir; a dead one's record is taken over. Never imports torch.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from sesa_cli.config import ConfigError
from sesa_cli.paths import path_error

LOCK_NAME = ".sesa.lock"

log = logging.getLogger("sesa")

_held: dict[Path, int] = {}
"""The run dirs this process holds (absolute path -> the locked directory's descriptor)."""
_recorded: set[Path] = set()
"""The held dirs this process wrote its record into."""


def _key(run_dir: Path) -> Path:
    return Path(os.path.abspath(run_dir))


def holds(run_dir: Path) -> bool:
    """Whether this process holds ``run_dir``'s lock."""
    return _key(run_dir) in _held


def _record(command: str, argv: list[str]) -> dict[str, Any]:
    import shlex

    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join(["sesa", command, *(shlex.quote(a) for a in argv)]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def describe(holder: dict[str, Any]) -> str:
    """``pid 123 on host h: sesa train ..., started 2026-01-01T10:00:00`` (what a lock file records)."""
    if not holder:
        return "a process that has not written its record yet"
    return (
        f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}: {holder.get('command', '?')}, started "
        f"{holder.get('started', '?')}"
    )


def alive(holder: dict[str, Any]) -> bool:
    """Whether the holder a record names may still run: its pid lives on this host (another host's: assumed)."""
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname():
        return True
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_record(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((run_dir / LOCK_NAME).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def recorded_holder(run_dir: Path) -> dict[str, Any]:
    """The record a command wrote into ``run_dir`` (:func:`record`), empty when there is none: the command that holds
    the dir, or held it and died without ending (its record stays; :func:`alive` tells which)."""
    return _read_record(_key(run_dir))


class DirTaken(ConfigError):
    """A dir that belongs to another run, report or command (in use, or holding its records): the command that
    wanted it is refused; a sweep job skips it (sesa_cli.commands.sweep)."""


def claim(run_dir: Path, command: str, argv: list[str], key: str = "hydra.run.dir", where: str | None = None) -> bool:
    """Take ``run_dir``'s lock for this process (creating the dir if it does not exist; nothing is written into an
    existing one: :func:`record` does that once the command uses the dir). True when newly taken (the caller gives
    it back with :func:`release`), False when this process held it already. A one-line :class:`DirTaken` naming
    the holder when another process holds it; a one-line ConfigError when the dir cannot be made or opened (a name
    too long, a file in the way, no permission: sesa_cli.paths). ``where`` names the dir in those lines (default
    ``key=run_dir``)."""
    import fcntl

    where = where or f"{key}={run_dir}"
    path = _key(run_dir)
    if path in _held:
        return False
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise path_error(exc, where, Path(run_dir)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DirTaken(
            f"{where} is in use by another sesa command ({describe(_read_record(path))}); wait for it to end or "
            "choose another directory"
        ) from None
    except OSError as exc:  # no flock on this file system (ENOLCK, EOPNOTSUPP; NFS: EBADF): the record decides
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
            os.close(fd)
            raise path_error(exc, where, Path(run_dir)) from None
        holder = _read_record(path)
        if holder and holder.get("pid") != os.getpid() and alive(holder):
            os.close(fd)
            raise DirTaken(
                f"{where} is in use by another sesa command ({describe(holder)}); wait for it to end, or remove "
                f"{path / LOCK_NAME} if that process is gone"
            ) from None
    _held[path] = fd
    return True


def record(run_dir: Path, command: str, argv: list[str]) -> None:
    """Write this process's record into the dir it holds (pid, host, command, start time): what a second command
    names. A record left by a process that died is replaced (and noted in the log)."""
    path = _key(run_dir)
    previous = _read_record(path)
    if previous and previous.get("pid") != os.getpid():
        log.info("took over %s from a command that is no longer running (%s)", run_dir, describe(previous))
    from sesa_cli.runs import atomic_write_text

    atomic_write_text(path / LOCK_NAME, json.dumps(_record(command, argv)))
    _recorded.add(path)


def release(run_dir: Path) -> None:
    """Give ``run_dir``'s lock up and remove this process's record (nothing when this process does not hold it)."""
    path = _key(run_dir)
    fd = _held.pop(path, None)
    if fd is None:
        return
    if path in _recorded:
        _recorded.discard(path)
        with contextlib.suppress(OSError):  # the dir may be gone or read-only now
            (path / LOCK_NAME).unlink()
    os.close(fd)


def release_all() -> None:
    for path in list(_held):
        release(path)
