"""Validate a command's overrides before any work starts, and explain a failure in one line.

Composition uses Hydra's compose API against the same conf/ and schemas as the command's ``@hydra.main`` app
(sesa_cli.commands.compose, which also words the one-line explanation), so whatever passes here composes there. In
multirun mode every value of every sweep is checked. What the schemas cannot know is checked after them: the
plug-ins' registries (sesa_cli.plugins.settings_problems), the names the algorithm registries hold, which code fills,
and the task's own options (its data files), by building the task (:func:`registry_problem`), and a ``device=cuda``
against the machine (sesa_cli.devices). That imports sesa_cli.algos, and so torch, for the commands that train or
evaluate (the ones that import it anyway); the report's validation never does.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from sesa_cli.commands.compose import compose, explain
from sesa_cli.commands.reload import command_config
from sesa_cli.commands.schemas import register_configs
from sesa_cli.commands.sweep import other_sweep
from sesa_cli.config import SEQUENTIAL_ONLY, device_form, to_object
from sesa_cli.devices import device_memory, device_problem
from sesa_cli.plugins import settings_problems


def _split_sweeps(overrides: list[str]) -> list[list[str]]:
    """One override list per sweep value (the other sweeps at their first value; an ``interval(a, b)`` range at
    each end); [overrides] if no sweep."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import IntervalSweep

    parsed = OverridesParser.create().parse_overrides(overrides)
    base: list[str] = []
    sweeps: list[list[str]] = []
    for line, ov in zip(overrides, parsed, strict=True):
        if ov.is_sweep_override():
            key = ov.get_key_element()
            value = ov.value()
            if isinstance(value, IntervalSweep):  # a sweeper's search range (hydra/sweeper=optuna): its two ends
                ends = (float(value.start or 0), float(value.end or 0))
                sweeps.append([f"{key}={int(v) if v.is_integer() else v}" for v in ends])
            else:
                sweeps.append([f"{key}={v}" for v in ov.sweep_string_iterator()])
        else:
            base.append(line)  # the override as typed (Hydra's ov.input_line)
    if not sweeps:
        return [base]
    firsts = [values[0] for values in sweeps]
    combos = []
    for i, values in enumerate(sweeps):
        for v in values:
            combos.append(base + firsts[:i] + [v] + firsts[i + 1 :])
    return combos


def output_dir_problem(
    config_name: str, overrides: list[str], multirun: bool, sweep_overrides: list[str] | None = None
) -> str | None:
    """Why the command could not write its output dir (``hydra.run.dir``, or ``hydra.sweep.dir`` for ``-m``), or
    None. Checked before Hydra creates it, so an unwritable place is one line, not a traceback after start-up; a
    sweep dir that holds a run, or another sweep, is refused too (a rerun of the same sweep resumes it:
    sesa_cli.commands.sweep; a single run's dir is checked once the command holds its lock: sesa_cli.commands.rundir)."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    hydra = compose(config_name, overrides, hydra=True).hydra
    path = Path(str(hydra.sweep.dir if multirun else hydra.run.dir)).expanduser()
    existing = path
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if existing.is_symlink() and not existing.exists():
        return f"{key}={path}: {existing} is a symlink that leads nowhere (a loop, or its target is gone)"
    try:
        existing.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # a loop further up (RuntimeError before Python 3.13)
        return f"{key}={path}: {existing} cannot be resolved ({getattr(exc, 'strerror', None) or exc})"
    if not existing.is_dir():
        return f"{key}={path}: {existing} is a file, not a directory"
    if existing == path and multirun and os.environ.get("RANK", "0") == "0":
        held = [n for n in ("metrics.jsonl", "metrics.json", "checkpoints") if (path / n).exists()]
        if held:
            return f"{key}={path} already holds a run ({held[0]}); choose a new directory"
        # a sweep's own dir: rerunning its command resumes it (sesa_cli.commands.sweep); another sweep's is refused
        problem = other_sweep(path, config_name, sweep_overrides or overrides)
        if problem:
            return problem
    from sesa_cli.commands.rundir import foreign_problem, held_files

    if existing == path and held_files(path):
        return None  # a run's dir: what it holds is checked once the command holds its lock (sesa_cli.commands.rundir)
    if existing == path and not multirun and config_name != "diversity_report":  # (a report's: check_report_dir)
        # the user's own files: refused before the probe below writes there
        problem = foreign_problem(path, f"{key}={path}")
        if problem:
            return problem
    try:  # os.access is not enough: root passes it, and /proc or a read-only mount still refuse
        tempfile.TemporaryDirectory(dir=existing).cleanup()
    except OSError as exc:
        return f"{key}={path} is not writable: cannot create anything in {existing} ({exc.strerror or exc})"
    return None


def sequential_only_problem(overrides: list[str], samplers: set[str]) -> str | None:
    """A one-line error when the command line sets a sequential-only key (config.SEQUENTIAL_ONLY) and every job of
    the command samples with ``sampler=parallel``, the sampler that reads none of them (``samplers``: the sampler name
    of every job of a sweep; ``sampler=lte`` reads the off-policy keys and ``sampler.parallel_rows``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys = [ov.key_or_group for ov in OverridesParser.create().parse_overrides(overrides)]
    found = sorted({k for k in keys if k in SEQUENTIAL_ONLY})
    if not found or samplers - {"parallel"}:
        return None
    uses = " and ".join(f"sampler={name}" for name in sorted(samplers))
    return (
        f"{', '.join(found)} only {'applies' if len(found) == 1 else 'apply'} to sampler=sequential, and this "
        f"run uses {uses}: drop {'it' if len(found) == 1 else 'them'} or choose sampler=sequential"
    )


def _model_dims(model: Any) -> tuple[int, int, str] | None:
    """(decoder layers, key/value width per layer, where it was read) of the policy a config names, when known
    before loading it: ``model=tiny``'s own fields, or ``model.path``'s config.json; None for a hub or packaged
    model (its sizes come with its weights)."""
    if model.path:
        import json

        try:
            hf = json.loads((Path(model.path).expanduser() / "config.json").read_text())
            layers, hidden, heads = (
                int(hf["num_hidden_layers"]),
                int(hf["hidden_size"]),
                int(hf["num_attention_heads"]),
            )
            kv_heads = int(hf.get("num_key_value_heads") or heads)
            head_dim = int(hf.get("head_dim") or hidden // heads)
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
            return None  # loading it says what is wrong
        return layers, kv_heads * head_dim, f"{model.path}/config.json"
    if model.name == "tiny" and not model.hub_id and not model.gguf_package:
        return model.num_layers, model.hidden_size, "model.num_layers, model.hidden_size"
    return None


def memory_problem(config: Any, here: bool = True) -> str | None:
    """A one-line error when the rows a command samples at once cannot fit the memory of the device it runs on,
    before any model work (``sampler.group_size=100000`` would otherwise warm-start, then fail with an allocation
    traceback).

    A lower bound, so it never refuses what could run: the key/value cache of every sampled token alone, tokens =
    rows x ``task.max_new_tokens`` (a sequential chain holds the G items of its group in one row: the same count),
    2 x layers x key/value width values per token, 4 bytes each (2 under ``model.dtype=bfloat16``); compared with
    the memory of ``device`` (sesa_cli.devices.device_memory: a GPU's own, else the machine's physical memory; a
    GPU of a job that runs elsewhere, ``here`` False, is not checked). Rows: ``train.batch_size`` x
    ``sampler.group_size`` (x ``sampler.solutions_per_sketch`` for sketches) for training, ``eval.instances`` x
    ``eval.samples`` (at most ``model.max_batch_rows``; on a GPU with it left at 0, one instance's samples: the rows
    of a draw are then chosen to fit, sesa_cli.devices.auto_batch_rows) for an evaluation. Models whose sizes are
    known only once loaded (hub, packaged) are not checked here."""
    dims = _model_dims(config.model)
    if dims is None:
        return None
    # a job that runs elsewhere on cuda (or auto) meets that machine's GPU, not this one's
    memory = device_memory(config.device) if here or device_form(config.device)[0] == "cpu" else None
    if memory is None:
        return None
    capacity, gpu = memory
    holder = f"the GPU it runs on ({gpu}) has" if gpu else "this machine has"
    layers, width, source = dims
    per_token = 2 * layers * width * (2 if config.model.dtype == "bfloat16" else 4)
    tokens = config.task.max_new_tokens
    sizes: list[tuple[int, str]] = []
    if hasattr(config, "train"):
        m = config.sampler.solutions_per_sketch if config.sampler.name == "sequential" else 1
        rows = config.train.batch_size * config.sampler.group_size * m
        sizes.append((rows, f"train.batch_size={config.train.batch_size} x sampler.group_size={config.sampler.group_size}"
                      + (f" x sampler.solutions_per_sketch={m}" if m > 1 else "")))  # fmt: skip
    instances = config.eval.instances or 1
    rows = instances * config.eval.samples
    if config.model.max_batch_rows or gpu:
        rows = min(rows, max(config.model.max_batch_rows, config.eval.samples))
    named = f"eval.instances={instances} x " if config.eval.instances else ""
    sizes.append((rows, f"{named}eval.samples={config.eval.samples}"))
    for rows, named in sizes:
        need = rows * tokens * per_token
        if need > capacity:
            return (
                f"{named} rows x task.max_new_tokens={tokens} need at least {need / 1e9:,.1f} GB of key/value cache "
                f"({layers} layers x {width} key/value width, from {source}) and {holder} "
                f"{capacity / 1e9:,.1f} GB: lower them"
            )
    return None


LOCAL_LAUNCHERS = ("basic", "joblib", "submitit_local")
"""Hydra launchers whose jobs run on this machine; under any other (``submitit_slurm``, ``ray``) they run on the
cluster's machines, which check their own ``device`` when a job loads its model (sesa_cli.models.loading)."""


def runs_here(overrides: list[str]) -> bool:
    """Whether the command's jobs run on this machine (the launcher the overrides choose is a local one)."""
    chosen = [o.split("=", 1)[1] for o in overrides if o.lstrip("+~").startswith("hydra/launcher=")]
    return not chosen or chosen[-1] in LOCAL_LAUNCHERS


def registry_problem(config: Any) -> str | None:
    """A one-line error for a registry name the config schemas cannot check (``algo.aggregation``,
    ``algo.off_policy``, ``algo.kl_estimator``, ``optim.lr_schedule``: the registries of sesa_cli.algos, as filled
    when the command starts; the methods' names and settings are checked before, sesa_cli.plugins.settings_problems) or a task option its class refuses (a missing data file),
    found by building the task: all before any model work (``algo.advantage=nope`` was once found after the
    model loaded and the step-0 evaluation ran, leaving a failed run dir)."""
    from sesa_cli.config import ConfigError
    from sesa_cli.tasks.base import make_task

    try:
        if hasattr(config, "algo"):
            from sesa_cli import algos

            for name, registry in (
                ("aggregation", algos.AGGREGATIONS),
                ("off_policy", algos.OFF_POLICY),
                ("kl_estimator", algos.KL_ESTIMATORS),
            ):
                registry.lookup(getattr(config.algo, name))
        if hasattr(config, "optim"):
            from sesa_cli import algos

            algos.LR_SCHEDULES.lookup(config.optim.lr_schedule)
        if hasattr(config, "task"):
            make_task(config.task, config.seed)
    except ConfigError as exc:
        return str(exc)
    return None


def validate_argv(config_name: str, argv: list[str]) -> str | None:
    """None if the command line composes into a valid config, else a one-line explanation."""
    from hydra._internal.utils import get_args_parser

    args = get_args_parser().parse_args(argv)
    if args.help or args.hydra_help or args.shell_completion or args.info:
        return None
    if args.multirun and args.cfg:  # Hydra refuses the pair with a traceback
        return "-m/--multirun and --cfg cannot be combined: show one job's config without -m"
    register_configs()
    try:
        combos = _split_sweeps(args.overrides) if args.multirun else [args.overrides]
    except Exception as exc:  # noqa: BLE001  (any parse error of the user's sweep becomes its one-line message)
        return explain(exc, config_name, args.overrides)
    samplers: set[str] = set()
    for overrides in combos:
        try:
            composed = compose(config_name, overrides)
            to_object(composed)
            # eval/revive of a checkpoint: the parent's config + overrides, as the command will run it
            final = command_config(config_name, composed, overrides)
        except Exception as exc:  # noqa: BLE001  (Hydra/OmegaConf raise many types; explain() names the key)
            return explain(exc, config_name, overrides)
        problems = settings_problems(final)  # the plug-ins' registries: loss terms, batch filters, loggers
        problem = "; ".join(problems) or registry_problem(final)
        if problem:
            return problem
        if hasattr(final, "sampler"):
            samplers.add(final.sampler.name)
            here = runs_here(overrides)
            problem = (device_problem(final.device) if here else None) or memory_problem(final, here)
            if problem:
                return problem
    problem = sequential_only_problem(args.overrides, samplers) if samplers else None
    if problem or args.cfg:  # --cfg only prints the config: it writes no output dir
        return problem
    try:
        return output_dir_problem(config_name, combos[0], args.multirun, args.overrides)
    except Exception as exc:  # noqa: BLE001
        return explain(exc, config_name, combos[0])
