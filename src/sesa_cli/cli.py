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

# command -> (module under sesa_cli.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("train", "RL training of a policy on a task; writes a run dir with metrics and checkpoints"),
    "eval": ("eval", "evaluate a checkpoint or base model: success, pass@k, coverage, distinct, entropy"),
    "revive": ("revive", "continue a (collapsed) run from a checkpoint with new settings, e.g. sampler=sequential"),
    "diversity-report": ("diversity_report", "compare runs: tables and plots of success, diversity, entropy"),
}

USAGE = "usage: sesa {" + ",".join(COMMANDS) + "} [overrides ...] [hydra flags: -m, --cfg job, --help, ...]"
USAGES: dict[str, str] = {
    "train": "sesa train [overrides ...]",
    "eval": "sesa eval [ckpt=CHECKPOINT|RUN_DIR] [overrides ...]",
    "revive": "sesa revive ckpt=RUN_DIR|CHECKPOINT [step=auto|last|N] [more_steps=N] [overrides ...]",
    "diversity-report": "sesa diversity-report runs=[RUN_DIR|MULTIRUN_DIR,...] [compare=[...]] [metrics=[...]]",
}
"""Each command's own usage line: its ``--help`` starts with it, and a missing mandatory key quotes it."""


def print_help() -> None:
    lines = [USAGE, "", "sesa: RL for language-model policies with sequential sampling (SESA)", "", "commands:"]
    for name, (_, text) in COMMANDS.items():
        lines.append(f"  {name:<18} {text}")
    lines += [
        "",
        "`sesa <command> --help` shows the command's config groups and every option, documented.",
        "examples:",
        "  sesa train task=path sampler=sequential",
        "  sesa train -m task=path sampler=parallel,sequential seed=0,1",
    ]
    print("\n".join(lines))


def fail(message: str, command: str | None = None) -> NoReturn:
    """Print one line to stderr and exit 2 (bad input)."""
    prefix = f"sesa {command}" if command else "sesa"
    print(f"{prefix}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _interrupted_line(command: str | None) -> str:
    from sesa_cli import stopping

    why = "" if stopping.reason() == "Ctrl-C" else f" ({stopping.reason()})"
    return (f"sesa {command}: interrupted" if command else "sesa: interrupted") + why


def interrupted(command: str | None = None) -> NoReturn:
    """Ctrl-C, SIGTERM or SIGUSR1, wherever it lands (start-up, or training after the trainer saved a checkpoint):
    one line, exit 128 + the signal's number (130 for Ctrl-C; sesa_cli.stopping)."""
    from sesa_cli import stopping

    print(_interrupted_line(command), file=sys.stderr)
    raise SystemExit(stopping.exit_code())


def main(argv: list[str] | None = None) -> None:
    from sesa_cli import stopping

    args = sys.argv[1:] if argv is None else list(argv)
    command = args[0] if args and args[0] in COMMANDS else None
    # Start-up (imports, validation, Hydra's composition, model loading) has nothing to save, and a
    # KeyboardInterrupt raised inside a library there can come out as another error (OmegaConf, transformers'
    # lazy imports and Hydra turn it into tracebacks: issue 17). So a stop signal (Ctrl-C, SIGTERM, SIGUSR1) exits
    # at once with the one line; the trainer's loop takes them back (stopping.stop_after_step) to save a checkpoint.
    with stopping.exit_at_once(lambda: _interrupted_line(command)):
        try:
            dispatch(args)
        except KeyboardInterrupt:  # raised by code that installed its own handler
            interrupted(command)


def checked_overrides(name: str, overrides: list[str]) -> list[str]:
    """The argv command ``name``'s Hydra app runs with (the CLI's and sesa_cli.api's): renamed keys upgraded (each
    noted on stderr) and the overrides validated; a ConfigError with the one-line reason when they are wrong."""
    from sesa_cli.commands.validate import validate_argv
    from sesa_cli.config import ConfigError
    from sesa_cli.deprecations import rename_overrides

    rest, notices = rename_overrides(overrides)
    if os.environ.get("RANK", "0") == "0":  # once, not once per data-parallel replica
        for notice in notices:
            print(f"sesa {name}: {notice}", file=sys.stderr)
    if os.environ.get("RANK", "0") != "0":
        # A data-parallel replica other than rank 0 (accelerate launch / torchrun): rank 0 owns the run dir, so this
        # one writes no .hydra/ files or log file there (sesa_cli.distributed).
        rest = [*rest, "hydra.output_subdir=null", "hydra/job_logging=disabled"]
    problem = validate_argv(COMMANDS[name][0], rest)
    if problem:
        raise ConfigError(problem)
    return rest


def dispatch(args: list[str]) -> None:
    """Run ``sesa <args>``: validate the overrides, then hand them to the command's Hydra app."""
    if not args:
        print_help()
        raise SystemExit(2)
    if args[0] in ("-h", "--help"):
        print_help()
        return
    if args[0] in ("-sc", "--shell-completion"):  # sesa_cli.completion: Hydra's, through the dispatcher
        from sesa_cli.completion import complete

        complete(args)
        return
    if args[0] == "--version":
        print(f"sesa {__version__}")
        return
    name = args[0]
    if name not in COMMANDS:
        print(USAGE, file=sys.stderr)
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        fail(f"unknown command {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    module_name, _ = COMMANDS[name]
    if any(a in ("-h", "--help") for a in args[1:]):  # the command's own help; Hydra's is --hydra-help
        from sesa_cli.commands.help import command_help

        print(command_help(name, [a for a in args[1:] if a not in ("-h", "--help")]))
        return
    from sesa_cli import run_lock
    from sesa_cli.commands.rundir import claim_planned_run_dir
    from sesa_cli.config import ConfigError

    try:
        rest = checked_overrides(name, args[1:])
        # The run dir is this command's from here on, before Hydra's job writes into it (sesa_cli.run_lock).
        _, rest = claim_planned_run_dir(name, rest)
    except ConfigError as exc:
        fail(str(exc), name)
    try:
        if name in ("train", "revive", "eval") and ("-m" in rest or "--multirun" in rest):
            # after the last job: the sweep dir and how to report on it (sesa_cli.commands.ending.SweepEnding)
            rest = [*rest, "+hydra.callbacks.sesa_ending._target_=sesa_cli.commands.ending.SweepEnding"]
        module = import_module(f"sesa_cli.commands.{module_name}")
        # Keep argv[0] (the real `sesa` path): Hydra registers shell completion under it.
        sys.argv = [sys.argv[0], *rest]
        module.main()
    finally:
        run_lock.release_all()


if __name__ == "__main__":
    main()
