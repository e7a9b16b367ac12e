"""The Ctrl-C policy of every command: at start-up Ctrl-C exits at once, inside the trainer's loop it raises
KeyboardInterrupt so a checkpoint is saved first; either way the command ends with one line and exit code 130.

The dispatcher (sesa_cli.cli) installs :func:`exit_at_once` around a command, the train and revive commands wrap the
trainer's loop in :func:`ctrl_c_raises`, and sesa_cli.commands.common's ``user_errors`` prints :func:`interrupted`.
Imports nothing of sesa_cli.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn


def _interrupted_line(command: str | None) -> str:
    return f"sesa {command}: interrupted" if command else "sesa: interrupted"


def interrupted(command: str | None = None) -> NoReturn:
    """Ctrl-C, wherever it lands (start-up, or training after the trainer saved a checkpoint): one line, exit 130."""
    print(_interrupted_line(command), file=sys.stderr)
    raise SystemExit(130)


@contextlib.contextmanager
def exit_at_once(command: str | None) -> Iterator[None]:
    """Inside the block (the whole command, in the main thread) Ctrl-C prints :func:`interrupted`'s line and exits
    130 at once; a KeyboardInterrupt raised by code that installed its own handler (:func:`ctrl_c_raises`) ends the
    same way."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        # Start-up (imports, validation, Hydra's composition, model loading) has nothing to save, and a
        # KeyboardInterrupt raised inside a library there can come out as another error (OmegaConf, transformers'
        # lazy imports and Hydra turn it into tracebacks: issue 17). So Ctrl-C exits at once with the one line;
        # the trainer's loop takes Ctrl-C back (ctrl_c_raises) to save a checkpoint first.
        def exit_now(signum: int, frame: object) -> None:
            os.write(2, (_interrupted_line(command) + "\n").encode())  # no buffered IO: a handler may re-enter it
            os._exit(130)

        previous = signal.signal(signal.SIGINT, exit_now)
    try:
        yield
    except KeyboardInterrupt:  # raised by code that installed its own handler
        interrupted(command)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def ctrl_c_raises() -> Iterator[None]:
    """Inside the block Ctrl-C raises KeyboardInterrupt (Python's default), for work that must react to it: the
    trainer saves a checkpoint, then the command prints the line of :func:`interrupted`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
