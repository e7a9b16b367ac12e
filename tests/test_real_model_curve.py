"""scripts/real_model.py (issue 70): the real model's learning curves and its final-minus-base table, on fabricated
runs whose every figure is known."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_runs import write_run
from tests.scripts import real_model as RM

SEEDS = (0, 1, 2)


def _runs(root: Path) -> list[Path]:
    dirs = []
    for job, (sampler, seed) in enumerate((s, seed) for s in ("parallel", "sequential") for seed in SEEDS):
        dirs.append(write_run(root / str(job), {"sampler": sampler, "seed": seed}, task="math", coverage=False))
    return dirs


def test_curves_and_gains_follow_what_the_runs_logged(tmp_path: Path) -> None:
    runs, _ = RM.load_runs(_runs(tmp_path / "runs"))
    metric = RM.pass_metric(runs)
    assert metric.startswith("eval/pass@")
    curve = RM.curves(runs, RM.SUCCESS)
    for sampler, rows in curve.groupby("sampler"):
        group = [r for r in runs if RM.sampler_of(r) == sampler]
        assert list(rows["step"]) == sorted(rows["step"])
        assert rows["train_min"].is_monotonic_increasing  # training time only grows with the steps
        for row in rows.itertuples():
            values = [r.metrics.at[row.step, RM.SUCCESS] for r in group]
            assert row.mean == pytest.approx(sum(values) / len(values))
            assert min(values) - 1e-12 <= row.low <= row.mean <= row.high <= max(values) + 1e-12
    gained = RM.gains(runs, RM.SUCCESS)
    for row in gained.itertuples():
        group = [r for r in runs if RM.sampler_of(r) == row.sampler]
        diffs = [r.metrics[RM.SUCCESS].dropna().iloc[-1] - r.metrics.at[0, RM.SUCCESS] for r in group]
        assert row.gain == pytest.approx(sum(diffs) / len(diffs))  # final minus base, paired by seed
        assert row.low <= row.gain <= row.high
        assert row.seeds == len(SEEDS)


def test_the_page_block_and_the_figure_are_written(tmp_path: Path) -> None:
    page = tmp_path / "real-models.md"
    page.write_text("before\n<!-- bench:real_model -->\nold\n<!-- /bench:real_model -->\nafter\n")
    figure = tmp_path / "results" / "real_model.png"
    assert RM.main([*map(str, _runs(tmp_path / "runs")), "--page", str(page), "--figure", str(figure)]) == 0
    text = page.read_text()
    assert "old" not in text
    assert text.startswith("before\n")
    assert text.endswith("after\n")
    assert "| parallel | eval/success |" in text
    assert "| sequential | eval/success |" in text
    assert "![learning curves](results/real_model.png)" in text
    assert figure.stat().st_size > 0
