"""One line for a path the machine refuses, and for a value too long to echo whole.

Every command names paths the user chose (``hydra.run.dir``, a sweep's job dirs, ``model.cache_dir``): an OSError
there (a name longer than the file system allows, a file where a directory should be, no permission, a read-only or
full disk) becomes one line naming the key and what is wrong (:func:`path_problem`), never a traceback. Values a
message quotes are cut (:func:`cut`), so a 128 KiB override is not echoed back whole; a path written into a command
line a user copies is quoted for Hydra's override grammar (:func:`hydra_value`). Imports nothing of sesa_cli but its
config errors.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from pathlib import Path

from sesa_cli.config import ConfigError, first_line

LONGEST_SHOWN = 160
"""The most characters of one value (a word without spaces) a one-line message shows (:func:`cut`)."""


def cut(text: str, limit: int = LONGEST_SHOWN) -> str:
    """``text`` with every word (a run of characters without whitespace) longer than ``limit`` cut to its first and
    last characters around ``…(N characters)…``: a long value stays recognisable, the line stays readable."""
    if len(text) <= limit:
        return text
    words = text.split(" ")
    head, tail = limit * 2 // 3, limit // 6
    return " ".join(f"{w[:head]}…({len(w):,} characters)…{w[-tail:]}" if len(w) > limit else w for w in words)


def _name_max(path: Path) -> int:
    """The longest file name the file system holding ``path`` (its nearest existing ancestor) allows, in bytes."""
    existing = path
    while not os.path.isdir(existing) and existing != existing.parent:
        existing = existing.parent
    try:
        return int(os.pathconf(existing, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def os_reason(exc: OSError, path: Path) -> str:
    """What is wrong, in a few words, when ``exc`` was raised on ``path``."""
    code = exc.errno
    if code == errno.ENAMETOOLONG:
        longest = max(Path(path).parts, key=lambda part: len(part.encode()), default="")
        size, allowed = len(longest.encode()), _name_max(Path(path))
        if size > allowed:
            return f"a name in it is {size} bytes long and this file system allows {allowed}: shorten it"
        return "the path is longer than this file system allows: shorten it"
    if code in (errno.ENOTDIR, errno.EEXIST):
        blocker = Path(path)
        while not os.path.lexists(blocker) and blocker != blocker.parent:
            blocker = blocker.parent
        if os.path.lexists(blocker) and not blocker.is_dir():
            return f"{cut(str(blocker))} is a file, not a directory"
    known = {
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.EROFS: "read-only file system",
        errno.ENOSPC: "no space left on device",
        errno.EDQUOT: "disk quota exceeded",
        errno.ELOOP: "too many levels of symbolic links",
    }
    return known.get(code or 0) or exc.strerror or first_line(exc)


def path_problem(exc: OSError, where: str, path: Path) -> str:
    """The one line for ``exc`` raised on ``path`` (named in the line by ``where``, e.g. ``hydra.run.dir=...``)."""
    return f"{where}: {os_reason(exc, path)}"


def path_error(exc: OSError, where: str, path: Path) -> ConfigError:
    """:func:`path_problem` as the ConfigError a command prints (one line, exit 2)."""
    return ConfigError(path_problem(exc, where, path))


_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./~+-]+")
"""Characters Hydra's override grammar reads as one unquoted value (its ``ID``/path tokens): anything else (spaces,
parentheses, commas, brackets, quotes, ``$``, non-ASCII) makes ``sesa eval ckpt=...`` a grammar error or a sweep."""


def hydra_value(text: str) -> str:
    """``text`` as a value of Hydra's override grammar: as it is where it is plain, else single-quoted with the
    grammar's escapes (a quote, and any backslashes before a quote or the closing quote, get a backslash each) and
    ``${`` escaped so OmegaConf does not read an interpolation into a path."""
    if _PLAIN_VALUE.fullmatch(text):
        return text
    body = text.replace("${", "\\${")
    body = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", body)
    body = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body)
    return f"'{body}'"


def replace_dir(new: Path, target: Path) -> None:
    """Put the directory ``new`` in the place of ``target`` (a directory, or nothing) and remove the old one: in one
    atomic step where Linux's ``renameat2(RENAME_EXCHANGE)`` can swap them, so a reader finds the old dir or the new
    one, never a mix and never nothing; elsewhere in two renames. An empty ``target`` is replaced by one rename."""
    new, target = Path(new), Path(target)
    old = new.with_name(new.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if not os.path.lexists(target):
        new.rename(target)
        return
    if _exchange(new, target):
        new.rename(old)  # after the swap it holds the old dir
    else:
        try:
            target.rmdir()  # empty: replaced by the rename below
        except OSError:
            target.rename(old)
        new.rename(target)
    with contextlib.suppress(OSError):
        shutil.rmtree(old)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories in one atomic step (``renameat2(RENAME_EXCHANGE)``, Linux >= 3.15); False where the
    system or the file system cannot."""
    import ctypes
    import platform

    if platform.system() != "Linux":
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return bool(renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), rename_exchange) == 0)
