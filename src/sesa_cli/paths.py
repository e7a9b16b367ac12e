"""One line for a path the machine refuses, and for a value too long to echo whole.

Every command names paths the user chose (``hydra.run.dir``, a sweep's job dirs, ``model.cache_dir``): an OSError
there (a name longer than the file system allows, a file where a directory should be, no permission, a read-only or
full disk) becomes one line naming the key and what is wrong (:func:`path_problem`), never a traceback. Values a
message quotes are cut (sesa_cli.config.cut), so a 128 KiB override is not echoed back whole; a path written into a command
line a user copies is quoted for Hydra's override grammar (:func:`hydra_value`), and the command itself is named as
the user's shell finds it (:func:`sesa_program`). Imports nothing of sesa_cli but its
config errors.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from sesa_cli.config import ConfigError, cut, first_line


def _name_max(path: Path) -> int:
    """The longest file name the file system holding ``path`` (its nearest existing ancestor) allows, in bytes."""
    existing = path
    while not os.path.isdir(existing) and existing != existing.parent:
        existing = existing.parent
    try:
        return int(os.pathconf(existing, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


REASONS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.ELOOP: "too many levels of symbolic links",
}
"""The machine's reasons a path is refused, in the words of every one-line error (:func:`os_reason`,
:func:`write_problem`)."""


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
    return REASONS.get(code or 0) or exc.strerror or first_line(exc)


def path_problem(exc: OSError, where: str, path: Path) -> str:
    """The one line for ``exc`` raised on ``path`` (named in the line by ``where``, e.g. ``hydra.run.dir=...``)."""
    return f"{where}: {os_reason(exc, path)}"


class RunDirWriteError(ConfigError):
    """A run dir the command cannot write: the disk is full, the file system read-only, the dir deleted."""


@contextlib.contextmanager
def writing(target: Path, cleanup: Path | None = None, run_dir: Path | None = None) -> Iterator[None]:
    """Write ``target`` inside the block. Whatever stops the write (an error, Ctrl-C) removes ``cleanup`` (its
    ``.tmp`` file or dir), so no half-written file stays; an error of the machine, not of the program (no space, a
    read-only file system, the run dir ``run_dir`` gone) becomes a one-line :class:`RunDirWriteError`."""
    try:
        yield
    except BaseException as exc:
        if cleanup is not None:
            with contextlib.suppress(OSError):
                if cleanup.is_dir() and not cleanup.is_symlink():
                    shutil.rmtree(cleanup, ignore_errors=True)
                else:
                    cleanup.unlink(missing_ok=True)
        problem = None
        if isinstance(exc, Exception) and not isinstance(exc, ConfigError):  # a nested write said it already
            problem = write_problem(exc, target, run_dir)
        if problem is None:
            raise
        raise RunDirWriteError(problem) from None


def write_problem(exc: Exception, target: Path, run_dir: Path | None = None) -> str | None:
    """The one line for a failed write of ``target`` (see :func:`writing`), or None for an error of the program.
    torch's and safetensors' writers do not raise OSError: their messages name the OS error, or, for torch's zip
    writer, only a short write ("unexpected pos"), which a full disk is when almost no space is left."""
    if run_dir is not None and not run_dir.is_dir():
        return f"run dir {run_dir} disappeared while writing {target.name} (deleted or unmounted); the run stopped"
    code = exc.errno if isinstance(exc, OSError) else None
    if code is None:
        text = str(exc)
        m = re.search(r"(?:os error|code:|Errno) ?(\d+)", text)
        if m:
            code = int(m.group(1))
        elif "No space left on device" in text:
            code = errno.ENOSPC
        elif "Read-only file system" in text:
            code = errno.EROFS
        elif "unexpected pos" in text or "file write failed" in text:  # torch's zip writer (inline_container.cc)
            code = errno.ENOSPC if _free_bytes(target) < 64 * 2**20 else errno.EIO
    if code in (errno.ENOSPC, errno.EDQUOT):
        return f"{REASONS[code]} while writing {target}"
    if code in REASONS:
        return f"{REASONS[code]}: cannot write {target}"
    if isinstance(exc, OSError):
        return f"cannot write {target}: {os_reason(exc, target)}"
    if code is not None:
        return f"cannot write {target}: {os.strerror(code)}"
    return None


def _free_bytes(path: Path) -> int:
    """Free bytes on the file system holding ``path`` (its nearest existing ancestor)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ENOTDIR, errno.EEXIST, errno.EISDIR, errno.ELOOP, errno.EACCES,
                          errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT})  # fmt: skip
"""OSErrors that are about the path (its name, what is in its way, its permissions), not the program."""


def user_path_problem(exc: OSError, overrides: Sequence[str]) -> str | None:
    """The one line for an OSError on a path the user named, naming the override that holds it (``key=value``) or
    the path; None for another error (a bug keeps its traceback)."""
    if exc.errno not in PATH_ERRNOS or exc.filename is None:
        return None
    name = os.path.abspath(os.fsdecode(exc.filename))
    where = cut(name)
    for line in overrides:
        key, sep, value = line.partition("=")
        values = value.strip("[]").split(",") if value.startswith("[") else [value]
        for item in (v.strip().strip("'\"") for v in values if sep):
            mine = os.path.abspath(os.path.expanduser(item)) if item else ""
            if mine and (name == mine or name.startswith(mine + os.sep) or mine.startswith(name + os.sep)):
                return path_problem(exc, f"{key.lstrip('+~')}={cut(value)}", Path(name))
    return path_problem(exc, where, Path(name))


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


def sesa_program() -> str:
    """``sesa`` as a command line a user copies should call it, shell-quoted: ``sesa`` where the shell's PATH finds
    this very program (an activated virtual environment, a nox session, a user install), else the path of the
    ``sesa`` script beside this Python, relative to the working directory when inside it (``.venv/bin/sesa`` after
    the README's set-up, which never activates the environment, so a bare ``sesa`` would be "command not found" or,
    worse, another install's)."""
    script = Path(sys.executable).parent / ("sesa.exe" if os.name == "nt" else "sesa")
    if not script.is_file():
        return "sesa"  # run some other way (python -m sesa_cli from a source tree): no script to name
    found = shutil.which("sesa")
    if found is not None and os.path.realpath(found) == os.path.realpath(script):
        return "sesa"
    try:
        shown = str(script.absolute().relative_to(Path.cwd()))
    except ValueError:
        shown = str(script.absolute())
    return shlex.quote(shown)


def umask() -> int:
    """This process's umask: read from /proc where Linux shows it (setting it to read it back, as ``os.umask`` does,
    would change it for every thread for a moment)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def open_file_modes(folder: Path) -> None:
    """Give every file under ``folder`` the mode a plain ``open()`` gives a new file (0666 less the umask).
    safetensors writes its file 0600, so a model cache or a checkpoint shared with a group (a lab's cache dir, a
    collaborator's eval of a run) was unreadable to everyone but its writer."""
    mode = 0o666 & ~umask()
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_mode & 0o777 != mode:
            path.chmod(mode)


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
