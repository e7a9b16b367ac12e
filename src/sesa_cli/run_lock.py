"""A run owns its dir: an exclusive lock on ``<run_dir>/.sesa.lock``, held from before anything is written into the
dir until the command exits.

``sesa train|revive|eval`` take it in the dispatcher, before Hydra's job writes ``.hydra/`` and the log file into
the dir (``sesa_cli.cli.dispatch``, ``sesa_cli.api``), and the command's job takes it again for its actual run dir
(a no-op when the process holds it already; the lock of a sweep's job dir, whose path only the launcher knows). A
second command into the same dir stops with one line naming the holder (pid, host, command, start time) and exit
code 2, having written nothing there.

The lock is ``fcntl.flock`` on the file, which the kernel releases when the process ends however it ends (SIGKILL
included); the file also records the holder, so a lock file left by a process that died is taken over (and noted).
On a file system without ``flock`` the record decides: a live process of this host holds the dir; a dead one's
record is taken over. A finished command removes the file. Never imports torch.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from sesa_cli.config import ConfigError

LOCK_NAME = ".sesa.lock"

log = logging.getLogger("sesa")

_held: dict[Path, int] = {}
"""The run dirs this process holds (resolved path -> the lock file's descriptor)."""


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


def _read(fd: int) -> dict[str, Any]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = json.loads(os.read(fd, 65536).decode() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


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


def claim(run_dir: Path, command: str, argv: list[str], key: str = "hydra.run.dir") -> bool:
    """Take ``run_dir``'s lock for this process (creating the dir); True when newly taken (the caller releases it
    with :func:`release`), False when this process held it already. A one-line ConfigError naming the holder when
    another process holds it."""
    import fcntl

    path = _key(run_dir)
    if path in _held:
        return False
    path.mkdir(parents=True, exist_ok=True)
    lock = path / LOCK_NAME
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise ConfigError(
                f"{key}={run_dir} is in use by another sesa command ({describe(holder)}); wait for it to end or "
                "choose another directory"
            ) from None
        except OSError as exc:  # no flock on this file system (ENOLCK, EOPNOTSUPP): the record decides
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                os.close(fd)
                raise
            holder = _read(fd)
            if holder and holder.get("pid") != os.getpid() and alive(holder):
                os.close(fd)
                raise ConfigError(
                    f"{key}={run_dir} is in use by another sesa command ({describe(holder)}); wait for it to end, "
                    f"or remove {lock} if that process is gone"
                ) from None
        # The holder that just released the lock may have removed the file: lock the file that is there now.
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    previous = _read(fd)
    if previous and previous.get("pid") != os.getpid():
        log.info("took over the lock of %s, which is no longer running (%s)", run_dir, describe(previous))
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps(_record(command, argv)).encode())
    _held[path] = fd
    return True


def release(run_dir: Path) -> None:
    """Give ``run_dir``'s lock up and remove the lock file (nothing when this process does not hold it)."""
    fd = _held.pop(_key(run_dir), None)
    if fd is None:
        return
    # While still locked: a process waiting for it then locks a new file. (The dir may be gone or read-only now.)
    with contextlib.suppress(OSError):
        os.unlink(_key(run_dir) / LOCK_NAME)
    os.close(fd)


def release_all() -> None:
    for path in list(_held):
        release(path)


def argv_of_job() -> list[str]:
    """The overrides of the running command line (``sys.argv`` after the command name, as the dispatcher set it)."""
    return list(sys.argv[1:])
