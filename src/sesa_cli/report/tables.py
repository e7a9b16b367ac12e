"""Summary tables: per run, per group (mean over seeds with a bootstrap interval), and differences between groups.

Three long-form CSVs, one row per (run | group | pair of groups) × metric:

* ``summary.csv`` (:data:`SUMMARY_COLUMNS`): every run's *final* value of every metric (the value at the last step
  that logged it) and its *best* over steps, in the metric's declared direction (maximum, minimum, or none:
  :func:`sesa_cli.metric_keys.better`), computed on the run's own rows: a revived run's copy of its
  parent's history is left out.
* ``groups.csv`` (:data:`GROUP_COLUMNS`): per group, the number of seeds, the mean and the 95% bootstrap interval
  (:mod:`sesa_cli.report.stats`) of final and best, and the sample std of final.
* ``compare.csv`` (:data:`COMPARE_COLUMNS`): for groups compared with a baseline, the difference of the means
  (group − baseline) and its interval, paired by seed where both ran the same seeds.

The Markdown/HTML report and the console show wide forms of these (:func:`headline_table`,
:func:`difference_table`, :func:`wide_table`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from sesa_cli.metric_keys import better, family, key
from sesa_cli.report.runs import Run
from sesa_cli.report.stats import bootstrap_interval, difference_interval, format_interval

SUMMARY_COLUMNS = ("group", "seed", "run", "metric", "final", "best")
GROUP_COLUMNS = (
    "group",
    "metric",
    "n_seeds",
    "final_mean",
    "final_low",
    "final_high",
    "final_std",
    "best_mean",
    "best_low",
    "best_high",
)
COMPARE_COLUMNS = ("baseline", "group", "metric", "n_baseline", "n_group", "difference", "low", "high", "paired")

_PREFIX_ORDER = {"policy": 0, "rollout": 1, "eval": 2, "train": 3, "optim": 4, "collapse": 5, "time": 6}
_NAME_ORDER = {
    name: i
    for i, name in enumerate(
        (
            "effective_solutions",
            "target_mass",
            "solutions_above_1pct",
            "solution_entropy",
            "valid_mass",
            "success",
            "greedy_success",
            "turns",
            "reward_mean",
            "reward_std",
            "entropy",
            "coverage",
            "distinct",
            "distinct_correct",
            "pass",
        )
    )
}
_AT_K = re.compile(r"^(.*)@(\d+)$")

# The metrics a report leads with, in order, where the runs logged them (the first HEADLINE_COUNT present): the exact
# plain-prompt policy where the task can enumerate its solutions (how many solutions it spreads over, how much mass
# is on targets), then validation success, an agent's episode length and its greedy success, pass@n.
HEADLINE = tuple(
    key(name)
    for name in (
        "policy/effective_solutions",
        "policy/target_mass",
        "policy/solutions_above_1pct",
        "eval/success",
        "eval/turns",
        "eval/greedy_success",
        "eval/pass@{k}",
        "rollout/success",
    )
)
HEADLINE_COUNT = 4


def metric_sort_key(metric: str) -> tuple[int, int, str, int]:
    """policy/, rollout/, eval/, train/, then the rest; the policy's spread and success, then success, reward,
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


def headline_metrics(metrics: Sequence[str], count: int = HEADLINE_COUNT) -> list[str]:
    """The first ``count`` of :data:`HEADLINE` present in ``metrics`` (``@{k}`` = the largest K logged)."""
    present = set(metrics)
    chosen = []
    for name in HEADLINE:
        if name.endswith("@{k}"):
            ks = at_k_values(metrics, family(name))
            name = key(name, k=ks[-1]) if ks else ""
        if name in present:
            chosen.append(name)
    return chosen[:count]


# ---------------------------------------------------------------------------------------------- long tables
def summarize(runs: Sequence[Run]) -> pd.DataFrame:
    """Per-run summary (:data:`SUMMARY_COLUMNS`), ordered by group (first appearance), run, then metric.

    *final* is the value at the last step of the run's own rows that logged the metric, *best* its maximum over
    them where higher is better, its minimum where lower is (``policy/pruned_mass``, ``time/step_s``), and NaN for a
    metric with no direction (a diagnostic such as ``rollout/entropy``): the direction is declared once, with the key
    (:attr:`sesa_cli.metric_keys.MetricKey.better`).
    """
    records = []
    for run in runs:
        own = run.own
        for metric in sorted(own.columns, key=metric_sort_key):
            values = own[metric].dropna()
            if not values.empty:
                best = {"higher": values.max(), "lower": values.min()}.get(better(metric), math.nan)
                records.append((run.group, run.seed or "", str(run.path), metric, float(values.iloc[-1]), float(best)))
    frame = pd.DataFrame.from_records(records, columns=list(SUMMARY_COLUMNS))
    group_order = {g: i for i, g in enumerate(dict.fromkeys(run.group for run in runs))}
    order = frame["group"].map(group_order)
    return frame.iloc[np.argsort(order.to_numpy(), kind="stable")].reset_index(drop=True)


def _per_seed(per_run: pd.DataFrame, group: str, stat: str) -> pd.DataFrame:
    """(seed or run, metric) matrix of one group's ``stat`` values; NaN where a run did not log the metric."""
    rows = per_run[per_run["group"] == group]
    key = rows["seed"].where(rows["seed"].astype(str) != "", rows["run"]).astype(str)
    return rows.assign(_key=key).pivot_table(index="_key", columns="metric", values=stat, aggfunc="last", sort=False)


def group_summary(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per group and metric: n seeds, mean, 95% bootstrap interval and std of final, mean and interval of best
    (:data:`GROUP_COLUMNS`), in the order of ``per_run``."""
    parts = []
    for group in dict.fromkeys(per_run["group"]):
        final, best = _per_seed(per_run, group, "final"), _per_seed(per_run, group, "best")
        best = best.reindex(index=final.index, columns=final.columns)
        mean, low, high = bootstrap_interval(np.concatenate([final.to_numpy(), best.to_numpy()], axis=1))
        m = final.shape[1]
        columns = {
            "group": group,
            "metric": final.columns,
            "n_seeds": final.notna().sum().to_numpy(),
            "final_mean": mean[:m],
            "final_low": low[:m],
            "final_high": high[:m],
            "final_std": final.std(ddof=1).to_numpy(),
            "best_mean": mean[m:],
            "best_low": low[m:],
            "best_high": high[m:],
        }
        parts.append(pd.DataFrame(columns))
    if not parts:
        return pd.DataFrame(columns=list(GROUP_COLUMNS))
    frame = pd.concat(parts, ignore_index=True)
    frame["_m"] = frame["metric"].map(metric_sort_key)
    frame["_g"] = frame["group"].map({g: i for i, g in enumerate(dict.fromkeys(per_run["group"]))})
    return frame.sort_values(["_g", "_m"], kind="stable").drop(columns=["_g", "_m"]).reset_index(drop=True)


def compare_groups(per_run: pd.DataFrame, baseline: str, others: Sequence[str]) -> pd.DataFrame:
    """Final value of every metric both logged: each of ``others`` minus ``baseline`` (:data:`COMPARE_COLUMNS`).

    Metrics both groups logged at the same two or more seeds are bootstrapped together (paired by seed, one draw of
    seeds for all of them: the same numbers as :func:`sesa_cli.report.stats.difference_interval` one at a time,
    faster); the others one by one, unpaired."""
    base = _per_seed(per_run, baseline, "final")
    records = []
    for group in others:
        values = _per_seed(per_run, group, "final")
        metrics = sorted(set(base.columns) & set(values.columns), key=metric_sort_key)
        a, b = base[metrics], values[metrics]
        seeds = sorted(a.index.intersection(b.index))  # the order difference_interval resamples them in
        both = a.loc[seeds].notna() & b.loc[seeds].notna()
        same = (a.notna().sum() == both.sum()) & (b.notna().sum() == both.sum()) & (both.sum() >= 2)
        paired = [m for m in metrics if same[m]]
        diff, low, high = bootstrap_interval((b.loc[seeds, paired] - a.loc[seeds, paired]).to_numpy())
        by_metric = {m: (diff[i], low[i], high[i], True) for i, m in enumerate(paired)}
        for m in metrics:
            if m not in by_metric:
                by_metric[m] = difference_interval(a[m].dropna().to_dict(), b[m].dropna().to_dict())
        for m in metrics:
            records.append((baseline, group, m, int(a[m].notna().sum()), int(b[m].notna().sum()), *by_metric[m]))
    frame = pd.DataFrame.from_records(records, columns=list(COMPARE_COLUMNS))
    frame["difference"] = frame["difference"].astype(float)
    return frame


# ---------------------------------------------------------------------------------------------- wide tables
def headline_table(groups: pd.DataFrame, metrics: Sequence[str], labels: dict[str, str]) -> pd.DataFrame:
    """Rows = groups (``labels``: group → display name), columns = ``group``, ``n`` (seeds) and each metric's final
    ``mean [low, high]``."""
    indexed = groups.set_index(["group", "metric"])
    table = pd.DataFrame({"group": list(labels.values()), "n": [_n_seeds(groups, g) for g in labels]})
    for metric in metrics:
        table[metric] = [_cell(indexed, g, metric, "final") for g in labels]
    return table


def difference_table(compare: pd.DataFrame, metrics: Sequence[str], labels: dict[str, str]) -> pd.DataFrame:
    """Rows = compared groups, columns = ``group`` and each metric's ``difference [low, high]`` to the baseline."""
    groups = list(dict.fromkeys(compare["group"]))
    indexed = compare.set_index(["group", "metric"])
    table = pd.DataFrame({"group": [labels.get(g, g) for g in groups]})
    for metric in metrics:
        cells = []
        for group in groups:
            if (group, metric) not in indexed.index:
                cells.append("–")
                continue
            row = indexed.loc[(group, metric)]
            cells.append(format_interval(row["difference"], row["low"], row["high"], sign=True))
        table[metric] = cells
    return table


def wide_table(
    groups: pd.DataFrame,
    stat: str = "final",
    metrics: Sequence[str] | None = None,
    labels: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Rows = metrics, columns = groups (``labels`` renames them), cells ``mean [low, high]`` of ``stat``
    (``"final"`` or ``"best"``). Column headers carry the group's largest ``n_seeds``."""
    if stat not in ("final", "best"):
        raise ValueError(f"stat must be 'final' or 'best', not {stat!r}")
    order = list(dict.fromkeys(groups["group"]))
    labels = labels or {g: g for g in order}
    if metrics is None:
        metrics = sorted(set(groups["metric"]), key=metric_sort_key)
    indexed = groups.set_index(["group", "metric"])
    table = pd.DataFrame(index=pd.Index(list(metrics), name="metric"))
    for group in order:
        table[f"{labels.get(group, group)} (n={_n_seeds(groups, group)})"] = [
            _cell(indexed, group, m, stat) for m in metrics
        ]
    return table


def best_table(groups: pd.DataFrame, labels: dict[str, str] | None = None) -> pd.DataFrame:
    """The wide table of each metric's best value over steps (:func:`wide_table` of ``best``), for the metrics that
    have a direction; a metric where lower is better says so (``time/step_s (lowest)``)."""
    metrics = [m for m in sorted(set(groups["metric"]), key=metric_sort_key) if better(m)]
    table = wide_table(groups, "best", metrics=metrics, labels=labels)
    table.index = pd.Index([f"{m} (lowest)" if better(m) == "lower" else m for m in metrics], name="metric")
    return table


def _n_seeds(groups: pd.DataFrame, group: str) -> int:
    counts = groups.loc[groups["group"] == group, "n_seeds"]
    return int(counts.max()) if len(counts) else 0


def _cell(indexed: pd.DataFrame, group: str, metric: str, stat: str) -> str:
    if (group, metric) not in indexed.index:
        return "–"
    row = indexed.loc[(group, metric)]
    return format_interval(row[f"{stat}_mean"], row[f"{stat}_low"], row[f"{stat}_high"])


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


GROUP_SIZE = "sampler.group_size"
"""The one key by which a group may differ from another and still be its method, at another compute (a group of
another size: GRPO given another method's compute)."""


def group_sampler(items: Mapping[str, str]) -> str:
    """The sampler of a group, from its structured items (sesa_cli.report.document.Report.items: ``sampler`` is the
    option its runs drew with); "" where unknown."""
    return str(items.get("sampler", ""))


def method_name(items: Mapping[str, str]) -> str:
    """A head-to-head group's method, from its structured items (Report.items: the ``sampler`` and ``algo`` options
    its runs chose, and the keys its label shows): the algo on i.i.d. sampling, SESA or LTE (with the algo they are
    combined with), and a variant of its method that the head to head runs beside it (LTE's importance-sampled loss,
    the unlikeliness reward keeping negative rewards, a group of another size: GRPO given another method's compute)."""
    sampler, algo = group_sampler(items), str(items.get("algo", "grpo"))
    variant = " (IS loss)" if items.get("algo.loss_context") == "is" else ""
    variant += " (negatives kept)" if items.get("algo.terms.unlikeliness.negatives") == "keep" else ""
    variant += f" ({items[GROUP_SIZE]} a prompt)" if GROUP_SIZE in items else ""
    if sampler == "parallel":
        return ("GRPO" if algo == "grpo" else algo) + variant
    name = {"sequential": "SESA", "lte": "LTE"}.get(sampler, sampler) + variant
    return name if algo == "grpo" else f"{name}+{algo}"
