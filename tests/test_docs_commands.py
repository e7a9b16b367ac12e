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
LINE = re.compile(
    r"^\s*(?:#\s*)?(?:OMP_NUM_THREADS=\d+ )?(?:\.venv/bin/)?sesa (train|eval|revive|diversity-report)\b(.*)$"
)
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
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *_: (140e9, 141e9))  # an idle H200's (free, total)

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


# ------------------------------------------------------------------------------ issue 67: what the docs show
PROMPT = re.compile(r"^\$ ((?:[A-Z_]+=\S+ )*)(?:\.venv/bin/)?sesa (train|eval|revive|diversity-report)\b(.*)$")
ERROR = re.compile(r"^sesa (train|eval|revive|diversity-report): error: ")


def shown_messages() -> list[tuple[str, dict[str, str], list[str], str]]:
    """(page, environment, argv, the line shown) of every ``$ sesa ...`` in a code block of README.md or docs/ that
    is followed by the one-line error it prints."""
    out = []
    for path in DOCS:
        if path.suffix != ".md":
            continue
        lines = path.read_text().splitlines()
        for line, after in zip(lines, [*lines[1:], ""], strict=True):
            m = PROMPT.match(line)
            if m and ERROR.match(after):
                env = dict(word.split("=", 1) for word in m.group(1).split())
                out.append((path.relative_to(ROOT).as_posix(), env, [m.group(2), *shlex.split(m.group(3))], after))
    return out


MESSAGES = shown_messages()


def test_the_docs_show_error_messages():
    assert len(MESSAGES) >= 8
    assert {page for page, *_ in MESSAGES} >= {"docs/usage.md", "docs/real-models.md"}


@pytest.mark.parametrize(
    ("page", "env", "argv", "shown"), MESSAGES, ids=[f"{m[0]}:{' '.join(m[2])}" for m in MESSAGES]
)
def test_a_message_the_docs_show_is_the_one_the_program_prints(page, env, argv, shown, monkeypatch, capsys):
    """The error a page shows after a command is the line that command prints (``...`` in it stands for the rest of a
    list), so a renamed option or a new sampler cannot leave a page showing an old message (issue 67: usage.md listed
    samplers "parallel, sequential" where the program said "lte, parallel, sequential")."""
    import os
    import subprocess
    import sys

    import torch

    from tests.conftest import run_cli

    if "built without CUDA" in shown and torch.version.cuda is not None:
        pytest.skip("the page shows what a CPU build of torch says; this torch is built with CUDA")
    if env:  # an environment the library reads at import: a process of its own
        done = subprocess.run([sys.executable, "-m", "sesa_cli", *argv], capture_output=True, text=True, timeout=300,
                              env={**os.environ, **env}, check=False)  # fmt: skip
        code, err = done.returncode, done.stderr
    else:
        code, err = run_cli(argv, monkeypatch), capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err[-2000:]
    assert len(lines) == 1, lines
    pattern = re.escape(shown).replace(re.escape("..."), ".*")
    assert re.fullmatch(pattern, lines[0]), f"{page} shows:\n{shown}\nthe program prints:\n{lines[0]}"


def test_the_readme_says_where_torchs_cpu_build_comes_from():
    """Issue 67 case 15: on stock PyPI a Linux ``torch==2.13.0`` is the CUDA build; the README names PyTorch's own CPU
    index for that pin, the pin of its first command and of every nox session."""
    readme = (ROOT / "README.md").read_text()
    pins = set(re.findall(r"pip install (torch==[\d.]+)", readme))
    nox_pin = re.search(r'^TORCH = "(torch==[\d.]+)"', (ROOT / "noxfile.py").read_text(), flags=re.MULTILINE)
    assert nox_pin is not None
    assert pins == {nox_pin.group(1)}
    assert f"pip install {nox_pin.group(1)} --index-url https://download.pytorch.org/whl/cpu" in readme


def test_the_usage_pages_commands_call_sesa_as_the_readmes_set_up_installs_it():
    """Issue 67 case 13: docs/usage.md's workflow used a bare ``sesa`` ("command not found" after the README's set-up,
    which never activates .venv) where the README uses ``.venv/bin/sesa``: every command line of a code block of both
    calls it so, and quotes a ``runs=[...]`` list for the shell."""
    for page in (ROOT / "README.md", ROOT / "docs" / "usage.md"):
        in_code, found = False, []
        for line in page.read_text().splitlines():
            if line.startswith("```"):
                in_code = not in_code
                continue
            words = line.strip().lstrip("$ ").split()
            if in_code and words and words[0].endswith("sesa") and len(words) > 1 and words[1] in ("train", "eval",
                                                                                                    "revive", "diversity-report"):  # fmt: skip
                found.append(line)
                assert words[0] == ".venv/bin/sesa", f"{page.name}: {line}"
                assert not re.search(r"(?<!')runs=\[", line), f"{page.name}: {line}"
        assert found, page
