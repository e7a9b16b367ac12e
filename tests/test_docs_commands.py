"""Every `sesa ...` command shown in the README and docs/ composes and validates as the CLI would run it (issue 18
item 10): the same check `sesa` makes before any work (sesa_cli.commands.validate), without training, so a renamed
key or option in the docs fails here instead of going stale. The cheap commands also run end to end elsewhere in the
suite (tests/test_cli.py, tests/test_eval_revive.py)."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "conf" / "experiment").glob("*.yaml")),
]
LINE = re.compile(r"^\s*(?:#\s*)?(?:OMP_NUM_THREADS=\d+ )?sesa (train|eval|revive|diversity-report)\b(.*)$")
SPAN = re.compile(r"`sesa (train|eval|revive|diversity-report)\b([^`]*)`")
# placeholders a reader fills in ([overrides], task=T, <run>, $C, ...)
PLACEHOLDER = re.compile(r"[<>\[$]|\.\.\.|=(?:PATH|RUN_DIR|CHECKPOINT|[A-Z])\b|ckpt=$")


def _args(rest: str) -> list[str] | None:
    rest = rest.split(" #", 1)[0].strip()
    if (
        "[" in rest.split("=", 1)[0]
        or re.search(r"(?:^|\s)\[", rest)
        or PLACEHOLDER.search(re.sub(r"=\[[^\]]*\]", "=L", rest))
    ):
        return None
    try:
        return shlex.split(rest)
    except ValueError:
        return None


def shown_commands() -> list[tuple[str, str, list[str]]]:
    """(page, command, args) of every command line in a code block or a recipe's header, and every code span that
    is a whole command."""
    out = []
    for path in DOCS:
        text = path.read_text().replace("\\\n", " ")
        lines = text.splitlines()
        in_code = path.suffix == ".yaml"
        found = []
        for line in lines:
            if line.startswith("```"):
                in_code = not in_code
                continue
            m = LINE.match(line) if in_code else None
            if m:
                found.append((m.group(1), m.group(2)))
        if path.suffix == ".md":
            found += [(m.group(1), m.group(2)) for m in SPAN.finditer(text)]
        for command, rest in found:
            args = _args(rest)
            if args is not None and not (args and args[0].startswith(":")):  # ":" = an error message shown
                out.append((path.relative_to(ROOT).as_posix(), command, args))
    return out


NEEDS_RUNS = ("ckpt=", "runs=")
COMMANDS = [c for c in shown_commands() if not any(a.startswith(NEEDS_RUNS) for a in c[2])]
"""Commands on run dirs (ckpt=, runs=) need the runs an earlier command of the page writes: the same commands run on
real run dirs in tests/test_eval_revive.py and tests/test_report.py."""


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 10
    assert {c for _, c, _ in COMMANDS} >= {"train", "eval"}


@pytest.mark.parametrize(("page", "command", "args"), COMMANDS, ids=[f"{p}:{c} {' '.join(a)}" for p, c, a in COMMANDS])
def test_shown_command_validates(page, command, args, tmp_path, monkeypatch):
    from sesa_cli.commands.validate import validate_argv
    from sesa_cli.deprecations import rename_overrides

    if any(a.startswith("device=cuda") for a in args):  # a GPU machine's command: validated as one would
        import torch

        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)

    help_flags = ("-h", "--help", "--help-all")
    if any(a in help_flags for a in args):
        from sesa_cli.commands.help import command_help

        command_help(command, args)  # `sesa train --help task`: a help topic that does not exist raises
        args = [a for a in args if a not in help_flags and (a.startswith("-") or "=" in a)]  # the overrides
    args, _ = rename_overrides([a for a in args if not a.startswith("hydra.run.dir=") and a != "--help"])
    args = [a for a in args if not a.startswith("hydra.sweep.dir=")]
    if "hydra/launcher=ray" not in args or importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None:
        # launcher plugins the default test run does not install (submitit; Ray: `nox -s integrations` validates its
        # commands with the plugin) and their settings
        args = [a for a in args if not a.lstrip("+").startswith(("hydra.launcher.", "hydra/launcher=submitit"))]
        args = [a for a in args if a != "hydra/launcher=ray"]
    module = command.replace("-", "_")
    problem = validate_argv(module, [*args, f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'm'}"])
    assert problem is None, f"{page}: sesa {command} {' '.join(args)}: {problem}"
