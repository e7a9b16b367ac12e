"""``sesa <command> --help [TOPIC]`` and ``--help-all``: the command's options, explained, in 80 columns.

``--help`` alone is the short form: the usage, the config groups and their options, and one line per help topic
(``options`` for the top-level keys, one per config section such as ``sampler`` or ``task``, ``live`` for the live
view's labels). ``--help TOPIC`` explains every option of that topic, ``--help-all`` of all of them: each with its
value and its whole documentation (the docstring under its dataclass field in sesa_cli.config or the task's
module), never cut, wrapped to 80 columns whatever the terminal's width. Hydra's own help: ``--hydra-help``.

The methods are listed from their registries, a plug-in's with sesa's own (sesa_cli.methods.KINDS): under ``algo``
every advantage estimator, policy loss and loss term, under ``sampler`` every batch filter, each with its class's
doc and each of its settings (value and doc), and every sampler. Torch-free but for the samplers: it reads the
schemas, the composed YAML and the method registries; the samplers' registry loads the model's libraries, so it is
read only when the ``sampler`` topic is printed.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
import textwrap
from collections.abc import Callable
from typing import Any

from sesa_cli import config as C
from sesa_cli.commands.compose import compose
from sesa_cli.commands.table import COMMANDS, USAGES
from sesa_cli.config import ConfigError
from sesa_cli.methods import KINDS
from sesa_cli.plugins import config_folders
from sesa_cli.rollout.filters import build_filters
from sesa_cli.terms import term_settings

HIDDEN_GROUPS = ("schema",)
"""Config groups of conf/ and the ConfigStore that are machinery, not choices (``schema/task``)."""
SECTIONS = ("model", "task", "sampler", "algo", "optim", "train", "eval", "collapse")
WIDTH = 80
"""Every line of the help fits this many columns, whatever the terminal's width."""
HELP_FLAGS = ("-h", "--help", "--help-all")


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """{field: docstring} of a dataclass and its bases: the string literal right under each field."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, [*body[1:], None], strict=True):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                doc = ""
                if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                    doc = str(after.value.value)
                docs[node.target.id] = " ".join(doc.split())
    return docs


SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!Dr)(?<!vs)\.\s+(?=[A-Z(`])")


def plain(doc: str) -> str:
    """``doc`` as terminal text: reST literals and roles unquoted, whitespace collapsed."""
    text = re.sub(r":(?:func|class|meth|mod|attr|data):`~?([^`]+)`", r"\1", doc).replace("``", "")
    return " ".join(text.split())


def first_sentence(doc: str) -> str:
    """The first sentence of ``doc`` (as :func:`plain` text), without its full stop."""
    return SENTENCE_END.split(plain(doc), maxsplit=1)[0].rstrip(".")


def wrapped(text: str, indent: int, first: str = "") -> list[str]:
    """``first`` then ``text`` wrapped to WIDTH columns, continuation lines indented by ``indent``; nothing cut (a
    word longer than a line, e.g. a long path, breaks at its characters)."""
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=first,
        subsequent_indent=" " * indent,
        break_on_hyphens=False,
    ) or [first.rstrip()]


def _value(value: Any) -> str:
    return "null" if value is None else str(value).replace("'", "")


def group_options(group: str) -> list[str]:
    """The options of a config group: the YAML files of ``conf/<group>/`` and of the plug-ins' config folders."""
    return sorted({p.stem for folder in config_folders() for p in (folder / group).glob("*.yaml")})


def _compose(config_name: str, overrides: list[str]) -> Any:
    return _composed(config_name, tuple(overrides))


@functools.lru_cache(maxsize=32)
def _composed(config_name: str, overrides: tuple[str, ...]) -> Any:
    """The composed config help reads (never changes): once per command and choice of groups."""
    try:
        return compose(config_name, list(overrides))
    except Exception:  # noqa: BLE001  (help never fails on a bad override: it shows the defaults instead)
        return compose(config_name, [])


@dataclasses.dataclass
class Topic:
    """One help topic: ``sesa <command> --help <name>`` prints its blocks."""

    name: str
    summary: str
    blocks: list[tuple[str, list[tuple[str, str]]]]  # (title, [(key=value, doc), ...])
    more: Callable[[], list[tuple[str, list[tuple[str, str]]]]] | None = None
    """Blocks read only when the topic is printed (the samplers': their registry loads torch)."""


def _rows(prefix: str, node: Any, schema: type, skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(``key=value``, doc) of every field of ``schema`` present in the composed ``node``."""
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(node, resolve=False)
    assert isinstance(values, dict)  # a config group node is a mapping
    docs = field_docs(schema)
    return [(f"{prefix}{name}={_value(values[name])}", doc) for name, doc in docs.items()
            if name not in skip and name in values]  # fmt: skip


def _section_class(schema: type, name: str) -> type | None:
    """The dataclass of field ``name`` of ``schema`` (a config section such as ``sampler``), or None."""

    cls = next((f.type for f in dataclasses.fields(schema) if f.name == name), None)
    cls = getattr(C, cls, None) if isinstance(cls, str) else cls
    return cls if isinstance(cls, type) and dataclasses.is_dataclass(cls) else None


def topics(command: str, overrides: list[str]) -> list[Topic]:
    """Every help topic of ``sesa <command>``, with the user's group choices among ``overrides`` applied."""
    from sesa_cli.commands.schemas import register_configs
    from sesa_cli.progress import legend
    from sesa_cli.tasks import TASK_SCHEMAS

    register_configs()
    config_name = COMMANDS[command][0]
    schema = {"train": C.TrainConfig, "revive": C.ReviveConfig, "eval": C.EvalConfig,
              "diversity_report": C.DiversityReportConfig}[config_name]  # fmt: skip
    cfg = _compose(config_name, overrides)
    nested = [f.name for f in dataclasses.fields(schema) if f.name in cfg and _section_class(schema, f.name)]
    sections = [s for s in SECTIONS if s in nested] + [s for s in nested if s not in SECTIONS]
    out: list[Topic] = []
    top = _rows("", cfg, schema, skip=(*sections, "run_dir"))
    if top:
        names = ", ".join(k.split("=", 1)[0] for k, _ in top)
        out.append(Topic("options", f"the top-level keys: {names}", [("options (the top-level keys)", top)]))
    for section in sections:
        cls = _section_class(schema, section)
        assert cls is not None  # sections are the dataclass-typed fields
        doc = plain(inspect.getdoc(cls) or "")
        if section == "task":
            blocks = [(f"task.* (every task): {doc}", _rows("task.", cfg.task, C.TaskConfig))]
            for name, task_schema in TASK_SCHEMAS.items():
                node = cfg.task if cfg.task.name == name else _compose(config_name, [f"task={name}"]).task
                own = _rows("task.", node, task_schema, skip=tuple(field_docs(C.TaskConfig)))
                blocks.append((f"task={name}: its own options", own))
            summary = f"the fields every task has, and each task's own: {', '.join(TASK_SCHEMAS)}"
            out.append(Topic("task", summary, blocks))
            continue
        blocks = [(f"{section}.*: {doc}", _rows(f"{section}.", cfg[section], cls))]
        for key in KINDS:
            if key.startswith(f"{section}."):
                blocks += _plugin_blocks(key, cfg)
        out.append(Topic(section, first_sentence(doc), blocks, _sampler_blocks if section == "sampler" else None))
    if config_name in ("train", "revive"):
        rows = [(f"{label}  ({key})", meaning) for label, key, meaning in legend()]
        title = "live view labels: the training bar shows each metric under a short label (docs/metrics.md explains every metric key)"
        out.append(Topic("live", "the labels of the live view's training bar", [(title, rows)]))
    return out


def _mapping_on(key: str) -> Callable[[dict[str, Any]], list[str]]:
    """Which plug-ins of the mapping ``key`` (``algo.terms``, ``sampler.filters``) a config's value turns on."""
    if key == "algo.terms":
        return lambda chosen: list(term_settings(chosen))
    return lambda chosen: [f.name for f in build_filters(chosen)]


def _plugin_blocks(key: str, cfg: Any) -> list[tuple[str, list[tuple[str, str]]]]:
    """One block per registered plug-in of ``key`` (sesa_cli.methods.KINDS: ``algo.advantage``, ``algo.terms``, ...):
    whether the composed ``cfg`` chooses it (a named kind) or turns it on (a mapping), its class's doc, and each of
    its settings with the value ``cfg`` gives it (else its default)."""
    from omegaconf import OmegaConf

    registry = KINDS[key]
    node = OmegaConf.to_container(OmegaConf.select(cfg, key), resolve=False) or {}
    assert isinstance(node, dict)  # a plug-in mapping (PLUGIN_MAPPINGS) or a named choice (NAMED_PLUGINS)
    named = key in C.NAMED_PLUGINS
    if named:
        chosen = {str(node.get("name")): {k: v for k, v in node.items() if k != "name"}}
        active = set(chosen)
    else:
        chosen = {str(name): value for name, value in node.items()}
        try:
            active = set(_mapping_on(key)(chosen))
        except ConfigError:  # help never fails on a bad setting: it shows the values as given
            active = set()
    blocks = []
    for name in sorted(registry):
        cls = registry[name]
        value = chosen.get(name)
        settings = dataclasses.asdict(cls.Settings())
        if isinstance(value, dict):
            settings.update(value)
        elif value is not None and not isinstance(value, bool) and settings:
            settings[next(iter(settings))] = value
        docs = field_docs(cls.Settings)
        rows = [(f"{key}.{field}={_value(v)}" if named else f"{key}.{name}.{field}={_value(v)}", docs.get(field, ""))
                for field, v in settings.items()]  # fmt: skip
        state = ("chosen" if named else "on") if name in active else ("" if named else "off")
        title = f"{key}={name}" if named else f"{key}.{name}"
        blocks.append((f"{title}{f' ({state})' if state else ''}: {plain(inspect.getdoc(cls) or '')}", rows))
    return blocks


def _sampler_blocks() -> list[tuple[str, list[tuple[str, str]]]]:
    """One block per registered sampler (sesa_cli.rollout.samplers.SAMPLERS, a plug-in's too): its class's doc;
    its settings are the ``sampler.*`` keys above. Imports the samplers' module, and with it torch."""
    from sesa_cli.rollout.samplers import SAMPLERS

    return [(f"sampler={name}: {plain(inspect.getdoc(SAMPLERS[name]) or '')}", []) for name in sorted(SAMPLERS)]


def _block(title: str, rows: list[tuple[str, str]]) -> list[str]:
    """A topic's block: its title, then each ``key=value`` on its own line with its whole doc wrapped under it."""
    out = wrapped(title, 2)
    for keyval, doc in rows:
        out += wrapped(keyval, 6, "  ")
        if doc:
            out += wrapped(plain(doc), 6, "      ")
    return out


def command_help(command: str, args: list[str]) -> str:
    """The text of ``sesa <command> --help [TOPIC ...]`` (``--help-all`` among ``args``: every topic). ``args``: the
    command line after the command; its overrides choose the groups shown as chosen, words name topics. An unknown
    topic is a ConfigError naming the topics."""
    every = "--help-all" in args
    wanted = [a for a in args if a not in HELP_FLAGS and not a.startswith("-") and "=" not in a]
    overrides = [a for a in args if a not in HELP_FLAGS and not a.startswith("-") and "=" in a]
    found = topics(command, overrides)
    names = [t.name for t in found]
    unknown = [w for w in wanted if w not in names]
    if unknown:
        raise ConfigError(f"no help topic {unknown[0]!r}; topics: {', '.join(names)}")
    out = [*wrapped(f"usage: {USAGES[command]}", 4), ""]
    out += [*wrapped(f"sesa {command}: {COMMANDS[command][1]}", 2), ""]
    every = every or len(found) == 1  # one topic (diversity-report's options): the short form is the whole help
    if every or wanted:
        for topic in found:
            if every or topic.name in wanted:
                out += _block(*topic.blocks[0])
                for block in [*topic.blocks[1:], *(topic.more() if topic.more else [])]:
                    out += ["", *_block(*block)]
                out.append("")
    else:
        out += _short(command, overrides, found)
    out += wrapped(
        "hydra flags: -m/--multirun (sweep: a=x,y), --cfg job (print the composed config), --info, --hydra-help "
        "(Hydra's own help). Without a terminal, progress prints a plain line every SESA_PROGRESS_SECONDS (15) s.",
        0,
    )
    return "\n".join(out)


def _short(command: str, overrides: list[str], found: list[Topic]) -> list[str]:
    """The short form: config groups and their options, then one line per help topic."""
    config_name = COMMANDS[command][0]
    cfg = _compose(config_name, overrides)
    groups = [g for g in ("model", "task", "sampler", "algo", "experiment") if g in cfg or g == "experiment"]
    if config_name != "train":
        groups = [g for g in groups if g != "experiment"]
    if config_name == "diversity_report":
        groups = []
    out: list[str] = []
    if groups:
        out.append("config groups (group=option; * = this command's choice):")
        for group in groups:
            chosen = cfg[group]["name"] if group in cfg and "name" in cfg[group] else None
            options = [f"{o}*" if o == chosen else o for o in group_options(group) if o not in HIDDEN_GROUPS]
            out += wrapped(", ".join(options), 13, f"  {group:<11}")
        out.append("")
    out += wrapped(
        f"help topics: sesa {command} --help TOPIC explains every option of a topic (its value and documentation); "
        f"sesa {command} --help-all explains all of them.",
        0,
    )
    column = max(len(t.name) for t in found) + 2
    for topic in found:
        out += wrapped(topic.summary, column + 2, f"  {topic.name:<{column}}")
    out.append("")
    return out
