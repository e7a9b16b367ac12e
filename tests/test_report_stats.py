"""Bootstrap intervals over seeds and number formats of the diversity report, against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sesa_cli.report.stats import (
    bootstrap_interval,
    difference_interval,
    format_interval,
    format_value,
    mean_interval,
)


def test_two_seeds_interval_is_their_range() -> None:
    # Resamples of (a, b): (a, a) 1/4, mixed 1/2, (b, b) 1/4. The 2.5% and 97.5% points fall inside the outer
    # quarters: the interval is [a, b] exactly.
    assert mean_interval([0.2, 0.4]) == (pytest.approx(0.3), 0.2, 0.4)
    assert mean_interval([0.4, 0.2]) == (pytest.approx(0.3), 0.2, 0.4)


def test_five_seeds_hand_computed() -> None:
    # (0, 0, 0, 0, 1): the resampled mean is j/5 with j ~ Binomial(5, 1/5). P(0) = 0.328 > 2.5%, so the low end is
    # 0; P(j <= 2) = 0.942 < 97.5% <= P(j <= 3) = 0.993, so the high end is 3/5. Monte Carlo noise of 10,000
    # resamples (sd ~0.0024 on those probabilities) is far from either edge.
    assert mean_interval([0, 0, 0, 0, 1]) == (pytest.approx(0.2), 0.0, pytest.approx(0.6))
    # (0, 0, 3): P(mean = 3) = 1/27 = 0.037 > 2.5%, P(mean = 0) = 8/27
    assert mean_interval([0, 0, 3]) == (pytest.approx(1.0), 0.0, 3.0)


def test_one_seed_has_no_interval_and_no_seed_no_mean() -> None:
    mean, low, high = mean_interval([0.7])
    assert mean == 0.7
    assert math.isnan(low)
    assert math.isnan(high)
    assert all(math.isnan(v) for v in mean_interval([]))
    assert mean_interval([0.1, float("nan"), 0.3])[1:] == (0.1, 0.3)  # a missing value is no seed


def test_bootstrap_is_reproducible_and_columns_independent() -> None:
    rng = np.random.default_rng(7)
    values = rng.random((5, 3))
    first = bootstrap_interval(values)
    assert all(np.array_equal(a, b) for a, b in zip(first, bootstrap_interval(values), strict=True))
    alone = bootstrap_interval(values[:, [1]])
    assert (alone[1][0], alone[2][0]) == (first[1][1], first[2][1])
    # a column missing one seed is resampled over its 4 seeds, the others over 5
    values[2, 0] = np.nan
    mean, low, high = bootstrap_interval(values)
    assert mean[0] == pytest.approx(np.nanmean(values[:, 0]))
    assert (low[1], high[1]) == (first[1][1], first[2][1])
    assert np.all(low <= mean)
    assert np.all(mean <= high)


def test_difference_paired_by_seed_or_unpaired() -> None:
    # Same seeds: per-seed differences 1 and 1: the interval is the point 1, however far apart the seeds are.
    assert difference_interval({"0": 0.0, "1": 5.0}, {"0": 1.0, "1": 6.0}) == (1.0, 1.0, 1.0, True)
    # Different seeds: A's resampled means are 0, 0.5, 1 (1/4, 1/2, 1/4), B's always 2: B - A is 2, 1.5, 1.
    assert difference_interval({"0": 0.0, "1": 1.0}, {"2": 2.0, "3": 2.0}) == (1.5, 1.0, 2.0, False)
    diff, low, high, paired = difference_interval({"0": 0.5}, {"0": 0.7, "1": 0.9})
    assert diff == pytest.approx(0.3)
    assert math.isnan(low)
    assert math.isnan(high)
    assert not paired
    # One seed each, the same seed (two runs of seed 0): the difference of that seed, paired, without an interval
    diff, low, high, paired = difference_interval({"0": 0.5}, {"0": 0.7})
    assert diff == pytest.approx(0.2)
    assert math.isnan(low)
    assert math.isnan(high)
    assert paired


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e-4, "0.0001"),
        (3e-4, "0.0003"),
        (0.5123, "0.512"),
        (12.93, "12.9"),
        (1234.5, "1,234"),
        (0.0, "0"),
        (2e-6, "2.00e-06"),
        (float("nan"), "–"),
    ],
)
def test_small_numbers_read(value: float, text: str) -> None:
    assert format_value(value) == text


def test_interval_format_shares_decimals() -> None:
    assert format_interval(0.512, 0.41, 0.63) == "0.512 [0.410, 0.630]"
    assert format_interval(5.2, 1.03, 9.8) == "5.20 [1.03, 9.80]"
    assert format_interval(1e-4, 1e-4, 1e-4) == "0.000100 [0.000100, 0.000100]"  # train/lr is not 0.000
    assert format_interval(0.2, -0.05, 0.45, sign=True) == "+0.200 [-0.050, 0.450]"
    assert format_interval(3.0, math.nan, math.nan) == "3.00"
    assert format_interval(math.nan, math.nan, math.nan) == "–"


def test_compare_groups_matches_difference_interval_metric_by_metric() -> None:
    import pandas as pd

    from sesa_cli.report.tables import compare_groups

    rng = np.random.default_rng(3)
    rows = [
        (g, str(s), f"{g}{s}", m, float(rng.random()), 0.0)
        for g in ("A", "B")
        for s in range(5)
        for m in ("m1", "m2", "m3")
    ]
    rows = [r for r in rows if not (r[0] == "B" and r[1] == "4" and r[3] == "m3")]  # m3: B lacks seed 4: unpaired
    per_run = pd.DataFrame(rows, columns=["group", "seed", "run", "metric", "final", "best"])
    table = compare_groups(per_run, "A", ["B"]).set_index("metric")
    for metric in ("m1", "m2", "m3"):
        a = {s: v for g, s, _, m, v, _ in rows if g == "A" and m == metric}
        b = {s: v for g, s, _, m, v, _ in rows if g == "B" and m == metric}
        expected = difference_interval(a, b)
        got = table.loc[metric, ["difference", "low", "high", "paired"]].tolist()
        assert got[:3] == pytest.approx(list(expected[:3]))
        assert got[3] == expected[3] == (metric != "m3")


def test_a_report_over_two_runs_of_one_seed_heads_its_differences_paired(tmp_path, monkeypatch):
    # issue 67: a report over a parallel and a sequential run, both seed 0, headed its difference table "unpaired"
    from tests.conftest import run_cli
    from tests.fake_runs import write_run

    runs = [write_run(tmp_path / sampler, {"sampler": sampler, "seed": 0}) for sampler in ("parallel", "sequential")]
    out = tmp_path / "report"
    assert run_cli(["diversity-report", f"runs=[{runs[0]},{runs[1]}]", f"hydra.run.dir={out}"], monkeypatch) == 0
    markdown = (out / "report.md").read_text()
    assert "(group − baseline, final values, paired by seed)" in markdown
    assert "unpaired" not in markdown
