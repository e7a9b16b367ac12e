"""Find, load and label the runs a diversity report compares.

A *run dir* is what ``sesa train`` / ``sesa revive`` write (``metrics.jsonl``) or what ``sesa eval`` writes
(``metrics.json``, one flat dict, read as a single row). A *multirun dir* is a Hydra sweep: ``multirun.yaml`` plus
numbered job subdirs, each a run dir. Every user-facing problem raises :class:`sesa_cli.config.ConfigError` with a
one-line message.
"""

from __future__ import annotations

import functools
import glob
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from sesa_cli.config import NAMED_PLUGINS, PLUGIN_MAPPINGS, SEQUENTIAL_ONLY, ConfigError
from sesa_cli.deprecations import rename_overrides, upgrade_config
from sesa_cli.metric_keys import RENAMED, key
from sesa_cli.runs import (  # one reader each: one-line errors
    EVAL_COUNTS,
    read_eval_counts,
    read_json_object,
    read_metrics,
    read_run_info,
)
from sesa_cli.yaml_files import read_yaml

METRICS_JSONL = "metrics.jsonl"
METRICS_JSON = "metrics.json"

# Override keys that never distinguish one experiment from another: the seed is what we average over and hydra.*
# only moves files around. ``ckpt`` counts as the parent run's overrides minus its seed (see :func:`_ckpt_identity`):
# revivals from the collapse checkpoints of seeds 0-4 are five seeds of one experiment.
_IGNORED_KEYS = ("seed",)
_IGNORED_PREFIXES = ("hydra.", "hydra/")
# Config groups: compared by the option each run resolved to, overridden or not (an ``experiment=`` recipe picks
# them too), so a label can say ``sampler=parallel`` where the recipe, not the command line, chose it.
_GROUP_KEYS = ("task", "model", "sampler", "algo")
# Keys that say how a setting was reached rather than what it is: left out of a label when the other keys already
# tell every group apart.
_INDIRECT_KEYS = ("experiment",)
# Keys that change what a run keeps, not what it trains (how often it saves a checkpoint): left out of a label as
# _INDIRECT_KEYS are, and so is a key a group's runs do not have (UNSET).
_BOOKKEEPING_KEYS = ("train.checkpoint_every",)
UNSET = "(unset)"
"""A label's value of a key a run's config does not have (a plug-in setting of a plug-in the run left off)."""
REVIVE_PARENT = key("revive/parent")
"""Marks the rows a revived run copied from its parent's metrics (steps up to the checkpoint)."""

UNKNOWN = "unknown (no run.json)"
"""The command of a run whose run.json is missing, in its group label (and the warning that says so)."""

LEGACY_METRICS = RENAMED
"""Old metric name -> current one (sesa_cli.metric_keys.RENAMED): run dirs written before a rename load under the
current names."""


@dataclass
class Run:
    """One loaded run.

    ``metrics`` has one row per logged step (index ``step``, sorted, ints) and one float column per numeric metric;
    training and evaluation rows of the same step are merged, a value missing at a step is NaN.
    """

    path: Path
    metrics: pd.DataFrame
    overrides: dict[str, str]
    """Command-line overrides, ``key -> value`` in the order given (leading ``+``/``++``/``~`` stripped)."""
    config: dict[str, Any]
    """The resolved config (``config.yaml``, else ``.hydra/config.yaml``); empty when neither exists."""
    info: dict[str, Any] = field(default_factory=dict)
    """``run.json``: command, parent, overrides, started (empty when absent)."""
    group: str = ""
    """Label of the group the run is averaged in (set by :func:`assign_groups`)."""
    group_items: tuple[tuple[str, str], ...] = ()
    """The ``(key, value)`` pairs the label shows (empty for a label that is a dir name)."""

    @property
    def task(self) -> str | None:
        value = _lookup(self.config, "task")
        if value is None:
            value = self.overrides.get("task")
        return None if value is None else str(value)

    @property
    def seed(self) -> str | None:
        value = self.overrides.get("seed", self.config.get("seed"))
        return None if value is None else str(value)

    @property
    def name(self) -> str:
        return self.path.name

    @functools.cached_property
    def inherited_mask(self) -> pd.Series:
        """True on the rows a revived run copied from its parent (``revive/parent``); all False otherwise."""
        if REVIVE_PARENT not in self.metrics.columns:
            return pd.Series(False, index=self.metrics.index)
        return self.metrics[REVIVE_PARENT].fillna(0) > 0

    @functools.cached_property
    def own(self) -> pd.DataFrame:
        """The run's own rows: a revived run without the parent's history (what its summary is computed on)."""
        return self.metrics[~self.inherited_mask].drop(columns=[REVIVE_PARENT], errors="ignore")

    @functools.cached_property
    def inherited(self) -> pd.DataFrame:
        """The parent's rows a revived run starts with (empty for other runs)."""
        return self.metrics[self.inherited_mask].drop(columns=[REVIVE_PARENT], errors="ignore")

    @functools.cached_property
    def final_counts(self) -> tuple[list[int], list[int]] | None:
        """(samples, correct) per instance of the run's last evaluation in eval_counts.jsonl
        (sesa_cli.evaluation.success_counts), None for a run that wrote none (before 2026-12-07)."""
        rows = read_eval_counts(self.path / EVAL_COUNTS)
        return (list(rows[-1]["samples"]), list(rows[-1]["correct"])) if rows else None

    @property
    def parent_step(self) -> int | None:
        """The checkpoint step a revived run started from (None for other runs)."""
        step = self.info.get("parent_step")
        if step is None and self.inherited_mask.any():
            step = int(self.metrics.index[self.inherited_mask].max())
        return None if step is None else int(step)

    @property
    def environment(self) -> dict[str, str]:
        """Thread count, package versions and CPU (model, vector extensions, the kernels torch chose) from run.json
        (``{}`` for runs written before they were recorded; the CPU since 2026-11-28)."""
        env: dict[str, str] = {}
        if self.info.get("torch_threads") is not None:
            env["torch threads"] = str(self.info["torch_threads"])
        versions = self.info.get("versions")
        if isinstance(versions, dict):
            env.update({name: str(version) for name, version in versions.items()})
        cpu = self.info.get("cpu")
        if isinstance(cpu, dict):
            env["cpu"] = str(cpu.get("model", ""))
            extensions = cpu.get("vector_extensions")
            if isinstance(extensions, list):
                env["vector extensions"] = " ".join(str(e) for e in extensions) or "(none listed)"
            env["kernels"] = str(cpu.get("kernels", ""))
            if cpu.get("onednn_max_cpu_isa"):
                env["kernels"] += f", oneDNN <= {cpu['onednn_max_cpu_isa']}"
        return env


# ------------------------------------------------------------------------------------------------- discovery
def is_run_dir(path: Path) -> bool:
    return path.is_dir() and ((path / METRICS_JSONL).is_file() or (path / METRICS_JSON).is_file())


def _subdir_order(path: Path) -> tuple[int, int, str]:
    # Hydra numbers sweep jobs 0, 1, ..., 10: sort them as numbers, not strings.
    return (0, int(path.name), "") if path.name.isdigit() else (1, 0, path.name)


def expand_run_paths(paths: Sequence[str | Path]) -> tuple[list[Path], list[str]]:
    """Turn the user's list of run and multirun dirs (or glob patterns of them) into run dirs (deduplicated, in the
    given order).

    Returns the run dirs and notes about job subdirs that were skipped (no metrics written yet, or a crashed job).
    """
    from sesa_cli.runs import ended_badly  # a run whose command failed: said, not silently read

    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise ConfigError("runs is empty; pass runs=[RUN_DIR,...] or runs=MULTIRUN_DIR")
    found: list[Path] = []
    notes: list[str] = []
    expanded: list[Path] = []
    for entry in paths:
        path = Path(entry).expanduser()
        if not path.exists() and any(c in str(path) for c in "*?["):
            # a glob the shell did not expand (quoted, or inside Hydra's runs=[...]): every dir it matches
            matches = sorted(Path(p) for p in glob.glob(str(path)) if Path(p).is_dir())
            if not matches:
                raise ConfigError(f"no directory matches {path}")
            expanded += matches
        else:
            expanded.append(path)
    for path in expanded:
        if not path.exists():
            raise ConfigError(f"run path does not exist: {path}")
        if not path.is_dir():
            raise ConfigError(f"run path is not a directory: {path}")
        bad = ended_badly(path)
        if is_run_dir(path):
            notes += [f"{path} is {bad}: its metrics stop where it did"] if bad else []
            found.append(path)
            continue
        if bad:
            raise ConfigError(f"{path} is {bad} and wrote no metrics")
        subdirs = sorted((p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")), key=_subdir_order)
        runs = [p for p in subdirs if is_run_dir(p)]
        if not runs:
            raise ConfigError(
                f"no runs in {path}: expected {METRICS_JSONL} (a run dir) or numbered job subdirs containing it "
                "(a multirun dir)"
            )
        # A job subdir without metrics is a job that crashed or is still starting: worth a note, not an error.
        notes += [f"skipped {p}: {f'{ended_badly(p)}, ' if ended_badly(p) else ''}no {METRICS_JSONL}"
                  for p in subdirs if p.name.isdigit() and not is_run_dir(p)]  # fmt: skip
        notes += [f"{p} is {ended_badly(p)}: its metrics stop where it did" for p in runs if ended_badly(p)]
        found += runs
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values()), notes


# --------------------------------------------------------------------------------------------------- loading
def _read_yaml(path: Path) -> Any:
    return read_yaml(path, "run file")  # the one bounded reader of run files (sesa_cli.runs)


def metrics_frame(rows: list[dict[str, Any]], source: Path) -> pd.DataFrame:
    """Rows of ``{"step": int, metric: value, ...}`` → one float column per numeric metric, one row per step.

    Rows sharing a step (a training row and an evaluation row) are merged; if two rows give the same metric at
    the same step the later one wins (a resumed run re-logs steps).
    """
    if not rows:
        return pd.DataFrame(index=pd.Index([], name="step", dtype="int64"))
    frame = pd.DataFrame.from_records(rows)
    steps = pd.to_numeric(frame["step"], errors="coerce") if "step" in frame.columns else None
    if steps is None or steps.isna().any() or (steps != steps.round()).any():
        raise ConfigError(f"{source}: every metrics row needs an integer 'step'")
    frame["step"] = steps.astype("int64")
    numeric = {}
    for column in frame.columns:
        if column == "step":
            continue
        values = frame[column]
        if values.dtype == bool or values.dtype == object:
            # bools (collapse flags written as true/false) count as 0/1; free text is not a metric.
            converted = values.map(lambda v: float(v) if isinstance(v, (bool, int, float)) else math.nan)
            if values.map(lambda v: v is None or isinstance(v, (bool, int, float))).all():
                numeric[column] = converted
        elif pd.api.types.is_numeric_dtype(values):
            numeric[column] = values.astype("float64")
    data = pd.DataFrame(numeric, index=frame.index)
    data["step"] = frame["step"]
    merged = data.groupby("step", sort=True).last()  # last() skips NaN: merges train and eval rows of a step
    for old, new in LEGACY_METRICS.items():
        # A revived run whose parent predates the rename holds both names: the parent's rows fill the gaps.
        if old in merged.columns:
            merged[new] = merged[new].combine_first(merged[old]) if new in merged.columns else merged[old]
            merged = merged.drop(columns=old)
    return merged


def parse_overrides(items: Any, where: Path | None = None) -> dict[str, str]:
    """``{key: value}`` of the ``key=value`` overrides a run recorded (``.hydra/overrides.yaml``; ``where``: the file,
    named when they are not a list of them), old keys under their current names; ``(deleted)`` for ``~key``."""
    if items is not None and not (isinstance(items, list) and all(isinstance(i, (str, int, float)) for i in items)):
        raise ConfigError(f"{where} holds a {type(items).__name__}, not a list of key=value overrides")
    result: dict[str, str] = {}
    renamed, _ = rename_overrides([str(item) for item in items or []])  # a run written before a config key was renamed
    for text in renamed:
        key, sep, value = text.partition("=")
        key = key.lstrip("+~")
        result[key] = value if sep else "(deleted)"
    return result


def _lookup(config: dict[str, Any], key: str) -> Any:
    """Value of a dotted override key in the resolved config; a config group (a dict) answers with its ``name``."""
    node: Any = config
    for part in key.split("@")[0].replace("/", ".").split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if isinstance(node, dict):
        return node.get("name")
    return node


def load_run(path: Path, notes: list[str] | None = None) -> Run:
    """Read one run dir: metrics, overrides and config. What it could not read (no or a damaged config.yaml, no
    run.json) is appended to ``notes``, one warning per run, and the run is read without it."""
    path = Path(path)
    missing: list[str] = []
    if (path / METRICS_JSONL).is_file():
        frame = metrics_frame(read_metrics(path / METRICS_JSONL), path / METRICS_JSONL)
    elif (path / METRICS_JSON).is_file():
        flat = read_json_object(path / METRICS_JSON)
        # An eval run is one final evaluation: a single row, at the step it reports (else 0).
        frame = metrics_frame([{"step": 0, **flat}], path / METRICS_JSON)
    else:
        raise ConfigError(f"not a run dir (no {METRICS_JSONL} or {METRICS_JSON}): {path}")

    config: dict[str, Any] = {}
    candidates = [c for c in (path / "config.yaml", path / ".hydra" / "config.yaml") if c.is_file()]
    if not candidates:
        missing.append("no config.yaml (its settings are only what its overrides say)")
    for candidate in candidates[:1]:
        try:
            loaded = _read_yaml(candidate)
        except ConfigError as exc:
            missing.append(f"{exc} (read without it)")
            loaded = {}
        if not isinstance(loaded, dict):
            missing.append(f"{candidate.name} holds no mapping of settings")
        config = upgrade_config(loaded) if isinstance(loaded, dict) else {}
    info: dict[str, Any] = {}
    if (path / "run.json").is_file():
        info = read_run_info(path / "run.json")
    else:
        missing.append(f"no run.json (its command is {UNKNOWN})")
    if (path / ".hydra" / "overrides.yaml").is_file():
        overrides = parse_overrides(_read_yaml(path / ".hydra" / "overrides.yaml"), path / ".hydra" / "overrides.yaml")
    else:
        overrides = parse_overrides(info.get("overrides"))
    if notes is not None and missing:
        notes.append(f"warning: {path} was not read fully: {'; '.join(missing)}")
    return Run(path=path, metrics=frame, overrides=overrides, config=config, info=info)


def run_identity(run: Run) -> str:
    """What makes a run itself rather than a copy of another's dir: run.json's ``id`` (older runs have none), else
    the bytes of its metrics file (two runs never log identical metrics: their step times differ)."""
    if isinstance(run.info.get("id"), str):
        return "id:" + str(run.info["id"])
    import hashlib

    metrics = run.path / (METRICS_JSONL if (run.path / METRICS_JSONL).is_file() else METRICS_JSON)
    return "metrics:" + hashlib.sha256(metrics.read_bytes()).hexdigest()


def load_runs(paths: Sequence[str | Path]) -> tuple[list[Run], list[str]]:
    """Expand, load, check and label runs. Returns the runs (``group`` set) and notes for the report."""
    run_paths, notes = expand_run_paths(paths)
    runs = []
    first: dict[str, Path] = {}
    for path in run_paths:
        run = load_run(path, notes)
        if run.metrics.empty:
            notes.append(f"skipped {path}: no metric rows yet")
            continue
        identity = run_identity(run)
        if identity in first:  # a copied dir: one run, counted once (fifty copies are not fifty seeds)
            notes.append(f"warning: skipped {path}: a copy of {first[identity]} (the same run), counted once")
            continue
        first[identity] = path
        runs.append(run)
    if not runs:
        raise ConfigError(f"no metric rows in any run of: {', '.join(str(p) for p in run_paths)}")
    check_same_task(runs)
    assign_groups(runs)
    return runs, notes


def check_same_task(runs: Sequence[Run]) -> None:
    """Comparing runs of different tasks is meaningless (different metrics and scales): refuse it."""
    by_task: dict[str, list[Path]] = {}
    for run in runs:
        if run.task is not None:
            by_task.setdefault(run.task, []).append(run.path)
    if len(by_task) > 1:
        parts = []
        for task, task_paths in by_task.items():
            shown = ", ".join(str(p) for p in task_paths[:3])
            if len(task_paths) > 3:
                shown += f", +{len(task_paths) - 3} more"
            parts.append(f"task={task} ({shown})")
        raise ConfigError(f"runs mix tasks: {'; '.join(parts)}; report runs of one task at a time")


# -------------------------------------------------------------------------------------------------- grouping
def _short(value: Any) -> str:
    text = UNSET if value is None else str(value)
    # A checkpoint path in a label (revive/eval runs) would swamp the legend: keep its last two parts.
    if "/" in text and len(text) > 32:
        text = ".../" + "/".join(Path(text).parts[-2:])
    return text


def _ignored(key: str) -> bool:
    return key in _IGNORED_KEYS or key.startswith(_IGNORED_PREFIXES)


def _ckpt_identity(run: Run) -> str | None:
    """What a run's ``ckpt`` stands for in its group: the parent run's overrides minus seed and hydra.* (its own
    ``ckpt`` likewise), so revivals from the checkpoints of different seeds of one experiment are one group, and
    revivals from different experiments are not. None when the parent run cannot be read (then ``ckpt`` is left
    out, as the seed is)."""
    value = run.overrides.get("ckpt")
    if value is None:
        return None
    path = Path(str(run.info.get("parent_run") or value)).expanduser()
    if path.parent.name == "checkpoints":  # ckpt=RUN/checkpoints/step_N
        path = path.parent.parent
    overrides: dict[str, str] | None = None
    try:
        if (path / ".hydra" / "overrides.yaml").is_file():
            overrides = parse_overrides(_read_yaml(path / ".hydra" / "overrides.yaml"))
        elif (path / "run.json").is_file():
            overrides = parse_overrides(read_run_info(path / "run.json").get("overrides"))
    except (OSError, ValueError, AttributeError):  # ConfigError is a ValueError
        overrides = None
    if overrides is None:
        return None
    kept = [f"{k}={v}" for k, v in overrides.items() if not _ignored(k) and k != "ckpt"]
    return "parent(" + " ".join(kept) + ")"


def _value(run: Run, key: str) -> Any:
    """A run's value of a grouping key: its override, else the resolved config (a group's option name)."""
    if key == "ckpt":
        return _ckpt_identity(run)
    return run.overrides[key] if key in run.overrides else _lookup(run.config, key)


def assign_groups(runs: Sequence[Run]) -> list[str]:
    """Group runs by their overrides minus ``seed`` (and ``hydra.*``), and label each group by what differs.

    Runs are seeds of one group when every override key any of them set (and every config group: task, model,
    sampler, algo) has the same value in each; a key a run did not override takes its value from the run's resolved
    config (``sampler`` → ``sampler.name``), so ``sampler=sequential`` vs a run left at the default still compares
    correctly. ``ckpt`` counts as the parent run's overrides minus its seed (:func:`_ckpt_identity`). When runs of
    different commands are compared (train vs revive vs eval), the command is part of the group and leads the label,
    and keys that only some commands have (``ckpt``, ``step``, ``train.steps``) are left out: the command says it.

    Labels (``run.group``) name only the keys whose value differs between groups, ``k=v`` joined by commas; a
    sequential-only sampler setting (:data:`sesa_cli.config.SEQUENTIAL_ONLY`) is left out of a parallel group's label
    and ``experiment``, ``train.checkpoint_every``, a key a group's runs do not have (a setting of a plug-in they
    left off) and a value no run of the group set on its command line (a recipe's or a default) are left out when the
    other keys already tell the groups apart, as long as every group keeps a label of its own. When nothing but the
    seed differs, all runs form one group labelled by its ``experiment`` and sampler; when not even the seed differs,
    each run is its own group labelled by its dir name. Returns the group labels in order of first appearance.
    """
    keys: list[str] = list(_GROUP_KEYS)  # first, so a label reads sampler=sequential,algo.off_policy=...
    for run in runs:
        keys += [k for k in run.overrides if k not in keys and not _ignored(k)]

    def value(run: Run, key: str) -> str:
        found = _value(run, key)
        if found is None and not run.config:  # not unset: unknown, the run's config could not be read (a warning)
            return "(unknown: no config)"
        return _short(found)

    differing = [k for k in keys if len({value(run, k) for run in runs}) > 1]
    commands = [str(run.info.get("command") or UNKNOWN) for run in runs]
    if len(set(commands)) > 1:

        def follows_command(key: str) -> bool:
            # Set in exactly the runs of some commands and with one value wherever set: the command explains it.
            present = {(command, _value(run, key) is not None) for command, run in zip(commands, runs, strict=True)}
            values = {value(run, key) for run in runs if _value(run, key) is not None}
            return len(present) == len(set(commands)) and len(values) == 1

        differing = ["command", *(k for k in differing if not follows_command(k))]
    if differing:

        def items(command: str, run: Run, shown: Sequence[str]) -> tuple[tuple[str, str], ...]:
            return tuple((k, command if k == "command" else value(run, k)) for k in shown)

        identities = [items(c, r, differing) for c, r in zip(commands, runs, strict=True)]
        given: dict[Items, set[str]] = {}  # per group, the keys some run of it set on its command line
        for identity, run in zip(identities, runs, strict=True):
            given.setdefault(identity, set()).update(run.overrides)
        labels = _labels(identities, len(set(identities)), given)
        for run, shown in zip(runs, labels, strict=True):
            run.group, run.group_items = ",".join(f"{k}={v}" for k, v in shown), shown
    elif len(runs) > 1 and len({run.seed for run in runs}) == len(runs):
        # one group: named by its recipe and sampler (the full overrides are in the runs table)
        shown = tuple((k, value(runs[0], k)) for k in (*_INDIRECT_KEYS, "sampler") if _value(runs[0], k) is not None)
        for run in runs:
            run.group, run.group_items = ",".join(f"{k}={v}" for k, v in shown) or "all runs", shown
    else:
        names = [run.name for run in runs]
        for run in runs:
            # Two runs named alike (e.g. job "0" of two sweeps): add the parent dir to tell them apart.
            run.group = run.name if names.count(run.name) == 1 else f"{run.path.parent.name}/{run.name}"
    return list(dict.fromkeys(run.group for run in runs))


Items = tuple[tuple[str, str], ...]


def _labels(identities: Sequence[Items], n_groups: int, given: dict[Items, set[str]]) -> list[Items]:
    """The shortest of the label rules of :func:`assign_groups` that still gives ``n_groups`` distinct labels.
    ``given``: per identity, the keys its runs set on their command line (a key missing there took its value from a
    recipe or a default)."""

    def implicit(identity: Items, key: str) -> bool:
        return key not in given[identity] and key not in (*_GROUP_KEYS, "command")

    def sequential_only(key: str) -> bool:
        return key in SEQUENTIAL_ONLY

    # sequential-only keys that differ only because parallel runs hold their defaults
    sequential = [dict(i) for i in identities if dict(i).get("sampler") != "parallel"]
    constant = {k for k, _ in identities[0] if sequential_only(k) and len({i.get(k) for i in sequential}) <= 1}

    def shown(identity: Items, drop_indirect: bool, drop_sequential: bool) -> Items:
        parallel = dict(identity).get("sampler") == "parallel"
        return tuple(
            (key, val)
            for key, val in identity
            if not (
                drop_indirect
                and (key in (*_INDIRECT_KEYS, *_BOOKKEEPING_KEYS) or val == UNSET or implicit(identity, key))
            )
            and not (drop_sequential and sequential_only(key) and (parallel or key in constant))
        )

    for drop_indirect, drop_sequential in ((True, True), (False, True), (True, False), (False, False)):
        labels = [shown(i, drop_indirect, drop_sequential) for i in identities]
        if len(set(labels)) == n_groups and all(labels):
            return labels
    return list(identities)  # the full identities are distinct


def group_identity(run: Run) -> dict[str, str]:
    """What a run's group is, as data: the ``sampler`` and ``algo`` options it chose (its config's, overridden or
    not) and each ``(key, value)`` its group's label shows (:attr:`Run.group_items`)."""
    chosen = {k: _short(_value(run, k)) for k in ("sampler", "algo") if _value(run, k) is not None}
    return {**chosen, **dict(run.group_items)}


def short_label(run: Run) -> str:
    """A group label for narrow places (console, legends): option names without their key (``sampler=parallel`` →
    ``parallel``), other keys by their last part (``algo.off_policy=paper`` → ``off_policy=paper``), a plug-in's
    setting by the plug-in's name and the setting (``algo.terms.found.coef=0`` → ``found.coef=0``)."""
    if not run.group_items:
        return run.group
    parts = [
        val if key in (*_GROUP_KEYS, *_INDIRECT_KEYS, "command") else f"{_short_key(key)}={val}"
        for key, val in run.group_items
    ]
    return " ".join(parts)


def _short_key(key: str) -> str:
    """A label's name for a config key: its last part, under a plug-in mapping the plug-in's name and setting, under
    a chosen method its kind and setting (``algo.advantage.k`` -> ``advantage.k``, ``algo.advantage.name`` ->
    ``advantage``)."""
    for mapping in PLUGIN_MAPPINGS:
        if key.startswith(mapping + "."):
            return key[len(mapping) + 1 :]
    for named in NAMED_PLUGINS:
        if key.startswith(named + "."):
            kind = named.rpartition(".")[2]
            return kind if key == f"{named}.name" else f"{kind}.{key[len(named) + 1 :]}"
    return key.rpartition(".")[2]
