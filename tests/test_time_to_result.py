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


def test_parse_took_adds_the_sections_written_from_other_roots() -> None:
    """The preamble counts the sweeps of the root the page was written from; a section written from another root
    (an older ``written`` stamp) adds its own sweeps, a section written with the preamble does not."""
    page = (
        "Compute: the sweeps under `<root>` took 48 min of wall time (two jobs).\n"
        "10 runs; its sweeps took 4 min of wall time; written 2026-11-27 11:48 at commit 038d99c.\n"
        "50 runs; its sweeps took 29 min of wall time; written 2026-11-27 11:48 at commit 038d99c.\n"
        "10 runs; its sweeps took 12 min of wall time; written 2026-11-27 08:36 at commit 7e747d5.\n"
        "10 runs; its sweeps took 1 h 2 min of wall time; written 2026-11-27 08:36 at commit 7e747d5.\n"
    )
    assert time_to_result.parse_took(page) == (48 + 12 + 62) * 60
