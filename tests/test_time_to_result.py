"""bench/time_to_result.py reads the sweeps' wall time that docs/results.md records (issue 32), through
scripts/findings.py's reader: the one figure every page quotes (issue 67)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import time_to_result


def test_seconds_reads_hours_minutes_and_seconds() -> None:
    assert time_to_result.seconds("1 h 26 min") == 5160
    assert time_to_result.seconds("12 min 5 s") == 725
    assert time_to_result.seconds("3 h 04 min") == 11040


def test_minutes_round_trips_through_seconds() -> None:
    for seconds in (59, 348, 5160, 7322):
        expected = seconds - seconds % 60 if seconds >= 3600 else seconds
        assert time_to_result.seconds(time_to_result.minutes(seconds)) == expected


def test_the_results_page_records_its_sweeps_wall_time() -> None:
    took = time_to_result.results_time((ROOT / "docs" / "results.md").read_text())
    assert took is not None
    assert time_to_result.seconds(took) > 0
    assert time_to_result.results_time("no such sentence") is None
