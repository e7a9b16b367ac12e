"""Validate a command's overrides before any work starts, and explain a failure in one line.

Composition uses Hydra's compose API against the same conf/ and schemas as the command's ``@hydra.main`` app
(sesa_cli.commands.compose, which also words the one-line explanation), so whatever passes here composes there. In multirun mode every value of every sweep is checked. Never imports torch.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sesa_cli.commands.compose import compose, explain
from sesa_cli.commands.reload import command_config
from sesa_cli.commands.schemas import register_configs
from sesa_cli.config import SEQUENTIAL_ONLY, to_object


def _split_sweeps(overrides: list[str]) -> list[list[str]]:
    """One override list per sweep value (the other sweeps at their first value); [overrides] if no sweep."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    base: list[str] = []
    sweeps: list[list[str]] = []
    for line, ov in zip(overrides, parsed, strict=True):
        if ov.is_sweep_override():
            key = ov.get_key_element()
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


def output_dir_problem(config_name: str, overrides: list[str], multirun: bool) -> str | None:
    """Why the command could not write its output dir (``hydra.run.dir``, or ``hydra.sweep.dir`` for ``-m``), or
    None. Checked before Hydra creates it, so an unwritable place is one line, not a traceback after start-up; a
    run dir that already holds a run is refused too (its metrics and checkpoints would be overwritten)."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    hydra = compose(config_name, overrides, hydra=True).hydra
    path = Path(str(hydra.sweep.dir if multirun else hydra.run.dir)).expanduser()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{key}={path}: {existing} is a file, not a directory"
    if existing == path and os.environ.get("RANK", "0") == "0":  # replicas start after rank 0 wrote its files
        held = [n for n in ("metrics.jsonl", "metrics.json", "checkpoints", "multirun.yaml") if (path / n).exists()]
        if held:
            return f"{key}={path} already holds a run ({held[0]}); choose a new directory"
    try:  # os.access is not enough: root passes it, and /proc or a read-only mount still refuse
        tempfile.TemporaryDirectory(dir=existing).cleanup()
    except OSError as exc:
        return f"{key}={path} is not writable: cannot create anything in {existing} ({exc.strerror or exc})"
    return None


def sequential_only_problem(overrides: list[str], samplers: set[str]) -> str | None:
    """A one-line error when the command line sets a sequential-only sampler field (config.SEQUENTIAL_ONLY) and no
    job of the command samples sequentially (``samplers``: the sampler name of every job of a sweep)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys = [ov.key_or_group for ov in OverridesParser.create().parse_overrides(overrides)]
    found = sorted({k for k in keys if k.startswith("sampler.") and k.split(".", 1)[1] in SEQUENTIAL_ONLY})
    if not found or "sequential" in samplers:
        return None
    uses = " and ".join(f"sampler={name}" for name in sorted(samplers))
    return (
        f"{', '.join(found)} only {'applies' if len(found) == 1 else 'apply'} to sampler=sequential, and this "
        f"run uses {uses}: drop {'it' if len(found) == 1 else 'them'} or choose sampler=sequential"
    )


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
        return str(exc).splitlines()[0]
    samplers: set[str] = set()
    for overrides in combos:
        try:
            composed = compose(config_name, overrides)
            to_object(composed)
            # eval/revive of a checkpoint: the parent's config + overrides, as the command will run it
            final = command_config(config_name, composed, overrides)
        except Exception as exc:  # noqa: BLE001  (Hydra/OmegaConf raise many types; explain() names the key)
            return explain(exc, config_name, overrides)
        if hasattr(final, "sampler"):
            samplers.add(final.sampler.name)
    problem = sequential_only_problem(args.overrides, samplers) if samplers else None
    if problem or args.cfg:  # --cfg only prints the config: it writes no output dir
        return problem
    try:
        return output_dir_problem(config_name, combos[0], args.multirun)
    except Exception as exc:  # noqa: BLE001
        return explain(exc, config_name, combos[0])
