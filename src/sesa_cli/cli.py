"""The ``sesa`` dispatcher: the command table (sesa_cli.commands.table), lazy imports, Hydra flags passed through.

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
from sesa_cli.commands.interrupt import exit_at_once
from sesa_cli.commands.table import COMMANDS, USAGE


def print_help() -> None:
    from sesa_cli.commands.help import wrapped

    lines = [*wrapped(USAGE, 7), "", "sesa: RL for language-model policies with sequential sampling (SESA)", ""]
    lines.append("commands:")
    for name, (_, text) in COMMANDS.items():
        lines += wrapped(text, 21, f"  {name:<18} ")
    more = (
        "`sesa <command> --help` shows the command's config groups and help topics, `sesa <command> --help TOPIC` "
        "or `--help-all` every option, documented."
    )
    lines += ["", *wrapped(more, 0), "examples:"]
    lines += [
        "  sesa train task=path sampler=sequential",
        "  sesa train -m task=path sampler=parallel,sequential seed=0,1",
    ]
    print_text("\n".join(lines))


def print_text(text: str) -> None:
    """Print help text; a reader that stops early (``sesa train --help-all | head``) is no error."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python flushes stdout again at exit


def fail(message: str, command: str | None = None) -> NoReturn:
    """Print one line to stderr and exit 2 (bad input)."""
    from sesa_cli.config import cut

    prefix = f"sesa {command}" if command else "sesa"
    print(f"{prefix}: error: {cut(message)}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    command = args[0] if args and args[0] in COMMANDS else None
    with exit_at_once(command):  # Ctrl-C, SIGTERM, SIGUSR1: one line, exit 128 + signal (commands.interrupt)
        dispatch(args)


def checked_overrides(name: str, overrides: list[str]) -> list[str]:
    """The argv command ``name``'s Hydra app runs with (the CLI's and sesa_cli.api's): renamed keys upgraded (each
    noted on stderr), the ``plugins=`` modules imported, the overrides validated, and the plug-ins' config folders
    put on Hydra's search path; a ConfigError with the one-line reason when they are wrong."""
    from sesa_cli import plugins
    from sesa_cli.commands.validate import validate_argv
    from sesa_cli.config import ConfigError
    from sesa_cli.deprecations import rename_overrides

    rest, notices = rename_overrides(overrides)
    plugins.load(plugins.named(rest))
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
    return plugins.with_search_path(rest)


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
    from sesa_cli.config import ConfigError

    if any(a in ("-h", "--help", "--help-all") for a in args[1:]):  # the command's own help; Hydra's: --hydra-help
        from sesa_cli import plugins
        from sesa_cli.commands.help import command_help

        try:
            plugins.load(plugins.named(args[1:]))  # a plug-in's task, term or filter appears in the help
            text = command_help(name, args[1:])
        except ConfigError as exc:  # an unknown help topic
            fail(str(exc), name)
        print_text(text)
        return
    from sesa_cli import run_lock
    from sesa_cli.commands import rundir, sweep
    from sesa_cli.commands.compose import config_dir_as_searchpath
    from sesa_cli.paths import user_path_problem

    try:
        try:
            # --config-dir as the hydra.searchpath entry it is, so every composition sees it (sesa_cli.commands.compose)
            rest = checked_overrides(name, config_dir_as_searchpath(args[1:]))
            # The run dir is this command's from here on, before Hydra's job writes into it (sesa_cli.run_lock); a
            # sweep's jobs each take theirs before Hydra writes into it (sesa_cli.commands.sweep).
            _, rest = rundir.claim_planned_run_dir(name, rest)
            rest = sweep.prepare_sweep(name, args[1:], rest)
        except ConfigError as exc:
            fail(str(exc), name)
        except OSError as exc:  # a path the machine refuses (a name too long, a file in the way): one line
            line = user_path_problem(exc, args[1:])
            if line is None:
                raise
            fail(line, name)
        module = import_module(f"sesa_cli.commands.{module_name}")
        # Keep argv[0] (the real `sesa` path): Hydra registers shell completion under it.
        sys.argv = [sys.argv[0], *rest]
        module.main()
    finally:
        rundir.discard_staged()  # a report that did not finish: its staging dir (the old report stays)
        sweep.end_sweep()
        run_lock.release_all()


if __name__ == "__main__":
    main()
