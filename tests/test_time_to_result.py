"""bench/time_to_result.py reads the sweeps' wall time that docs/results.md records (issue 32)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import time_to_result


def test_parse_took_reads_hours_minutes_and_seconds() -> None:
    assert time_to_result.parse_took("Compute: the sweeps took 1 h 26 min of wall time (two jobs") == 5160
    assert time_to_result.parse_took("the sweeps took 12 min 5 s of wall time") == 725
    assert time_to_result.parse_took("Compute: the sweeps under `<root>` took 47 min of wall time (two") == 2820
    assert time_to_result.parse_took("no such sentence") is None


def test_minutes_round_trips_through_parse_took() -> None:
    for seconds in (59, 348, 5160, 7322):
        text = f"the sweeps took {time_to_result.minutes(seconds)} of wall time"
        expected = seconds - seconds % 60 if seconds >= 3600 else seconds
        assert time_to_result.parse_took(text) == expected


def test_the_results_page_records_its_sweeps_wall_time() -> None:
    took = time_to_result.parse_took((ROOT / "docs" / "results.md").read_text())
    assert took is not None
    assert took > 0


def test_parse_took_adds_the_sections_made_elsewhere() -> None:
    """The preamble counts the sweeps of the root the page was last written from (sections I and II here, written
    at two times from it, sharing sweeps); sections whose runs were made at another commit came from another root
    and add their own figures."""
    page = (
        "Compute: the sweeps under `<root>` took 41 min of wall time (two jobs).\n"
        "10 runs, made at commit 08e249a (1 torch thread); its sweeps took 2 min of wall time; written "
        "2026-11-27 14:36 at commit 08e249a.\n"
        "50 runs, made at commit 08e249a (1 torch thread); its sweeps took 29 min of wall time; written "
        "2026-11-27 14:47 at commit 08e249a.\n"
        "10 runs, made at commit 3f30d56 (1 torch thread); its sweeps took 12 min of wall time; written "
        "2026-11-27 08:36 at commit 7e747d5.\n"
        "10 runs, made at commit 3f30d56 (1 torch thread); its sweeps took 1 h 2 min of wall time; written 2026-11-27"
        " 08:36 at commit 7e747d5.\n"
    )
    assert time_to_result.parse_took(page) == (41 + 12 + 62) * 60
    # a section of the newest root whose sweep ran across a commit names both commits: still the preamble's
    across = page.replace("made at commit 08e249a (1 torch thread); its sweeps took 2 min", "made at commit 5e5e5e5, "
                          "08e249a (1 torch thread); its sweeps took 2 min")  # fmt: skip
    assert across != page
    assert time_to_result.parse_took(across) == (41 + 12 + 62) * 60
