"""Summary tables: final and best value of every metric, mean ± std over the seeds of each group.

``summary.csv`` is the long form (one row per group × metric). The Markdown/HTML report and the console show the
wide form (one row per metric, one column per group, cells ``mean ± std``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from sesa_cli.report.runs import Run

SUMMARY_COLUMNS = ("group", "metric", "final_mean", "final_std", "best_mean", "best_std", "n_seeds")

_PREFIX_ORDER = {"policy": 0, "rollout": 1, "eval": 2, "train": 3, "collapse": 4, "time": 5}
_NAME_ORDER = {
    name: i
    for i, name in enumerate(
        ("target_mass", "effective_solutions", "solutions_above_1pct", "solution_entropy", "valid_mass", "success",
         "reward_mean", "reward_std", "entropy", "coverage", "distinct", "distinct_correct", "pass")
    )
}  # fmt: skip
_AT_K = re.compile(r"^(.*)@(\d+)$")


def metric_sort_key(metric: str) -> tuple[int, int, str, int]:
    """policy/, rollout/, eval/, train/, then the rest; the policy's success and spread, then success, reward,
    entropy, diversity first; ``@K`` in numeric order."""
    prefix, _, name = metric.rpartition("/")
    k = 0
    match = _AT_K.match(name)
    if match:
        name, k = match.group(1), int(match.group(2))
    return (
        _PREFIX_ORDER.get(prefix, len(_PREFIX_ORDER)),
        _NAME_ORDER.get(name, len(_NAME_ORDER)),
        f"{prefix}/{name}",
        k,
    )


def at_k_values(metrics: Sequence[str], base: str) -> list[int]:
    """The K of every ``{base}@K`` in ``metrics``, sorted (``base`` like ``"eval/pass"``)."""
    ks = []
    for metric in metrics:
        match = _AT_K.match(metric)
        if match and match.group(1) == base:
            ks.append(int(match.group(2)))
    return sorted(set(ks))


def summarize(runs: Sequence[Run]) -> pd.DataFrame:
    """Long summary table, columns :data:`SUMMARY_COLUMNS`, ordered by group (first appearance) then metric.

    Per run, *final* is the value at the last step that logged the metric and *best* its maximum over steps (for
    every metric, entropy and step time included: the table does not guess which direction is good). Per group,
    ``*_mean`` / ``*_std`` are the mean and sample standard deviation (ddof=1) over its runs — NaN std for a single
    run — and ``n_seeds`` counts the runs that logged the metric.
    """
    records = []
    for run in runs:
        for metric in run.metrics.columns:
            values = run.metrics[metric].dropna()
            if values.empty:
                continue
            records.append((run.group, metric, float(values.iloc[-1]), float(values.max())))
    per_run = pd.DataFrame.from_records(records, columns=["group", "metric", "final", "best"])
    if per_run.empty:
        return pd.DataFrame(columns=list(SUMMARY_COLUMNS))
    grouped = per_run.groupby(["group", "metric"], sort=False)
    summary = pd.DataFrame(
        {
            "final_mean": grouped["final"].mean(),
            "final_std": grouped["final"].std(ddof=1),
            "best_mean": grouped["best"].mean(),
            "best_std": grouped["best"].std(ddof=1),
            "n_seeds": grouped["final"].count(),
        }
    ).reset_index()
    group_order = {g: i for i, g in enumerate(dict.fromkeys(run.group for run in runs))}
    summary["_g"] = summary["group"].map(group_order)
    summary["_m"] = summary["metric"].map(metric_sort_key)
    summary = summary.sort_values(["_g", "_m"], kind="stable").drop(columns=["_g", "_m"])
    return summary.reset_index(drop=True)[list(SUMMARY_COLUMNS)]


def format_mean_std(mean: float, std: float) -> str:
    """``0.512 ± 0.034``; digits follow the magnitude; a NaN std (one seed) shows the mean alone."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    scale = max(abs(mean), 0.0 if std is None or math.isnan(std) else abs(std))
    decimals = 3 if scale < 10 else 1 if scale < 1000 else 0
    if std is None or math.isnan(std):
        return f"{mean:.{decimals}f}"
    return f"{mean:.{decimals}f} ± {std:.{decimals}f}"


def wide_table(summary: pd.DataFrame, stat: str = "final", metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per metric, one column per group, cells ``mean ± std`` of ``stat`` (``"final"`` or ``"best"``).

    Column headers carry the group's largest ``n_seeds``: ``"sampler=sequential (n=3)"``.
    """
    if stat not in ("final", "best"):
        raise ValueError(f"stat must be 'final' or 'best', not {stat!r}")
    groups = list(dict.fromkeys(summary["group"]))
    if metrics is None:
        metrics = sorted(set(summary["metric"]), key=metric_sort_key)
    table = pd.DataFrame(index=pd.Index(list(metrics), name="metric"))
    for group in groups:
        rows = summary[summary["group"] == group].set_index("metric")
        n = int(rows["n_seeds"].max()) if len(rows) else 0
        cells = [
            format_mean_std(rows.at[m, f"{stat}_mean"], rows.at[m, f"{stat}_std"]) if m in rows.index else "–"
            for m in metrics
        ]
        table[f"{group} (n={n})"] = cells
    return table


def headline_metrics(metrics: Sequence[str]) -> list[str]:
    """The few metrics worth a console line: the exact policy's success and spread (where the task has them),
    success, entropy, diversity, and pass@1 / pass@n of the evaluation."""
    present = set(metrics)
    policy_ks = at_k_values(metrics, "policy/coverage")
    wanted = [
        "policy/target_mass",
        "policy/effective_solutions",
        *(f"policy/coverage@{k}" for k in policy_ks[-1:]),
        "rollout/success",
        "eval/success",
        "rollout/entropy",
        "rollout/coverage",
        "rollout/distinct",
        "rollout/distinct_correct",
    ]
    for base in ("eval/pass", "eval/coverage", "eval/distinct", "eval/distinct_correct"):
        ks = at_k_values(metrics, base)
        if base == "eval/pass" and ks:
            wanted.append(f"{base}@{ks[0]}")
        if ks:
            wanted.append(f"{base}@{ks[-1]}")
    return [m for m in dict.fromkeys(wanted) if m in present]


def format_table_for_console(
    summary: pd.DataFrame | str | Path, stat: str = "final", metrics: Sequence[str] | None = None
) -> tuple[list[str], list[list[str]]]:
    """Headers and string rows of the wide table, ready for ``rich.table.Table``.

    ``summary`` is the DataFrame of :func:`summarize` or the path of a written ``summary.csv``. ``metrics`` defaults
    to :func:`headline_metrics` (all metrics if none of those is present)::

        headers, rows = format_table_for_console(files["summary"])
        table = Table(*headers)
        for row in rows:
            table.add_row(*row)
    """
    if not isinstance(summary, pd.DataFrame):
        summary = pd.read_csv(summary)
    all_metrics = sorted(set(summary["metric"]), key=metric_sort_key)
    if metrics is None:
        metrics = headline_metrics(all_metrics) or all_metrics
    table = wide_table(summary, stat=stat, metrics=metrics)
    headers = [f"metric ({stat}, mean ± std)", *table.columns]
    rows = [[metric, *(str(v) for v in table.loc[metric])] for metric in table.index]
    return headers, rows


def markdown_table(frame: pd.DataFrame, index: bool = True) -> str:
    """A GitHub-flavoured Markdown table (pandas' ``to_markdown`` needs ``tabulate``, which sesa does not depend on)."""

    def cell(value: object) -> str:
        text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
        return text.replace("|", "\\|").replace("\n", " ")

    headers = ([frame.index.name or ""] if index else []) + [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join(["---"] * len(headers)) + "|"]
    for label, row in frame.iterrows():
        values = ([label] if index else []) + list(row)
        lines.append("| " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(lines)
