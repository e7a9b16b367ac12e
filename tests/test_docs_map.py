"""The README and docs/ as a map (issue 53): the README is short and says first what sesa is, every page under
docs/ is reachable from it (directly or through docs/README.md, the index), and every relative link in them resolves
(a page's anchors: tests/test_doc_references.py)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def links(page: Path) -> list[str]:
    """The targets of the Markdown links of ``page``, outside code blocks."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [m.group("target") for m in LINK.finditer(text)]


def relative(page: Path) -> list[Path]:
    """The files ``page`` links to by a relative path (anchors and web addresses left out)."""
    out = []
    for target in links(page):
        path = target.split("#", 1)[0]
        if path and not re.match(r"[a-z]+:", path):
            out.append((page.parent / path).resolve())
    return out


def test_the_readme_is_short_and_says_first_what_sesa_is():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= 10_240
    first = text.splitlines()[0]
    assert first.startswith("**sesa** is a command-line toolkit for researchers")
    assert "reinforcement learning" in first
    assert "sequential sampling" in first


def test_every_docs_page_is_reachable_from_the_readme():
    index = ROOT / "docs" / "README.md"
    direct = set(relative(ROOT / "README.md"))
    assert index in direct, "README.md links the docs index"
    reached = direct | set(relative(index))
    pages = set((ROOT / "docs").glob("*.md")) - {index}
    assert pages, "docs/ has pages"
    unreached = sorted(p.name for p in pages if p.resolve() not in reached)
    assert not unreached, f"not linked from README.md or docs/README.md: {unreached}"


def test_every_relative_link_of_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = [f"{page.relative_to(ROOT)} -> {target}" for page in pages for target in relative(page)
              if not target.exists()]  # fmt: skip
    assert not broken, broken
    assert sum(len(relative(p)) for p in pages) > 50  # the scan sees the links it checks


def test_the_link_scan_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](page.md) [gone](missing.md#x) [web](https://example.org) [here](#top)\n```\n[code](x.md)\n```\n"
    )
    assert [p.name for p in relative(page)] == ["page.md", "missing.md"]
    assert not (tmp_path / "missing.md").exists()
