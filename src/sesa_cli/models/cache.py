"""Build-once model directories under ``model.cache_dir``, safe under parallel sweep jobs, never used half-built.

A cached dir is used only when it is whole (:func:`inspect`): its marker (written last by the build), its model
config, safetensors weights and tokenizer files (sesa_cli.runs.check_model_dir), and the config it was built for
(``matches``, the caller's check of what the marker and the files record against what the run asks for). A dir that
is incomplete or damaged (a build that was killed, a truncated file) is built again and replaced in one step; one
built for another config (a dir swapped or copied in) is refused with one line, never used and never deleted.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from sesa_cli.config import ConfigError, cut
from sesa_cli.paths import open_file_modes, path_error, replace_dir
from sesa_cli.runs import check_model_dir, read_json_object

log = logging.getLogger(__name__)

Matches = Callable[[Path, dict[str, Any]], str | None]
"""``matches(dir, marker)``: what differs between the config a cached dir was built for (its marker's record,
its files) and the one a run asks for, as ``key: found -> wanted``; None when it is the same."""


def inspect(target: Path, marker: str, matches: Matches | None = None, key: str = "model.cache_dir") -> str | None:
    """None when ``target`` holds a complete build for the config ``matches`` checks; else why it must be built
    (again): missing, or damaged (what is wrong). A one-line ConfigError when it is a complete build for another
    config, or not a directory."""
    if not target.exists():
        return "missing"
    if not target.is_dir():
        raise ConfigError(f"{key}: {target} is a file, not a cached model directory; remove it")
    try:
        record = read_json_object(target / marker)
        check_model_dir(target)
        tokenizers = [
            target / name for name in ("tokenizer.json", "tokenizer_config.json") if (target / name).exists()
        ]
        if not tokenizers:
            return "damaged (no tokenizer)"
        for path in tokenizers:
            read_json_object(path)
    except ConfigError as exc:
        return f"damaged ({exc})"
    differs = matches(target, record) if matches is not None else None
    if differs:
        raise ConfigError(
            f"{key}: {target} holds a base built for another config ({cut(differs, 80)}); it is not used: remove it "
            f"to build it again, or choose another {key}"
        )
    return None


def build_once(target: Path, marker: str, build: Callable[[Path], None], matches: Matches | None = None,
               key: str = "model.cache_dir") -> Path:  # fmt: skip
    """``target``, built by ``build(tmp_dir)`` unless it holds a complete build already (:func:`inspect`).

    The build runs under a file lock (a parallel job waits, then finds the result) into a temp dir that takes the
    place of ``target`` at the end (sesa_cli.paths.replace_dir; a damaged ``target`` is replaced whole): a crash never
    leaves a half-written directory behind, and a failed build removes its temp dir. ``build`` must write ``marker``
    last. Problems with the cache dir itself (a name too long, a file in the way) are one line naming ``key``.
    """
    if inspect(target, marker, matches, key) is None:
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(target) + ".lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:  # another job is building it: a wait of minutes, shown as one
            from sesa_cli.progress import phase

            with phase(f"waiting for another job to build {target}"):
                lock.acquire()
    except OSError as exc:
        raise path_error(exc, f"{key}={target.parent}", target) from None
    try:
        why = inspect(target, marker, matches, key)  # another job built it while we waited
        if why is None:
            return target
        if why != "missing":
            log.warning("%s is %s: building it again", target, why)
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            build(tmp)
            open_file_modes(tmp)  # readable as any new file is: a cache dir may be shared
            replace_dir(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        lock.release()
    return target
