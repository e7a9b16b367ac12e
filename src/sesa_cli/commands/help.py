"""``sesa <command> --help``: the command's usage, its config groups and every option with one line of its
documentation (the docstring under its dataclass field in sesa_cli.config or the task's module), each task's own
options under the task group, and the legend of the live view's labels. Hydra's own help: ``--hydra-help``.

Torch-free: it reads the schemas and the composed YAML only.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
import shutil
import textwrap
from typing import Any

from sesa_cli.commands.compose import compose
from sesa_cli.commands.table import COMMANDS, USAGES
from sesa_cli.config import conf_dir

HIDDEN_GROUPS = ("schema",)
"""Config groups of conf/ and the ConfigStore that are machinery, not choices (``schema/task``)."""
SECTIONS = ("model", "task", "sampler", "algo", "optim", "train", "eval", "collapse")


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


def one_line(doc: str, width: int) -> str:
    """The first sentence of ``doc`` (reST literals unquoted), cut to ``width`` characters."""
    first = SENTENCE_END.split(doc.replace("``", ""), maxsplit=1)[0].rstrip(".")
    return first if len(first) <= width else first[: width - 3].rstrip() + "..."


def _value(value: Any) -> str:
    if value is None:
        return "null"
    text = str(value).replace("'", "")
    return text if len(text) <= 28 else text[:25] + "..."


def group_options(group: str) -> list[str]:
    folder = conf_dir() / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def _compose(config_name: str, overrides: list[str]) -> Any:
    try:
        return compose(config_name, overrides)
    except Exception:  # noqa: BLE001  (help never fails on a bad override: it shows the defaults instead)
        return compose(config_name, [])


def _rows(prefix: str, node: Any, schema: type, skip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(``key=value``, doc) of every documented field of ``schema`` present in the composed ``node``."""
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(node, resolve=False)
    assert isinstance(values, dict)  # a config group node is a mapping
    docs = field_docs(schema)
    return [(f"{prefix}{name}={_value(values[name])}", doc) for name, doc in docs.items()
            if name not in skip and name in values]  # fmt: skip


def command_help(command: str, overrides: list[str]) -> str:
    """The text of ``sesa <command> --help`` (with the user's group choices among ``overrides`` applied)."""
    from sesa_cli import config as C
    from sesa_cli.commands.schemas import register_configs
    from sesa_cli.progress import legend
    from sesa_cli.tasks import TASK_SCHEMAS

    register_configs()
    config_name = COMMANDS[command][0]
    schema = {"train": C.TrainConfig, "revive": C.ReviveConfig, "eval": C.EvalConfig,
              "diversity_report": C.DiversityReportConfig}[config_name]  # fmt: skip
    cfg = _compose(config_name, [o for o in overrides if not o.startswith("-")])
    width = max(80, min(160, shutil.get_terminal_size((120, 40)).columns))
    out = [f"usage: {USAGES[command]}", "", f"sesa {command}: {COMMANDS[command][1]}", ""]
    groups = [g for g in ("model", "task", "sampler", "algo", "experiment") if g in cfg or g == "experiment"]
    if config_name not in ("train",):
        groups = [g for g in groups if g != "experiment"]
    if config_name == "diversity_report":
        groups = []
    if groups:
        out.append("config groups (group=option; * = this command's choice):")
        for group in groups:
            chosen = cfg[group]["name"] if group in cfg and "name" in cfg[group] else None
            options = [f"{o}*" if o == chosen else o for o in group_options(group) if o not in HIDDEN_GROUPS]
            out.append(f"  {group:<11}{', '.join(options)}")
        out.append("")
    top = [(k, d) for k, d in _rows("", cfg, schema, skip=(*SECTIONS, "run_dir"))]
    sections: list[tuple[str, list[tuple[str, str]]]] = [("options", top)] if top else []
    for section in SECTIONS:
        if section not in cfg:
            continue
        cls = next(f.type for f in dataclasses.fields(schema) if f.name == section)
        cls = getattr(C, cls, None) if isinstance(cls, str) else cls
        if section == "task":
            common = _rows("task.", cfg.task, C.TaskConfig)
            sections.append(("task.* (every task)", common))
            for name, task_schema in TASK_SCHEMAS.items():
                node = cfg.task if cfg.task.name == name else _compose(config_name, [f"task={name}"]).task
                own = _rows("task.", node, task_schema, skip=tuple(field_docs(C.TaskConfig)))
                sections.append((f"task={name}: its own options", own))
            continue
        if cls is None:
            continue
        doc = " ".join((inspect.getdoc(cls) or "").split())
        title = f"{section}.*: {one_line(doc, width - len(section) - 4)}"
        sections.append((title, _rows(f"{section}.", cfg[section], cls)))
    for title, rows in sections:
        if not rows:
            continue
        out.append(title)
        key_width = min(44, max(len(k) for k, _ in rows) + 2)
        for keyval, doc in rows:
            room = width - key_width - 4
            line = f"  {keyval:<{key_width}}{one_line(doc, room)}" if len(keyval) < key_width else (
                f"  {keyval}\n  {'':<{key_width}}{one_line(doc, room)}")  # fmt: skip
            out.append(line.rstrip())
        out.append("")
    if config_name in ("train", "revive"):
        out.append("live view labels (the training bar; docs/metrics.md explains every metric key):")
        for label, key, meaning in legend():
            out.append(f"  {label:<12}{key:<28}{one_line(meaning, width - 44)}")
        out.append("")
    out += [
        "hydra flags: -m/--multirun (sweep: a=x,y), --cfg job (print the composed config), --info, --hydra-help",
        "(Hydra's own help). Without a terminal, progress prints a plain line every SESA_PROGRESS_SECONDS (15) s.",
    ]
    return "\n".join(out)
