"""`sesa <command> --help`: fits 80 columns whatever the terminal, short by default, and `--help-all` explains every
option of the schemas with its whole documentation; no pointer to a document a user does not have."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sesa_cli import config as C
from sesa_cli.commands.help import HIDDEN_GROUPS, command_help, field_docs, plain, topics
from sesa_cli.commands.table import COMMANDS
from sesa_cli.tasks import TASK_SCHEMAS
from tests.conftest import run_cli

SCHEMAS = {"train": C.TrainConfig, "revive": C.ReviveConfig, "eval": C.EvalConfig,
           "diversity-report": C.DiversityReportConfig}  # fmt: skip
ROOT = Path(__file__).resolve().parents[1]
NOT_SHOWN = {"run_dir"}  # set by Hydra's run dir, not a choice


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > 80]


def _squeezed(text: str) -> str:
    """Text without whitespace: a doc wrapped over several lines (a long word broken too) still matches."""
    return "".join(text.split())


def schema_fields(schema: type, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, doc) of every leaf field of ``schema``, nested sections included; task fields of every task."""
    out: list[tuple[str, str]] = []
    docs = field_docs(schema)
    for f in dataclasses.fields(schema):
        if f.name in NOT_SHOWN:
            continue
        kind = f.type if not isinstance(f.type, str) else getattr(C, f.type, None)
        if kind is C.TaskConfig:
            for task_schema in TASK_SCHEMAS.values():
                out += [(k, d) for k, d in schema_fields(task_schema, "task.") if (k, d) not in out]
        elif isinstance(kind, type) and dataclasses.is_dataclass(kind):
            out += schema_fields(kind, f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", docs.get(f.name, "")))
    return out


@pytest.mark.parametrize(
    ("command", "columns"),
    [
        ("train", None),
        ("train", "40"),
        ("train", "200"),
        ("eval", "200"),
        ("revive", "200"),
        ("diversity-report", None),
    ],
)
def test_every_help_fits_80_columns_whatever_the_terminal(command, columns, monkeypatch, capsys):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    # --help-all holds every topic's block: `--help TOPIC` prints some of the same lines
    texts = {"--help": command_help(command, ["--help"]), "--help-all": command_help(command, ["--help-all"])}
    for flags, text in texts.items():
        assert not _too_wide(text), f"sesa {command} {flags}: lines over 80 columns: {_too_wide(text)}"
    assert run_cli(["--help"], monkeypatch) == 0
    assert not _too_wide(capsys.readouterr().out)


def test_sesa_train_help_fits_80_columns_in_a_wide_terminal():
    env = {**os.environ, "COLUMNS": "200"}
    out = subprocess.run(
        [sys.executable, "-m", "sesa_cli", "train", "--help"], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert out.startswith("usage: sesa train")
    assert not _too_wide(out)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_all_explains_every_schema_field_with_its_whole_doc(command):
    text = command_help(command, ["--help-all"])
    squeezed = _squeezed(text)
    fields = schema_fields(SCHEMAS[command])
    assert len(fields) >= (3 if command == "diversity-report" else 60)
    for key, doc in fields:
        assert re.search(rf"^\s+{re.escape(key)}=", text, flags=re.MULTILINE), f"sesa {command} --help-all: no {key}"
        assert doc, f"{key} has no documentation under its field"
        assert _squeezed(plain(doc)) in squeezed, f"sesa {command} --help-all: {key}'s doc is missing or cut"
    assert not re.search(r"\w\.\.\.$", text, flags=re.MULTILINE)  # no line ends in a cut word


def test_the_short_form_lists_groups_and_topics_without_the_options():
    text = command_help("train", ["--help"])
    assert len(text.splitlines()) < 60
    names = [t.name for t in topics("train", [])]
    assert {"options", "model", "task", "sampler", "algo", "optim", "train", "eval", "collapse", "live"} <= set(names)
    for name in names:
        assert re.search(rf"^  {re.escape(name)}\s", text, flags=re.MULTILINE)
    for task in TASK_SCHEMAS:
        assert task in text  # every task is named (reasoning_gym too)
    assert "sampler.group_size=" not in text
    assert "frozenlake*" in text
    assert "sokoban*" in command_help("train", ["task=sokoban", "--help"])  # the user's choice is marked
    assert not any(group in text.split("help topics")[0] for group in HIDDEN_GROUPS)  # machinery, not a choice


def test_a_topic_shows_only_its_options(monkeypatch, capsys):
    text = command_help("train", ["--help", "sampler"])
    assert "sampler.group_size=8" in text
    assert "optim.lr=" not in text
    both = command_help("train", ["--help", "sampler", "optim"])
    assert "sampler.group_size=8" in both
    assert "optim.lr=" in both
    assert run_cli(["train", "--help", "samplr"], monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sesa train: error: no help topic 'samplr'; topics: options, model, task, sampler")
    assert len(err.splitlines()) == 1


def test_help_points_at_no_document_a_user_does_not_have():
    text = "\n".join(command_help(c, ["--help-all"]) for c in COMMANDS)
    for pattern in (r"\bspec\b", r"anchors\.md", r"paper\.md", r"style\.md", r"\bissue \d", r"README's"):
        assert not re.search(pattern, text, flags=re.IGNORECASE), pattern
    for page in re.findall(r"docs/[\w-]+\.md", text):
        assert (ROOT / page).is_file(), page
