"""What every group table carries beside its means: how many of the group's runs were lost, what the group cost
relative to the baseline, the mass the exact walk pruned beside the exact figures, and the mark on an exact figure
that covers too little of the policy (docs/metrics.md, "Exact figures and pruned mass").

* **runs lost** (:func:`lost_counts`): the runs of a group that ended broken (sesa_cli.report.marks.lost_reasons:
  success below the base model's, valid replies under half, a non-finite loss). A lost run stays in the mean (it is
  what the method did with that seed); the count beside the mean says the mean holds it, so that a method losing one
  seed in five reads as that, not as a wide interval.
* **cost** (:func:`cost_ratios`): the group's mean training compute, ``train_flops`` from each run's run.json
  (sesa_cli.compute.run_cost), relative to the baseline group's: what the group spent to learn, sampling and update, with
  the evaluations and exact walks left out (every method pays those alike).
* **pruned mass** (:func:`with_pruned`): ``policy/pruned_mass`` is a column of every table that shows an exact
  ``policy/*`` figure, right after them; a group with a run whose exact figures cover too little of its policy (an
  ``exact`` mark, sesa_cli.report.marks: its walk pruned more than :data:`sesa_cli.intervals.PRUNED_LIMIT`, or most
  of its mass is invalid) has its exact cells marked
  :data:`sesa_cli.intervals.EXACT_MARK` (:func:`mark_exact_cells`).

Torch-free, like the rest of the report.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

import pandas as pd

from sesa_cli.compute import run_cost
from sesa_cli.intervals import EXACT_MARK, PRUNED, UNCHECKED
from sesa_cli.report.marks import Mark
from sesa_cli.report.runs import Run

LOST = "runs lost"
"""The column of a group table that counts its lost runs."""
COST = "cost"
"""The column of a group table with its training compute relative to the baseline group's."""


def lost_counts(runs: Sequence[Run], marks: Sequence[Mark]) -> dict[str, tuple[int, int]]:
    """Per group (in the order of ``runs``): (its runs with a ``lost`` mark, its runs)."""
    lost = {(m.group, m.run) for m in marks if m.kind == "lost"}
    counts: dict[str, tuple[int, int]] = {}
    for run in runs:
        k, n = counts.get(run.group, (0, 0))
        counts[run.group] = (k + ((run.group, run.seed or run.name) in lost), n + 1)
    return counts


def lost_text(lost: int, runs: int) -> str:
    """A group's cell of :data:`LOST`: ``0`` or ``1 of 5 runs lost``."""
    return f"{lost} of {runs} runs lost" if lost else "0"


def train_flops(run: Run) -> float:
    """The run's training compute from its run.json (:func:`sesa_cli.compute.run_cost`'s ``train_flops``), NaN for a
    run that did not record it (written before 2026-12-07, or a ``sesa eval``, which trains nothing)."""
    cost = run_cost(run.info)
    value = None if cost is None else cost["train_flops"]
    return value if value else math.nan


def cost_ratios(runs: Sequence[Run], baseline: str | None) -> dict[str, float]:
    """Per group: its runs' mean :func:`train_flops` over the ``baseline`` group's (the first group when None);
    empty when the baseline's runs recorded none."""
    by_group: dict[str, list[float]] = {}
    for run in runs:
        by_group.setdefault(run.group, []).append(train_flops(run))
    if not by_group:
        return {}
    base = baseline if baseline in by_group else next(iter(by_group))
    recorded = [v for v in by_group[base] if not math.isnan(v)]
    if not recorded:
        return {}
    mean = sum(recorded) / len(recorded)
    out = {}
    for group, values in by_group.items():
        known = [v for v in values if not math.isnan(v)]
        out[group] = sum(known) / len(known) / mean if known else math.nan
    return out


def cost_text(ratio: float) -> str:
    """A group's cell of :data:`COST`: ``1.35x``, or ``–`` where its runs recorded no compute."""
    return "–" if math.isnan(ratio) else f"{ratio:.2f}x"


def with_pruned(metrics: Sequence[str], logged: Collection[str]) -> list[str]:
    """``metrics`` with ``policy/pruned_mass`` right after the last exact ``policy/*`` figure among them, where the
    runs logged it and it is not there yet."""
    out = list(metrics)
    exact = [i for i, m in enumerate(out) if m.startswith("policy/") and m not in UNCHECKED]
    if exact and PRUNED in logged and PRUNED not in out:
        out.insert(exact[-1] + 1, PRUNED)
    return out


def mark_exact_cells(table: pd.DataFrame, marked_rows: Collection[int]) -> pd.DataFrame:
    """``table`` (one row per group, a column per metric) with :data:`sesa_cli.intervals.EXACT_MARK` after every exact
    ``policy/*`` cell of the rows ``marked_rows`` (positions): their walk pruned too much, or their exact figures
    do not describe what they sample."""
    out = table.copy()
    columns = [c for c in out.columns if str(c).startswith("policy/") and c not in UNCHECKED]
    for i in marked_rows:
        for column in columns:
            cell = str(out.iloc[i][column])
            if cell not in ("", "–"):
                out.iloc[i, out.columns.get_loc(column)] = f"{cell} {EXACT_MARK}"
    return out


def add_group_columns(
    table: pd.DataFrame,
    groups: Sequence[str],
    lost: Mapping[str, tuple[int, int]],
    cost: Mapping[str, float],
    marked: Collection[str],
) -> pd.DataFrame:
    """A headline table (rows: ``groups`` in order, columns ``group``, ``n`` then the metrics) with :data:`LOST`
    after ``n``, :data:`COST` after it where any group recorded its compute, and the exact cells of the ``marked``
    groups marked (:func:`mark_exact_cells`)."""
    out = table.copy()
    at = list(out.columns).index("n") + 1 if "n" in out.columns else 1
    out.insert(at, LOST, [lost_text(*lost.get(g, (0, 0))) for g in groups])
    if cost and not all(math.isnan(v) for v in cost.values()):
        out.insert(at + 1, COST, [cost_text(cost.get(g, math.nan)) for g in groups])
    return mark_exact_cells(out, [i for i, g in enumerate(groups) if g in marked])
