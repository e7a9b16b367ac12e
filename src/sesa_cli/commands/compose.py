"""A command's config composed with Hydra's compose API, and a composition error explained in one line.

The same conf/ and schemas as the command's ``@hydra.main`` app: what composes here composes there. Used by the
validation before any work starts (sesa_cli.commands.validate), by ``--help`` (sesa_cli.commands.help) and by the
reload of a parent run's config (sesa_cli.commands.reload). Never imports torch.
"""

from __future__ import annotations

import re
from typing import Any

from sesa_cli.commands.table import USAGES
from sesa_cli.config import DIGITS_LIMIT, ConfigError, conf_dir, cut
from sesa_cli.paths import hydra_value, user_path_problem
from sesa_cli.plugins import with_search_path
from sesa_cli.tasks import TASK_SCHEMAS


def store_task_schemas() -> None:
    """Store every registered task's schema in Hydra's ConfigStore as ``schema/task/<name>`` (idempotent), a plug-in's
    task too once its module is imported (conf/task/<name>.yaml names its schema in its defaults)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for name, schema in TASK_SCHEMAS.items():
        cs.store(group="schema/task", name=name, node=schema)


def compose(config_name: str, overrides: list[str], hydra: bool = False) -> Any:
    """The command ``config_name``'s config with ``overrides`` (and Hydra's own node when ``hydra``)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir()), job_name=config_name):
        return hydra_compose(config_name, overrides=with_search_path(overrides), return_hydra_config=hydra)


def _valid_keys(config_name: str, overrides: list[str], parent: str, bad: str) -> list[str]:
    """Keys under ``parent`` in the config composed with only the group choices of ``overrides`` (minus ``bad``)."""
    from omegaconf import OmegaConf

    names = [o.split("=", 1)[0].lstrip("+~") for o in overrides]
    choices = [o for o, n in zip(overrides, names, strict=True) if "=" in o and "." not in n and n != bad]
    try:
        cfg = compose(config_name, choices)
    except Exception:  # noqa: BLE001  (only a hint for the message: no valid-key list then)
        return []
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return sorted(node.keys()) if hasattr(node, "keys") else []


PLUGIN_HINTS = {
    "hydra/launcher": " (launcher plugins: pip install 'sesa[launchers]')",
    "hydra/launcher=ray": " (Hydra's Ray launcher: pip install 'sesa[ray]')",
    "hydra/sweeper": " (Hydra's Optuna sweeper: pip install 'sesa[optuna]')",
}
"""What to install for a Hydra plugin group's option that is missing (by ``group=value``, else by group)."""


def explain(exc: BaseException, config_name: str, overrides: list[str]) -> str:
    """A one-line message naming the key (and the valid choices) for a composition error."""
    from hydra.errors import MissingConfigException
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    msg = str(exc)
    value_problem = _unreadable_value(exc, overrides)
    if value_problem:
        return value_problem
    missing = re.search(r"missing mandatory value: (\S+)", msg)
    if missing:  # a key the command cannot run without: its usage line says what to pass
        command = config_name.replace("_", "-")
        return f"{missing.group(1)}= is required; usage: {USAGES.get(command, 'sesa ' + command)}"
    if isinstance(exc, ConfigError):
        return with_recipe_source(msg, config_name, overrides)
    if isinstance(exc, MissingConfigException):
        m = re.search(r"Could not find '([^']+)'", msg)
        options = re.findall(r"^\t(\S+)$", msg, flags=re.MULTILINE)
        # the group Hydra listed the options of (``task=../../etc/passwd`` is looked up as task/../../etc/passwd)
        listed = re.search(r"Available options in '([^']+)'", msg)
        group = listed.group(1) if listed else m.group(1).rpartition("/")[0] if m else ""
        if m and options and m.group(1).startswith(group + "/"):
            value = m.group(1)[len(group) + 1 :]
            hint = PLUGIN_HINTS.get(f"{group}={value}", PLUGIN_HINTS.get(group, ""))
            if "/" in value:
                hint += f" (an option is the name of a file in conf/{group}/, not a path)"
            return f"{group}={cut(value)} is not a {group} option; choose one of: {', '.join(options)}{hint}"
        return f"no config named {m.group(1)!r}" if m else msg.splitlines()[0]
    if "LexerNoViableAlt" in msg or "NoViableAlt" in msg:
        unquoted = _unquoted_non_ascii(overrides)
        if unquoted:
            return unquoted
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    full_key = getattr(cause, "full_key", None)
    if isinstance(cause, ConfigKeyError) or "not in" in str(cause) or "No match in the defaults list" in msg:
        m = re.search(r"Could not (?:override|append to) '([^']+)'", msg)
        key = full_key or (m.group(1) if m else "?")
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        valid = _valid_keys(config_name, overrides, parent, key)
        where = f"under {parent!r}" if parent else "at the top level"
        hint = f"; valid keys {where}: {', '.join(valid)}" if valid else ""
        return f"unknown key {key!r}{hint}"
    if isinstance(cause, OmegaConfBaseException):
        first = str(cause).splitlines()[0]
        return f"{full_key}: {first}" if full_key else first
    return msg.splitlines()[0] if msg else type(exc).__name__


def _unquoted_non_ascii(overrides: list[str]) -> str | None:
    """The one line for an override whose value holds characters other than ASCII unquoted (``hydra.run.dir=été``):
    Hydra's override grammar reads them only inside quotes, and its own message names a lexer, not the fix."""
    for line in overrides:
        key, sep, value = line.partition("=")
        if sep and not value.isascii() and value[:1] not in ("'", '"'):
            quoted = f"{key}={hydra_value(value)}"
            return (
                f"{cut(line)}: Hydra's override grammar reads characters other than ASCII only inside quotes; "
                f'quote the value: "{cut(quoted)}" (the outer quotes for the shell)'
            )
    return None


RECIPE_GROUPS = ("experiment", "task_model/")
"""Config groups whose options are recipes (``# @package _global_``): they set keys across the config."""


def recipe_source(config_name: str, overrides: list[str], key: str) -> str | None:
    """The recipe (``task_model/train=frozenlake_tiny``, ``experiment=...``) that sets ``key`` in the command's
    config: the chosen recipe whose removal changes the key's value; None when the value is not a recipe's."""
    from omegaconf import OmegaConf

    try:
        composed = compose(config_name, overrides, hydra=True)
        choices = {g: c for g, c in composed.hydra.runtime.choices.items() if g.startswith(RECIPE_GROUPS) and c}
        value = OmegaConf.select(composed, key)
        for group, choice in choices.items():
            without = compose(config_name, [*overrides, f"~{group}"])
            if OmegaConf.select(without, key) != value:
                return f"{group}={choice}"
    except Exception:  # noqa: BLE001  (a hint only: the error stands without it)
        return None
    return None


def with_recipe_source(problem: str, config_name: str, overrides: list[str]) -> str:
    """``problem`` (a schema's one line, ``sampler.parallel_rows=4 must be in [0, 3]...``) with the recipe that set
    its key where the command line did not: a user who typed ``sampler.group_size=4`` learns that the recipe
    chose ``sampler.parallel_rows=4`` and what to add to the command line instead."""
    m = re.match(r"([a-z_]+(?:\.[\w-]+)+)=(\S+) ", problem)
    if m is None:
        return problem
    key, value = m.groups()
    typed = {line.partition("=")[0].lstrip("+~") for line in overrides}
    if key in typed:
        return problem
    source = recipe_source(config_name, overrides, key)
    if source is None:
        return problem
    bounds = re.search(r"= \[(-?\d+), (-?\d+)\]", problem)
    if bounds:
        low, high = int(bounds.group(1)), int(bounds.group(2))
        add = f"add {key}=N with N in [{low}, {high}] to the command line, e.g. {key}={(low + high + 1) // 2}"
    else:
        add = f"add {key}= with a value that fits to the command line"
    return f"{problem}; {key}={value} is set by the recipe {source}: {add}"


def _unreadable_value(exc: BaseException, overrides: list[str]) -> str | None:
    """The one line, naming the key, for an override no config can hold: a number longer than Python reads, a NUL
    byte, a group option or path whose name the file system refuses. None for any other error."""
    import errno
    import os

    msg = str(exc)
    for line in overrides:
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key = key.lstrip("+~")
        digits = max((len(run) for run in re.findall(r"\d+", value)), default=0)
        if digits > DIGITS_LIMIT and "integer string conversion" in msg:
            return f"{key}={cut(value)}: a number of {digits:,} digits is longer than can be read (at most {DIGITS_LIMIT:,})"
        if "\x00" in line:
            shown = cut(value.replace("\x00", "\\x00"))
            return f"{key}={shown}: the value holds a NUL byte (\\x00), which no name, path or number can hold"
        if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG and "." not in key and value:
            name = os.fsdecode(exc.filename or "")
            if f"{os.sep}{key}{os.sep}{value}" in name:  # Hydra looked for conf/<group>/<value>.yaml
                options = (
                    sorted(p.stem for p in (conf_dir() / key).glob("*.yaml")) if (conf_dir() / key).is_dir() else []
                )
                listed = f"; choose one of: {', '.join(options)}" if options else ""
                return f"{key}={cut(value)} is not a {key} option (its name is too long){listed}"
    if "integer string conversion" in msg:  # not an override's: a config file's (a recipe, --config-dir)
        return _long_number_in_config_files(overrides)
    if isinstance(exc, OSError):
        return user_path_problem(exc, overrides)
    return None


def _long_number_in_config_files(overrides: list[str]) -> str | None:
    """The one line naming the config file and key of a number too long to read, among the files the composition
    read: sesa's conf/, the plug-ins' config folders and the ``hydra.searchpath`` entries (``--config-dir``)."""
    from pathlib import Path

    from sesa_cli.plugins import config_folders
    from sesa_cli.yaml_files import long_number

    folders = list(config_folders())
    for line in overrides:
        name, _, value = line.partition("=")
        if name.lstrip("+") == "hydra.searchpath":
            for entry in value.strip().strip("[]").split(","):
                entry = entry.strip().strip("'\"")
                if entry.startswith("file://"):
                    folders.append(Path(entry[len("file://") :]))
    pattern = re.compile(rb"\d{%d}" % (DIGITS_LIMIT + 1))
    for folder in folders:
        for path in sorted(folder.rglob("*.yaml")) if folder.is_dir() else ():
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if pattern.search(data):
                found = long_number(data.decode("utf-8", errors="replace"))
                if found is not None:
                    key, digits = found
                    return (f"{path}: {key} is a number of {digits:,} digits, longer than can be read (at most "
                            f"{DIGITS_LIMIT:,})")  # fmt: skip
    return None


CONFIG_DIR_FLAGS = ("--config-dir", "-cd")


def config_dir_as_searchpath(args: list[str]) -> list[str]:
    """``args`` with Hydra's ``--config-dir DIR`` (``-cd DIR``, ``--config-dir=DIR``) turned into the
    ``hydra.searchpath`` entry it stands for: Hydra puts an added config dir after the command's own configs and
    before the schemas, where ``hydra.searchpath`` puts its entries, so the two are the same search path; as an
    override it reaches every composition sesa makes (the validation before any work, the run dir, ``--help``),
    not only the Hydra app's. A user's own ``hydra.searchpath`` keeps its entries, after the config dir's. A dir that
    does not exist is a one-line ConfigError."""
    import os

    from hydra.core.override_parser.overrides_parser import OverridesParser

    dirs: list[str] = []
    rest: list[str] = []
    it = iter(args)
    for arg in it:
        flag, eq, value = arg.partition("=")
        if flag in CONFIG_DIR_FLAGS:
            value = value if eq else str(next(it, ""))
            if not value or not os.path.isdir(os.path.expanduser(value)):
                raise ConfigError(f"--config-dir {cut(value) or '(missing)'}: no such directory")
            dirs.append("file://" + os.path.abspath(os.path.expanduser(value)))
        else:
            rest.append(arg)
    if not dirs:
        return args
    theirs: list[str] = []
    for i, arg in enumerate(rest):
        if arg.lstrip("+").startswith("hydra.searchpath="):
            given = OverridesParser.create().parse_overrides([arg])[0].value()
            theirs = [str(v) for v in given] if isinstance(given, list) else [str(given)]
            del rest[i]
            break
    line = f"hydra.searchpath=[{','.join(hydra_value(d) for d in [*dirs, *theirs])}]"
    # beside the other overrides: Hydra's parser takes overrides in one run, between its flags
    at = next((i for i, arg in enumerate(rest) if not arg.startswith("-") and "=" in arg), len(rest))
    return [*rest[:at], line, *rest[at:]]
