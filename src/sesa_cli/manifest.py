"""A checkpoint's manifest: the sha256 of every file it holds, and a copy of its run's records at its step.

Written last into the checkpoint's temporary dir, before the rename that completes it (sesa_cli.runs.RunDir), and
checked when a command reads the checkpoint (``sesa eval``, ``sesa revive`` and a resumed ``sesa train``:
sesa_cli.runs.check_checkpoint): a file whose bytes changed since (a flipped bit on a disk, a bad copy) is refused
with one line naming it, before any model work. The structural checks (a truncated or empty file, JSON that does not
parse, a pickle carrying code) say what is wrong first; the checksums find what they cannot see: a weight or an
optimizer moment changed in place, which loads and then trains on garbage (a flipped byte in
``optimizer.pt`` once ended a revive in NaN sampling probabilities; one in the weights was used silently).

``records.json`` holds the metrics.jsonl (and policy_probs.jsonl) rows of the checkpoint's step and how many rows the
file held up to it, so a resumed run restores a last row cut since, instead of dropping it (sesa_cli.commands.rundir).

Checkpoints written before the manifest have none and are read as before. Imports nothing of sesa_cli but its
config errors.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Container
from pathlib import Path
from typing import Any

from sesa_cli.config import ConfigError

MANIFEST = "manifest.json"
RECORDS = "records.json"
FORMAT = 1
"""The manifest's layout version (``format`` in the file)."""
CHUNK = 1 << 20

_verified: set[tuple[str, int, int, str]] = set()
"""(file, size, mtime, sha256) of the files this process verified: a model of several GB is hashed once per command."""


def sha256(path: Path) -> str:
    """The sha256 of ``path``'s bytes (read in 1 MiB chunks: a model of several GB is never held whole)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def files_of(folder: Path) -> list[str]:
    """Every file under ``folder`` but the manifest itself, as sorted relative POSIX paths."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: Path) -> None:
    """Record the sha256 of every file under ``folder`` in ``folder/manifest.json`` (the last file written)."""
    data = {"format": FORMAT, "sha256": {name: sha256(folder / name) for name in files_of(folder)}}
    (folder / MANIFEST).write_text(json.dumps(data, indent=1))


def write_records(folder: Path, records: dict[str, dict[str, Any]]) -> None:
    """The run's records at the checkpoint's step (``{file name: {"rows": n, "last": [lines]}}``, see
    :func:`step_records`) into ``folder/records.json``."""
    (folder / RECORDS).write_text(json.dumps(records))


def step_records(lines: list[tuple[str, int]], step: int) -> dict[str, Any]:
    """What a checkpoint at ``step`` keeps of a JSON-lines record file whose rows are ``(line, step)``: how many rows
    it holds up to ``step``, and the lines of ``step`` itself (the rows a cut end of the file loses first)."""
    return {"rows": sum(1 for _, s in lines if s <= step), "last": [line for line, s in lines if s == step]}


def verify(ckpt: Path, manifest: dict[str, Any], skip: Container[str] = ()) -> None:
    """Every file the manifest names (but ``skip``) is there with the bytes it recorded; a one-line ConfigError naming
    the first that is not. ``manifest``: the parsed ``manifest.json`` of ``ckpt``."""
    recorded = manifest.get("sha256")
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        raise ConfigError(f"{ckpt / MANIFEST} has no 'sha256' table of the checkpoint's files")
    for name, wanted in sorted(recorded.items()):
        path = ckpt / name
        if name in skip:
            continue
        if os.path.isabs(name) or ".." in Path(name).parts:
            raise ConfigError(f"{ckpt / MANIFEST} names {name!r}, which is not a file of the checkpoint")
        if not path.is_file():
            raise ConfigError(f"{path} is missing: the checkpoint's manifest lists it")
        stat = path.stat()
        seen = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, wanted)
        if seen in _verified:  # checked already by this process (the dispatcher, then the command), unchanged since
            continue
        if sha256(path) != wanted:
            raise ConfigError(
                f"{path} is damaged: its sha256 differs from the one recorded when the checkpoint was written "
                f"({MANIFEST}); the checkpoint cannot be used as it is"
            )
        _verified.add(seen)
