"""Every name the docs point at exists: dotted names, source paths and pointers to sections.

Scanned: every file of src/ (docstrings, comments and strings alike: help texts, metric keys' "computed in" column),
README.md and docs/*.md. Checked there:

* dotted names under ``sesa_cli`` (``sesa_cli.metrics.ChainHealth``, ``sesa_cli.models.policy.Policy.encode_prompt``)
  import and resolve attribute by attribute (a dataclass field without a class default counts as an attribute); a
  class or function is named where it is defined or through a package that exports it (``__all__``), not through
  a module that merely imports it;
* source paths (``sesa_cli/tasks/math.py``, ``src/sesa_cli/tasks/``) and pages (``docs/samplers.md``) exist;
* pointers to a section of the README or of a page under docs/ (``the README's "Configuration" section``,
  ``README's Metrics section``, ``docs/measurements.md, "Rollout cost"``, a Markdown link ``(../README.md#metrics)``)
  name a heading the page has.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

DOTTED = re.compile(r"(?<![\w/.])sesa_cli(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w.])(?:src/)?sesa_cli/[\w/]*?(?:\w+\.py|/)")
# README's "Rollout cost" / README's [Configuration](...) / README's Samplers section / docs/x.md, "Heading" /
# docs/x.md's "Heading"
POINTER = re.compile(
    r"(?P<page>README|docs/[\w-]+\.md)(?:'s|,)\s+"
    r"(?:\"(?P<quoted>[^\"\n]+)\"|\[(?P<linked>[^\]\n]+)\]|(?P<bare>[A-Z][\w-]*(?:\s[A-Z][\w-]*)*)\s+section)"
)
DOC_PAGE = re.compile(r"(?<![\w/.])docs/[\w-]+\.md")
LINK = re.compile(r"\]\((?P<page>[^)\s#:]*\.md)(?:#(?P<anchor>[^)\s]+))?\)")


def scanned_files() -> list[Path]:
    files = sorted(p for p in (SRC / "sesa_cli").rglob("*") if p.suffix in (".py", ".yaml", ".md"))
    return [*files, ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _where(path: Path, text: str, pos: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, pos) + 1}"


def resolve(name: str) -> str | None:
    """None when ``name`` (dotted, under sesa_cli) names a module or an attribute of one, else why not."""
    parts = name.split(".")
    module = None
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name is not None and not ".".join(parts[:cut]).startswith(exc.name):
                raise  # a missing dependency of a module that exists: not the docs' fault
            continue
        break
    assert module is not None  # sesa_cli itself imports
    obj: object = module
    for i in range(cut, len(parts)):
        attr = parts[i]
        if hasattr(obj, attr):
            value = getattr(obj, attr)
            home = getattr(value, "__module__", None)
            # a class or function named through a module that only imports it: name its home, or the package face
            # that exports it (``__all__``)
            elsewhere = isinstance(obj, type(module)) and isinstance(home, str) and home != obj.__name__
            if elsewhere and attr not in getattr(obj, "__all__", ()):
                return f"{'.'.join(parts[: i + 1])} is defined in {home}"
            obj = value
        elif isinstance(obj, type) and (
            (dataclasses.is_dataclass(obj) and attr in {f.name for f in dataclasses.fields(obj)})
            or any(attr in getattr(k, "__annotations__", {}) for k in obj.__mro__)
        ):
            return None  # a field or annotated attribute: the name exists, it has no class-level value
        else:
            return f"{'.'.join(parts[:i])} has no {attr!r}"
    return None


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # a shell comment in a code block is no heading
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6}\s+(.+)$", text, flags=re.MULTILINE)]


def _page(name: str, source: Path) -> Path:
    if name == "README":
        return ROOT / "README.md"
    if name.startswith("docs/"):
        return ROOT / name
    return (source.parent / name).resolve()  # a relative Markdown link


def _has_section(page: Path, title: str) -> bool:
    """A heading of ``page`` is ``title`` or starts with it (``Rollout cost`` names ``Rollout cost (nox -s bench)``)."""
    wanted = " ".join(title.lower().split())
    return any(" ".join(h.lower().split()).startswith(wanted) for h in headings(page))


def broken_references() -> list[str]:
    problems: list[str] = []
    for path in scanned_files():
        text = path.read_text(encoding="utf-8")
        for m in DOTTED.finditer(text):
            why = resolve(m.group(0))
            if why:
                problems.append(f"{_where(path, text, m.start())}: {m.group(0)}: {why}")
        for m in PATH.finditer(text):
            rel = m.group(0).removeprefix("src/")
            if not (SRC / rel).exists():
                problems.append(f"{_where(path, text, m.start())}: {m.group(0)} does not exist")
        for m in DOC_PAGE.finditer(text):
            if not (ROOT / m.group(0)).is_file():
                problems.append(f"{_where(path, text, m.start())}: {m.group(0)} does not exist")
        for m in POINTER.finditer(text):
            page = _page(m.group("page"), path)
            title = m.group("quoted") or m.group("linked") or m.group("bare")
            if not page.is_file() or not _has_section(page, title):
                problems.append(f"{_where(path, text, m.start())}: {m.group(0)!r}: {page.name} has no such section")
        if path.suffix == ".md":
            for m in LINK.finditer(text):
                page = _page(m.group("page"), path)
                if not page.is_file():
                    problems.append(f"{_where(path, text, m.start())}: {m.group(0)}: no such page")
                elif m.group("anchor") and m.group("anchor") not in {slug(h) for h in headings(page)}:
                    problems.append(f"{_where(path, text, m.start())}: {m.group(0)}: no such heading")
    return problems


def test_every_dotted_name_path_and_section_pointer_resolves():
    problems = broken_references()
    assert not problems, "broken references in docstrings and docs:\n" + "\n".join(problems)


def test_the_scan_finds_what_it_checks():
    text = "\n".join(p.read_text(encoding="utf-8") for p in scanned_files())
    assert len(DOTTED.findall(text)) > 100
    assert len(POINTER.findall(text)) >= 1
    assert len([m for m in LINK.finditer(text) if m.group("anchor")]) >= 1


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("sesa_cli.metrics.ChainHealth", True),
        ("sesa_cli.models.policy.Policy.encode_prompt", True),
        ("sesa_cli.config.TrainConfig.sampler", True),  # a field
        ("sesa_cli.rollout", True),
        ("sesa_cli.metrics.CollapseMonitor", False),  # it lives in sesa_cli.collapse
        ("sesa_cli.algos.clip_cov", False),  # in sesa_cli.algos.losses, not exported by the package
        ("sesa_cli.models.loading.Policy", False),
        ("sesa_cli.no_such_module.x", False),
    ],
)
def test_resolve_tells_names_that_exist_from_names_that_do_not(name, ok):
    assert (resolve(name) is None) is ok


def test_a_pointer_to_a_missing_section_is_found():
    assert _has_section(ROOT / "README.md", "Documentation")
    assert not _has_section(ROOT / "README.md", "Samplers")
    m = POINTER.search('see the README\'s Samplers section and docs/measurements.md, "Rollout cost"')
    assert m is not None
    assert m.group("bare") == "Samplers"
    assert [x.group("quoted") for x in POINTER.finditer('docs/measurements.md, "Rollout cost"')] == ["Rollout cost"]
