"""Build-once model directories under ``model.cache_dir``, safe under parallel sweep jobs."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock, Timeout


def build_once(target: Path, marker: str, build: Callable[[Path], None]) -> Path:
    """``target``, built by ``build(tmp_dir)`` unless ``target/marker`` already exists.

    The build runs under a file lock (a parallel job waits, then finds the result) into a temp dir that is renamed
    onto ``target`` at the end: a crash never leaves a half-written directory behind. ``build`` must write
    ``marker`` last.
    """
    if (target / marker).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(target) + ".lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:  # another job is building it: a wait of minutes, shown as one
        from sesa_cli.progress import phase

        with phase(f"waiting for another job to build {target}"):
            lock.acquire()
    try:
        if (target / marker).is_file():  # another job built it while we waited
            return target
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        build(tmp)
        tmp.rename(target)
    finally:
        lock.release()
    return target
