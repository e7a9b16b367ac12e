"""The ``sesa`` dispatcher: a subcommand table, lazy imports, Hydra flags passed through unchanged.

``sesa <command> [hydra args]`` validates the overrides against the command's schema first (one-line error, exit
2, no traceback), then hands ``argv`` to the command's ``@hydra.main`` app, so ``-m``, ``--cfg job``, ``--help``,
``--info`` and shell completion behave exactly as in any Hydra app. This module never imports torch.
"""

from __future__ import annotations

import difflib
import os
import sys
from importlib import import_module
from typing import NoReturn

from sesa_cli import __version__

# command -> (module under sesa_cli.commands, one-line help, issue that builds it if not built yet)
COMMANDS: dict[str, tuple[str, str, int | None]] = {
    "train": ("train", "RL training of a policy on a task; writes a run dir with metrics and checkpoints", None),
    "eval": ("eval", "evaluate a checkpoint or base model: success, pass@k, coverage, distinct, entropy", None),
    "revive": (
        "revive",
        "continue a (collapsed) run from a checkpoint with new settings, e.g. sampler=sequential",
        None,
    ),
    "diversity-report": ("diversity_report", "compare runs: tables and plots of success, diversity, entropy", None),
}

USAGE = "usage: sesa {" + ",".join(COMMANDS) + "} [overrides ...] [hydra flags: -m, --cfg job, --help, ...]"


def print_help() -> None:
    lines = [USAGE, "", "sesa: RL for language-model policies with sequential sampling (SESA)", "", "commands:"]
    for name, (_, text, issue) in COMMANDS.items():
        lines.append(f"  {name:<18} {text}" + (f" [not built yet: issue #{issue}]" if issue else ""))
    lines += ["", "`sesa <command> --help` shows the command's config groups and options.",
              "examples:", "  sesa train task=path sampler=sequential",
              "  sesa train -m task=path sampler=parallel,sequential seed=0,1"]  # fmt: skip
    print("\n".join(lines))


def fail(message: str, command: str | None = None) -> NoReturn:
    """Print one line to stderr and exit 2 (bad input)."""
    prefix = f"sesa {command}" if command else "sesa"
    print(f"{prefix}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def interrupted(command: str | None = None) -> NoReturn:
    """Ctrl-C, wherever it lands (start-up, or training after the trainer saved a checkpoint): one line, exit 130."""
    prefix = f"sesa {command}" if command else "sesa"
    print(f"{prefix}: interrupted", file=sys.stderr)
    raise SystemExit(130)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        dispatch(args)
    except KeyboardInterrupt:  # during start-up (imports, validation, Hydra's composition); later: user_errors
        interrupted(args[0] if args and args[0] in COMMANDS else None)


def dispatch(args: list[str]) -> None:
    """Run ``sesa <args>``: validate the overrides, then hand them to the command's Hydra app."""
    if not args:
        print_help()
        raise SystemExit(2)
    if args[0] in ("-h", "--help"):
        print_help()
        return
    if args[0] == "--version":
        print(f"sesa {__version__}")
        return
    name = args[0]
    if name not in COMMANDS:
        print(USAGE, file=sys.stderr)
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        fail(f"unknown command {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    module_name, _, issue = COMMANDS[name]
    if issue is not None:
        fail(f"not built yet (issue #{issue})", name)
    rest = args[1:]
    if os.environ.get("RANK", "0") != "0":
        # A data-parallel replica other than rank 0 (accelerate launch / torchrun): rank 0 owns the run dir, so this
        # one writes no .hydra/ files or log file there (sesa_cli.distributed).
        rest = [*rest, "hydra.output_subdir=null", "hydra/job_logging=disabled"]
    from sesa_cli.commands.validate import validate_argv

    problem = validate_argv(module_name, rest)
    if problem:
        fail(problem, name)
    module = import_module(f"sesa_cli.commands.{module_name}")
    # Keep argv[0] (the real `sesa` path): Hydra registers shell completion under it.
    sys.argv = [sys.argv[0], *rest]
    module.main()


if __name__ == "__main__":
    main()
