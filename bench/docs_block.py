"""The benches' results in the docs: each bench rewrites its own block of a Markdown file, between
``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``, so a page quotes the last bench run, not a hand copy."""

from __future__ import annotations

from pathlib import Path


def write_block(path: Path, name: str, lines: list[str]) -> None:
    """Replace the text between the ``bench:name`` markers of ``path`` with ``lines``; the markers must exist."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = path.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{path}: no {start} ... {end} block to write the results into")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(head + start + "\n" + "\n".join(lines) + "\n" + end + tail)
    print(f"wrote the results into {path} ({start})")
