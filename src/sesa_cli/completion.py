"""Shell completion through the ``sesa`` dispatcher, by Hydra's own completion plugin.

``eval "$(sesa -sc install=bash)"`` installs Hydra's bash function for ``sesa``; on Tab it runs ``sesa -sc
query=bash`` with the line in ``COMP_LINE``. The first word after ``sesa`` is a command: while it is being typed the
command names are the answer; after it, the line minus the command word goes to that command's Hydra app, which
completes its config groups (``sampler=``), their options and config keys.
"""

from __future__ import annotations

import os
import sys
from importlib import import_module

from sesa_cli.commands.table import COMMANDS


def complete(flag_args: list[str]) -> None:
    """``sesa -sc install=bash|uninstall=bash|query=bash`` (``flag_args``: the arguments after ``sesa``)."""
    command = "train"  # install/uninstall print a script that names the program only: any command's app will do
    if any(a.startswith("query=") for a in flag_args):
        words = os.environ.get("COMP_LINE", "").split(" ")
        rest = words[1:]  # after the program
        if len(rest) <= 1:  # the command word itself is being typed
            print(" ".join(name for name in COMMANDS if name.startswith(rest[0] if rest else "")))
            return
        command = rest[0]
        if command not in COMMANDS:
            return
        os.environ["COMP_LINE"] = " ".join([words[0], *rest[1:]])
        os.environ["COMP_POINT"] = str(len(os.environ["COMP_LINE"]))
    module = import_module(f"sesa_cli.commands.{COMMANDS[command][0]}")
    sys.argv = [sys.argv[0], *flag_args]  # argv[0] is the installed `sesa`: Hydra's script completes that name
    try:
        module.main()
    except SystemExit as exc:  # Hydra exits after answering
        if exc.code not in (0, None):
            raise
