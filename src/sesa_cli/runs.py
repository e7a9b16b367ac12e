"""Run directories: resolved config, run.json, metrics.jsonl/csv, sample dumps and atomic checkpoints.

Layout::

    <run_dir>/config.yaml            resolved config
    <run_dir>/run.json               run id, command, parent, overrides, start, commit, threads, versions; at the
                                     end its compute by phase (tokens, FLOPs, seconds: sesa_cli.compute)
    <run_dir>/metrics.jsonl          one JSON object per step (training rows and evaluation rows), each with "step"
    <run_dir>/metrics.csv            the same, as a table (rewritten at every checkpoint and at the end)
    <run_dir>/policy_probs.jsonl     per evaluation, the exact probability of each target and likely solution
                                     (tasks that enumerate their solutions; sesa_cli.exact.ExactPolicy)
    <run_dir>/eval_counts.jsonl      per evaluation, each instance's successful samples of how many
                                     (sesa_cli.evaluation.success_counts: the report's pass@k at every k)
    <run_dir>/samples/step_N.jsonl   rollouts of step N
    <run_dir>/checkpoints/step_N/    HF model dir, tokenizer, optimizer.pt, trainer_state.json, records.json, manifest.json

Checkpoints are written to ``step_N.tmp`` and renamed, so a crash or Ctrl-C never leaves a half-written one; each carries
the sha256 of its files (manifest.json) and a copy of the run's records at its step (sesa_cli.manifest).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sesa_cli import manifest
from sesa_cli.compute import check_block
from sesa_cli.config import ConfigError, cut, first_line
from sesa_cli.paths import open_file_modes, writing

CHECKPOINT_RE = re.compile(r"^step_(\d+)$")


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_text(data: dict[str, Any], indent: int | None = 2) -> str:
    """``data`` as strict JSON: a float that is not finite (NaN: nothing was measured) becomes null, in lists too,
    where ``json.dumps`` would write ``NaN``, which JSON readers other than Python's refuse."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return [clean(v) for v in value] if isinstance(value, (list, tuple)) else _jsonable(value)

    return json.dumps(clean(data), indent=indent, allow_nan=False)


EVAL_COUNTS = "eval_counts.jsonl"
"""Per evaluation, each instance's successful samples (RunDir.log_eval_counts)."""
RECORD_FILES = ("metrics.jsonl", "policy_probs.jsonl", EVAL_COUNTS)
"""A run's JSON-lines records, one row per step or evaluation: a checkpoint keeps their rows at its step, and a
resumed run keeps theirs up to its checkpoint (commands.rundir)."""


class RunDir:
    """Writes one run's files under ``path``."""

    trackers: Any = None
    """The run's experiment trackers (sesa_cli.loggers.Trackers), which get every metrics row too; None = none."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.path / "metrics.jsonl"
        self.checkpoints = self.path / "checkpoints"

    def writing(self, target: Path, cleanup: Path | None = None) -> contextlib.AbstractContextManager[None]:
        """A write of ``target`` into this run dir: a failure removes ``cleanup`` (the write's ``.tmp``) and, when the
        disk is full, read-only or the run dir is gone, becomes one line (:func:`writing`)."""
        return writing(target, cleanup, self.path)

    # ---------------------------------------------------------------- metadata
    def write_config(self, resolved_yaml: str) -> None:
        atomic_write_text(self.path / "config.yaml", resolved_yaml)

    def write_run_info(self, command: str, overrides: list[str], parent: str | None = None, **extra: Any) -> None:
        info = {
            "id": uuid.uuid4().hex,  # what tells this run from a copy of its dir (sesa diversity-report counts it once)
            "command": command,
            "parent": parent,
            "overrides": overrides,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "git_commit": git_commit(),
            **environment(),
            **extra,
        }
        atomic_write_text(self.path / "run.json", json.dumps(info, indent=2))

    def mark_ended(self, status: str, reason: str | None = None, exit_code: int | None = None,
                   command: str | None = None) -> None:  # fmt: skip
        """Record in run.json how the command ended: ``status`` finished, failed or interrupted, with the ``reason``
        and the command's ``exit_code`` when it did not finish (a run.json is written if the command failed before
        its own). Commands that take a run dir read it back (:func:`ended_badly`)."""
        path = self.path / "run.json"
        try:
            info = read_run_info(path) if path.is_file() else {}
        except ConfigError:
            info = {}
        if command and "command" not in info:
            info["command"] = command
        info.update(status=status, ended=time.strftime("%Y-%m-%dT%H:%M:%S"))
        if status != "finished":
            info.update(reason=reason, exit_code=exit_code)
        atomic_write_text(path, json.dumps(info, indent=2))

    def add_run_info(self, **fields: Any) -> None:
        """Add ``fields`` to run.json, keeping what it holds (the run's ``compute`` as it ends: sesa_cli.compute); a
        damaged run.json is replaced, as :meth:`mark_ended` replaces it."""
        path = self.path / "run.json"
        try:
            info = read_run_info(path) if path.is_file() else {}
        except ConfigError:
            info = {}
        atomic_write_text(path, json.dumps({**info, **fields}, indent=2))

    # ---------------------------------------------------------------- metrics
    def log_metrics(self, row: dict[str, Any]) -> None:
        """Append one row (must contain "step") to metrics.jsonl, flushed at once."""
        if "step" not in row:
            raise ValueError("a metrics row needs a 'step'")
        with self.writing(self.metrics_path), self.metrics_path.open("a") as f:
            f.write(json.dumps({k: _jsonable(v) for k, v in row.items()}) + "\n")
        if self.trackers is not None:  # after the file: a tracker never stands between a row and metrics.jsonl
            self.trackers.log(row)

    def read_metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.metrics_path)

    def log_policy_probs(self, record: dict[str, Any]) -> None:
        """Append one evaluation's solution probabilities (``{"step": ..., "instances": [...]}``) to its file."""
        self._append("policy_probs.jsonl", record)

    def log_eval_counts(self, record: dict[str, Any]) -> None:
        """Append one evaluation's success counts (``{"step": ..., "samples": [...], "correct": [...]}``,
        sesa_cli.evaluation.success_counts) to eval_counts.jsonl."""
        self._append(EVAL_COUNTS, record)

    def _append(self, name: str, record: dict[str, Any]) -> None:
        path = self.path / name
        with self.writing(path), path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def write_csv(self) -> None:
        """metrics.jsonl -> metrics.csv (one row per line of the JSONL, union of columns)."""
        rows = self.read_metrics()
        keys: list[str] = []
        for row in rows:
            keys.extend(k for k in row if k not in keys)
        tmp = self.path / "metrics.csv.tmp"
        with self.writing(self.path / "metrics.csv", cleanup=tmp):
            with tmp.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=keys)
                writer.writeheader()
                writer.writerows(rows)
            os.replace(tmp, self.path / "metrics.csv")

    def dump_samples(self, step: int, records: Iterable[dict[str, Any]]) -> None:
        folder = self.path / "samples"
        with self.writing(folder):
            folder.mkdir(exist_ok=True)
        atomic_write_text(folder / f"step_{step:06d}.jsonl", "".join(json.dumps(r) + "\n" for r in records),
                          run_dir=self.path)  # fmt: skip

    # ---------------------------------------------------------------- checkpoints
    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints / f"step_{step:06d}"

    def begin_checkpoint(self, step: int) -> Path:
        """A fresh temporary directory; pass it to :meth:`commit_checkpoint` once everything is written."""
        tmp = self.checkpoints / f"step_{step:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        self.checkpoints.mkdir(exist_ok=True)  # not parents=True: a run dir deleted mid-run is not recreated
        tmp.mkdir()
        return tmp

    def commit_checkpoint(self, tmp: Path, step: int) -> Path:
        """Complete the checkpoint written into ``tmp``: the run's records at ``step`` and the manifest of every
        file's sha256 (sesa_cli.manifest) go in last, the files get a plain file's mode, and ``tmp`` is renamed."""
        records = {}
        for name in RECORD_FILES:
            lines = [(line, row["step"]) for line, row in metric_lines(self.path / name)]
            if lines:
                records[name] = manifest.step_records(lines, step)
        manifest.write_records(tmp, records)
        manifest.write_manifest(tmp)
        open_file_modes(tmp)
        final = self.checkpoint_dir(step)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        return final


class ReplicaRunDir(RunDir):
    """What a data-parallel rank other than 0 gets: the same paths, but it writes nothing (rank 0 owns the run dir;
    see sesa_cli.distributed)."""

    def __init__(self, path: Path) -> None:  # no mkdir
        self.path = Path(path)
        self.metrics_path = self.path / "metrics.jsonl"
        self.checkpoints = self.path / "checkpoints"

    def write_config(self, resolved_yaml: str) -> None:
        pass

    def mark_ended(self, status: str, reason: str | None = None, exit_code: int | None = None,
                   command: str | None = None) -> None:  # fmt: skip
        pass

    def write_run_info(self, command: str, overrides: list[str], parent: str | None = None, **extra: Any) -> None:
        pass

    def add_run_info(self, **fields: Any) -> None:
        pass

    def log_metrics(self, row: dict[str, Any]) -> None:
        pass

    def log_policy_probs(self, record: dict[str, Any]) -> None:
        pass

    def log_eval_counts(self, record: dict[str, Any]) -> None:
        pass

    def write_csv(self) -> None:
        pass

    def dump_samples(self, step: int, records: Iterable[dict[str, Any]]) -> None:
        pass

    def begin_checkpoint(self, step: int) -> Path:
        raise RuntimeError("only rank 0 writes checkpoints")


class ResumeRefused(ConfigError):
    """A run a command will not continue (a damaged last checkpoint, records lost): one line, and the run dir is left
    as it was, its run.json saying how the run ended (sesa_cli.commands.common.user_errors does not mark it failed)."""


class NotJSONError(ConfigError):
    """Text that is not JSON at all (a line cut mid-write is one), as opposed to JSON of the wrong kind."""


def parse_json_object(text: str, where: str, wanted: str = "an object") -> dict[str, Any]:
    """``text`` as a JSON object; a one-line ConfigError naming ``where`` (a file, or ``file:line``) when it is not
    JSON (:class:`NotJSONError`) or not an object (``wanted`` says what it should be)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        at = f", line {exc.lineno}" if exc.lineno > 1 else ""
        what = exc.msg
        if "\x00" in text:  # a damaged disk block reads as NULs: json names a delimiter or "control character at"
            pos = text.index("\x00")
            line = text.count("\n", 0, pos) + 1
            at = f", line {line}" if line > 1 else ""
            what = f"a NUL byte (\\x00) at column {pos - text.rfind(chr(10), 0, pos)}: the file is damaged"
        elif what == "Invalid control character at":  # json's wording ends mid-sentence: say which, and where
            what = f"a control character ({text[exc.pos]!r}) at column {exc.colno} inside a string"
        raise NotJSONError(f"{where} is not valid JSON ({what}{at})") from None
    except (ValueError, RecursionError) as exc:  # an integer of more than 4300 digits; nesting deeper than the stack
        why = "nested too deeply" if isinstance(exc, RecursionError) else "a number in it is too long to read"
        m = re.search(r'"([^"\\]{1,60})"\s*:\s*-?(\d{4000,})', text) if isinstance(exc, ValueError) else None
        if m:
            why = f"its {m.group(1)!r} is a number of {len(m.group(2)):,} digits, too long to read"
        raise ConfigError(f"{where} cannot be read ({why})") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{where} is a JSON {type(obj).__name__}, not {wanted}")
    return obj


KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "count": ("a non-negative integer", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    "integer": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "object": ("an object", lambda v: isinstance(v, dict)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "text": ("a string", lambda v: isinstance(v, str)),
    "texts": ("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "counts": ("a list of non-negative integers", lambda v: isinstance(v, list) and all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)),
}  # fmt: skip
"""The kinds of value a run file holds, by name: what it must be, and the test."""


def checked(data: dict[str, Any], where: str, required: dict[str, str], optional: dict[str, str] | None = None,
            ) -> dict[str, Any]:  # fmt: skip
    """``data`` (read from the run file ``where``) once every key of ``required`` holds a value of its kind
    (:data:`KINDS`) and every key of ``optional`` that it has holds one too (or null); a one-line ConfigError naming
    the file, the key and the value otherwise. The one check every reader of a run's files goes through, so a
    hand-edited ``"step": "2"`` is refused where it is read, not a TypeError steps later."""
    for key, kind in {**(optional or {}), **required}.items():
        value = data.get(key)
        if key not in required and value is None:
            continue
        what, test = KINDS[kind]
        if not test(value):
            found = "missing" if key not in data else _shown(value)
            raise ConfigError(f"{where}: {key!r} is {found}, not {what}")
    return data


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = type(value).__name__
    return cut(text, 60)


RUN_INFO = {
    "id": "text", "command": "text", "status": "text", "reason": "text", "exit_code": "integer",
    "overrides": "texts", "resumed": "counts", "parent": "text", "parent_step": "count", "parent_run": "text",
    "kl_reference": "object", "loggers": "object", "versions": "object", "torch_threads": "count",
    "compute": "object",
}  # fmt: skip
"""What a run.json holds (RunDir.write_run_info, mark_ended), by kind: every key optional (older runs lack some)."""


def read_run_info(path: Path) -> dict[str, Any]:
    """A run's run.json, every value of :data:`RUN_INFO` checked (a one-line ConfigError naming the key), its
    ``compute`` block to its counts (sesa_cli.compute.check_block)."""
    info = checked(read_json_object(path), str(path), {}, RUN_INFO)
    if info.get("compute") is not None:
        check_block(info["compute"], str(path))
    return info


def metric_lines(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(line, row) of every row of a metrics.jsonl (or policy_probs.jsonl); a truncated last line (a run killed
    mid-write) is ignored. A line that is not a JSON object, or whose ``step`` is not a non-negative integer, is a
    one-line ConfigError naming the file and line (earlier than the last: it is damaged, not cut)."""
    out: list[tuple[str, dict[str, Any]]] = []
    if not path.is_file():
        return out
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = parse_json_object(line, where, "an object with a 'step'")
        except NotJSONError:
            if number == len(lines):
                break
            raise
        out.append((line, checked(row, where, {"step": "count"})))
    return out


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl (:func:`metric_lines`)."""
    return [row for _, row in metric_lines(path)]


def read_eval_counts(path: Path) -> list[dict[str, Any]]:
    """Rows of an eval_counts.jsonl (:func:`metric_lines`), each with one count of successes ``correct[i]`` out of
    ``samples[i]`` per instance; a row whose lists are not counts of the same length, with no count above its
    size, is a one-line ConfigError naming the file and line."""
    rows = []
    for number, (_, row) in enumerate(metric_lines(path), start=1):
        checked(row, f"{path}:{number}", {"samples": "counts", "correct": "counts"})
        if len(row["samples"]) != len(row["correct"]) or any(
            c > n or n < 1 for c, n in zip(row["correct"], row["samples"], strict=True)
        ):
            raise ConfigError(f"{path}:{number}: 'correct' and 'samples' are not per-instance counts out of sizes")
        rows.append(row)
    return rows


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; a one-line ConfigError naming the file when it is missing, unreadable, not JSON
    or not an object."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path} ({exc})") from None
    return parse_json_object(text, str(path))


def read_trainer_state(ckpt: Path, training: bool = False) -> dict[str, Any]:
    """A checkpoint's trainer_state.json, checked: ``step`` always; what a resumed trainer reads when ``training``."""
    path = ckpt / "trainer_state.json"
    required = {"step": "count", **({"next_instance": "count", "collapse": "object"} if training else {})}
    optional = {"found_targets": "texts", "found_solutions": "list", "config": "object", "compute": "object"}
    return checked(read_json_object(path), str(path), required, optional)


def check_checkpoint(ckpt: Path, training: bool = False) -> dict[str, Any]:
    """Check every file a command will read from a checkpoint before any model work, so a damaged one is one line
    naming the file and what is wrong with it: trainer_state.json, the model config and safetensors weights (a
    full model or a LoRA adapter), and with ``training`` (revive) optimizer.pt and rng.pt, which are refused unless
    they hold tensors only (a pickle can carry code). Returns the trainer state."""
    state = read_trainer_state(ckpt, training)
    check_model_dir(ckpt)
    if training:
        check_tensor_file(ckpt / "optimizer.pt", what="the optimizer state a revived run continues from")
        if (ckpt / "rng.pt").exists():  # older checkpoints have none
            check_tensor_file(ckpt / "rng.pt", what="the sampling generator state")
    if (ckpt / manifest.MANIFEST).is_file():  # the bytes of every file it reads (checkpoints written since manifests)
        skip = () if training else ("optimizer.pt", "rng.pt")  # an evaluation reads neither
        manifest.verify(ckpt, read_json_object(ckpt / manifest.MANIFEST), skip)
    return state


def checkpoint_records(ckpt: Path) -> dict[str, Any]:
    """The run's records at a checkpoint's step (its records.json, sesa_cli.manifest); {} for an older checkpoint."""
    path = ckpt / manifest.RECORDS
    return read_json_object(path) if path.is_file() else {}


def check_model_dir(path: Path) -> None:
    """A Hugging Face model directory (or a LoRA adapter directory) whose config is a JSON object with a
    ``model_type`` and whose safetensors weights are complete; a ConfigError naming the first bad file."""
    if (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        read_json_object(path / "adapter_config.json")
        weights = [path / "adapter_model.safetensors"]
    else:
        config = read_json_object(path / "config.json")
        if not isinstance(config.get("model_type"), str):
            raise ConfigError(f"{path / 'config.json'} has no 'model_type': not a Hugging Face model config")
        index = path / "model.safetensors.index.json"
        if index.is_file():  # a sharded save: every shard the index names
            shards = read_json_object(index).get("weight_map")
            if not isinstance(shards, dict) or not shards:
                raise ConfigError(f"{index} has no 'weight_map'")
            weights = [path / str(name) for name in sorted(set(shards.values()))]
        elif (path / "pytorch_model.bin").is_file() and not (path / "model.safetensors").exists():
            weights = []  # a foreign directory with torch weights: transformers loads them with weights_only=True
        else:
            weights = [path / "model.safetensors"]
        tokenizer = path / "tokenizer.json"
        vocab = (read_json_object(tokenizer).get("model") or {}).get("vocab") if tokenizer.is_file() else None
        size = config.get("vocab_size")
        if isinstance(vocab, (dict, list)) and isinstance(size, int) and len(vocab) > size:
            raise ConfigError(
                f"{tokenizer} has {len(vocab)} tokens and the model of {path / 'config.json'} {size} embeddings: "
                "they are not one model's"
            )
    for file in weights:
        check_safetensors(file)


def check_safetensors(path: Path) -> None:
    """A safetensors file whose header parses and whose data covers every tensor it lists (a truncated, empty or
    missing file is a ConfigError naming it). Reads the header only."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise ConfigError(f"{path} is missing")
    try:
        with safe_open(str(path), framework="np"):
            pass
    except (SafetensorError, OSError) as exc:
        raise ConfigError(f"{path} is damaged or truncated ({first_line(exc)})") from None


def check_tensor_file(path: Path, what: str) -> None:
    """``path`` loads with ``torch.load(weights_only=True)``: tensors and plain containers only. A pickle that names
    any other global (code) is refused without running it; a truncated or foreign file is named as damaged."""
    import pickle
    import warnings
    import zipfile

    import torch

    if not path.is_file():
        raise ConfigError(f"{path} is missing: it holds {what}")
    try:
        with warnings.catch_warnings():  # torch warns about unusual pickle protocols: the one line below says it all
            warnings.simplefilter("ignore")
            # mmap: tensor data is mapped, not read (an optimizer state can be larger than the model)
            torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as exc:
        m = re.search(r"GLOBAL (\S+)", str(exc))
        found = f" (it calls {m.group(1)})" if m else ""
        raise ConfigError(
            f"{path}: refused to load: it holds Python objects other than tensors, and unpickling them could run "
            f"code{found}"
        ) from None
    except Exception as exc:  # noqa: BLE001  (EOFError, RuntimeError, zip errors: a truncated or foreign file)
        raise ConfigError(f"{path} is damaged or not a torch tensor file ({first_line(exc)})") from None


def atomic_write_text(path: Path, text: str, run_dir: Path | None = None) -> None:
    """``text`` into ``path`` through ``path.tmp`` (removed if the write fails: :func:`writing`; ``run_dir``: the
    run dir it belongs to, by default the file's own dir)."""
    tmp = path.with_name(path.name + ".tmp")
    with writing(path, cleanup=tmp, run_dir=run_dir or path.parent):
        tmp.write_text(text)
        os.replace(tmp, path)


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            check=False,
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def environment() -> dict[str, Any]:
    """What a run's numbers depend on besides its config and commit: torch's intra-op thread count (float
    reductions split differently, and runs of the same seed part ways: see docs/measurements.md, "FrozenLake: what the tiny model can learn"), the
    versions of the packages doing the arithmetic, and the CPU: its model, vector extensions and the kernels torch
    chose for them (``cpu``: another CPU's kernels round differently). ``sesa diversity-report`` warns when
    grouped runs differ in them."""
    import platform
    from importlib import metadata

    import torch

    from sesa_cli import cpus

    versions: dict[str, str | None] = {"python": platform.python_version()}
    for package in ("torch", "transformers", "sesa"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    cpu = {**cpus.describe(), "kernels": torch.backends.cpu.get_cpu_capability()}
    if os.environ.get("ONEDNN_MAX_CPU_ISA"):  # oneDNN's kernels capped by the user
        cpu["onednn_max_cpu_isa"] = os.environ["ONEDNN_MAX_CPU_ISA"]
    return {"torch_threads": torch.get_num_threads(), "versions": versions, "cpu": cpu}


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint of a run, in step order."""
    folder = Path(run_dir) / "checkpoints"
    found = []
    if folder.is_dir():
        for child in folder.iterdir():
            m = CHECKPOINT_RE.match(child.name)
            if m and (child / "trainer_state.json").is_file():
                found.append((int(m.group(1)), child))
    return sorted(found)


def ended_badly(run_dir: Path) -> str | None:
    """How a run dir's command failed or was interrupted, from its run.json (``RunDir.mark_ended``): e.g. ``"a
    failed run (exit code 2: task.data=x does not exist)"``; None for a finished, running or older run."""
    path = Path(run_dir) / "run.json"
    try:
        info = read_run_info(path) if path.is_file() else {}
    except ConfigError:
        return None
    status = info.get("status")
    if status not in ("failed", "interrupted"):
        return None
    reason = f": {info['reason']}" if info.get("reason") else ""
    return (
        f"{'a failed' if status == 'failed' else 'an interrupted'} {info.get('command') or 'sesa'} run "
        f"(exit code {info.get('exit_code')}{reason})"
    )


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint dir, or a run dir meaning its last checkpoint. One-line ConfigError otherwise."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ConfigError(f"checkpoint {p} does not exist")
    if (p / "trainer_state.json").is_file():
        return p
    ckpts = list_checkpoints(p)
    if ckpts:
        return ckpts[-1][1]
    bad = ended_badly(p)
    if bad:
        raise ConfigError(f"run dir {p} is {bad} and has no checkpoint")
    if (p / "checkpoints").is_dir() or (p / "metrics.jsonl").is_file() or (p / "run.json").is_file():
        raise ConfigError(f"run dir {p} has no checkpoints")
    raise ConfigError(f"{p} is neither a sesa checkpoint (no trainer_state.json) nor a run dir")


def run_dir_of_checkpoint(ckpt: Path) -> Path:
    """<run>/checkpoints/step_N -> <run>."""
    return ckpt.parent.parent
