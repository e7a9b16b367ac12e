"""Plug-ins: a user's own modules, loaded before a command composes its config, that register what they define.

A plug-in module registers a loss term (``@register_term``), an advantage estimator (``@register_advantage``,
sesa_cli.advantages) or policy loss (``@register_loss``, sesa_cli.losses), a batch filter (``@register_filter``), a
sampler
(``@register_sampler``) or a task (``@register_task``) exactly as sesa's own modules do (docs/extending.md), and may
add a folder of config files (``add_config_dir``: ``conf/task/mytask.yaml`` for ``task=mytask``) to Hydra's search
path. Two ways in, both imported before any config is checked:

* the ``sesa.plugins`` entry points of installed packages (``[project.entry-points."sesa.plugins"]`` in their
  pyproject.toml, ``name = "mypkg.myterm"``), always;
* ``plugins=[mypkg.myterm]`` on the command line (and in a run's config, so ``sesa eval`` and ``sesa revive`` of
  the run import them again).

A module that cannot be imported, or that exits while it is imported, is a one-line ConfigError. Torch-free: the
modules imported are the user's.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sesa_cli.config import ConfigError, conf_dir, first_line
from sesa_cli.loggers import check_names
from sesa_cli.methods import check_methods
from sesa_cli.rollout.filters import build_filters
from sesa_cli.terms import term_settings

__all__ = [
    "ENTRY_POINTS",
    "add_config_dir",
    "config_folders",
    "load",
    "load_entry_points",
    "named",
    "search_path",
    "settings_problems",
    "with_search_path",
]

ENTRY_POINTS = "sesa.plugins"
"""The entry-point group whose modules every command imports."""

_loaded: set[str] = set()
_entry_points_loaded = False
_config_dirs: list[Path] = []


def add_config_dir(path: str | Path) -> None:
    """Put a plug-in's folder of config files on Hydra's search path (after sesa's own ``conf/``): a file
    ``<path>/task/mytask.yaml`` is then the option ``task=mytask``. Called by a plug-in module when it is imported."""
    folder = Path(path).resolve()
    if not folder.is_dir():
        raise ConfigError(f"plug-in config dir {folder} does not exist")
    if folder not in _config_dirs:
        _config_dirs.append(folder)


def config_folders() -> list[Path]:
    """Every folder of config files, sesa's own ``conf/`` first, then the plug-ins' (a group's options are the YAML
    files of ``<folder>/<group>/``)."""
    return [conf_dir(), *_config_dirs]


def search_path() -> list[str]:
    """The plug-ins' config folders as Hydra search-path entries (``file://...``), in the order they were added."""
    return [f"file://{folder}" for folder in _config_dirs]


def with_search_path(overrides: list[str]) -> list[str]:
    """``overrides`` with the plug-ins' config folders appended to ``hydra.searchpath`` (the user's own entries
    first); unchanged when no plug-in adds one."""
    extra = search_path()
    if not extra:
        return list(overrides)
    out, mine = [], []
    for item in overrides:
        name, _, value = item.partition("=")
        if name.lstrip("+") == "hydra.searchpath":
            mine = [v.strip() for v in value.strip().strip("[]").split(",") if v.strip()]
        else:
            out.append(item)
    return [*out, f"hydra.searchpath=[{','.join([*mine, *(e for e in extra if e not in mine)])}]"]


def load_entry_points() -> None:
    """Import the module of every ``sesa.plugins`` entry point of the installed packages (once)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for entry in importlib.metadata.entry_points(group=ENTRY_POINTS):
        _import(entry.value.partition(":")[0], f"entry point {entry.name!r} ({ENTRY_POINTS})")


def load(modules: Iterable[str]) -> None:
    """Import each of ``modules`` (``plugins=[...]``) once, after the entry points'."""
    load_entry_points()
    for module in modules:
        _import(str(module), f"plugins={module}")


def _import(module: str, where: str) -> None:
    if module in _loaded:
        return
    try:
        importlib.import_module(module)
    except ConfigError:
        raise
    except SystemExit as exc:  # sys.exit() at import would end the command with its code and no word (exit 0)
        raise ConfigError(
            f"{where}: importing {module!r} called sys.exit({exc.code!r}); a plug-in module must register what it "
            "defines and return, not exit"
        ) from None
    except Exception as exc:  # noqa: BLE001  (a user's module can raise anything on import)
        hint = " (is it installed, or on PYTHONPATH?)" if isinstance(exc, ModuleNotFoundError) else ""
        raise ConfigError(f"{where}: cannot import {module!r}: {first_line(exc)}{hint}") from None
    _loaded.add(module)


def named(overrides: Iterable[str]) -> list[str]:
    """The modules a command line's ``plugins=`` override names (``plugins=[a,b]``, ``plugins=a``), before Hydra
    parses it: they must be imported before the config can be composed."""
    found: list[str] = []
    for item in overrides:
        name, sep, value = item.partition("=")
        if sep and name.lstrip("+") == "plugins":
            found += [v.strip().strip("'\"") for v in value.strip().strip("[]").split(",") if v.strip()]
    return found


def settings_problems(config: Any) -> list[str]:
    """One line per plug-in setting of a typed command config that its registry refuses: an unknown advantage,
    policy loss, loss term, batch filter or logger, or a setting they do not have (checked without torch, before any
    model work)."""
    checks: list[Callable[[], object]] = []
    if hasattr(config, "logger"):
        checks.append(lambda: check_names(list(config.logger)))
    if hasattr(config, "algo"):
        checks.append(lambda: term_settings(dict(config.algo.terms)))
        checks.append(lambda: check_methods(config))
    if hasattr(config, "sampler"):
        checks.append(lambda: build_filters(dict(config.sampler.filters)))
    problems = []
    for check in checks:
        try:
            check()
        except ConfigError as exc:
            problems.append(str(exc))
    return problems
