"""The margins of the levels tests still assert on warm-started models (tests/levels.py)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from tests.levels import LEVELS, MARGIN, Level, LevelDriftWarning

TESTS = Path(__file__).parent


@pytest.mark.parametrize("name", sorted(LEVELS))
def test_every_level_keeps_its_margin_of_drifts(name: str) -> None:
    level = LEVELS[name]
    assert level.side in ("min", "max")
    assert level.drift > 0, "a level without a measured drift cannot claim a margin"
    assert level.margin() >= MARGIN * level.drift, (
        f"{name}: measured {level.measured} is {level.margin():.4g} from the bound {level.bound}, "
        f"less than {MARGIN} x the drift {level.drift}"
    )


@pytest.mark.parametrize("name", sorted(LEVELS))
def test_every_level_is_asserted_by_the_test_it_names(name: str) -> None:
    path, test = LEVELS[name].test.split("::")
    source = (TESTS / path).read_text()
    match = re.search(rf"^def {test}\(.*?(?=^def |^@|\Z)", source, re.DOTALL | re.MULTILINE)
    assert match, f"{LEVELS[name].test} does not exist"
    assert f'LEVELS["{name}"].check(' in match.group(0)


def test_no_test_checks_a_level_it_does_not_register() -> None:
    used = set()
    for path in set(TESTS.glob("test_*.py")) - {Path(__file__)}:
        used |= set(re.findall(r'LEVELS\["([^"]+)"\]\.check\(', path.read_text()))
    assert used == set(LEVELS)


def test_a_level_fails_past_its_bound_and_warns_past_its_drift() -> None:
    level = Level(test="x::y", what="answers", side="min", bound=8, measured=60, drift=10, drift_source="", why="")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        level.check(55)  # within the drift: silent
    with pytest.warns(LevelDriftWarning, match="moved 30"):
        level.check(30)  # past the drift, within the bound
    with pytest.raises(AssertionError, match="past the bound 8"):
        level.check(7)
    upper = Level(test="x::y", what="cut", side="max", bound=0.3, measured=0.05, drift=0.05, drift_source="", why="")
    assert upper.margin() == pytest.approx(0.25)
    with pytest.raises(AssertionError):
        upper.check(0.31)
