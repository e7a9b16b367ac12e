"""Assemble a diversity report: the CSVs, the PNG plots, report.md and a self-contained report.html.

The report leads with the answer: per group the headline metrics (mean and 95% bootstrap interval over seeds),
the differences between the groups compared, then the pictures; the full tables come last (folded in the HTML).
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TypedDict

import pandas as pd

from sesa_cli.config import ConfigError
from sesa_cli.intervals import EXACT_MARK
from sesa_cli.metric_keys import family
from sesa_cli.metric_keys import key as metric_key
from sesa_cli.report.columns import (
    COST,
    add_group_columns,
    cost_ratios,
    cost_text,
    lost_counts,
    lost_text,
    mark_exact_cells,
    with_pruned,
)
from sesa_cli.report.environment import environment_notes, runs_table
from sesa_cli.report.heatmap import CAPTION as HEATMAP_CAPTION
from sesa_cli.report.heatmap import FLOOR, draw_heatmaps, pick_runs
from sesa_cli.report.marks import MARK, Mark, run_marks
from sesa_cli.report.plots import Layout, make_plots
from sesa_cli.report.runs import Run, group_identity, load_runs, short_label
from sesa_cli.report.stats import METHOD, decimals_for, format_interval, format_value
from sesa_cli.report.tables import (
    GROUP_SIZE,
    at_k_values,
    best_table,
    compare_groups,
    difference_table,
    group_summary,
    headline_metrics,
    headline_table,
    markdown_table,
    method_name,
    metric_sort_key,
    summarize,
    wide_table,
)

AGAINST = "against (its cost)"
"""The equal-compute table's column naming the baseline-method group each row is set against."""

_PLOT_CAPTIONS = {
    "heatmap": HEATMAP_CAPTION.format(floor=FLOOR),
    "policy": "The plain-prompt policy, exactly (every solution scored): how many targets its success mass spreads "
    "over (exp of the entropy of the normalised target mass), the mass on targets, expected coverage of the targets "
    "by k samples.",
    "agent": "Episodes: success rate and length in turns, in training batches and at evaluation.",
    "sampling": "Success rate and mean token entropy of the sampling distribution over training steps (what the "
    "sampler drew, and evaluation).",
    "diversity": "Diversity of what was sampled, over training steps (rollout statistics, and evaluation): coverage "
    "of the target set, distinct and distinct-correct solutions.",
    "pass_at_k": "pass@k of the final evaluation against k (log2 axis).",
    "tradeoff": "Success against diversity at the end of training, exactly: one point per group at its mean effective "
    "solutions and target mass over seeds, with the 95% bootstrap interval of each.",
}
ONE_SEED = "one seed: no interval"
"""What an interval cell says when its group ran one seed (a bootstrap over seeds needs two)."""
# The metric "kept more solutions" reads, the first a report has: how many targets the exact policy spreads its
# success mass over, else the distinct correct answers of the evaluation's n samples, else of a training group.
SOLUTIONS = tuple(
    metric_key(name)
    for name in ("policy/effective_solutions", "eval/distinct_correct@{k}", "rollout/distinct_correct")
)

_FINAL = "Value at the last step that logged the metric (a revived run's copy of its parent's rows excluded)."
_BEST = (
    "Best value over steps in each metric's direction (sesa_cli.metric_keys): the maximum, or the minimum where "
    "lower is better (marked lowest); metrics without a direction (entropy, losses, counts) are left out."
)


class ReportFiles(TypedDict):
    """What :func:`build_report` wrote (all paths inside ``out_dir``)."""

    summary: Path
    """summary.csv: one row per run × metric (group, seed, run, metric, final, best)."""
    groups: Path
    """groups.csv: one row per group × metric (n seeds, mean, 95% bootstrap interval of final and best)."""
    compare: Path | None
    """compare.csv: per compared group × metric, the difference to the baseline and its interval (None when no two
    groups were compared)."""
    markdown: Path
    """report.md, referencing the PNGs next to it."""
    html: Path
    """report.html, self-contained (PNGs embedded as data URIs)."""
    plots: dict[str, Path]
    """Written PNGs by name (``heatmap``, ``policy``, ``agent``, ``sampling``, ``diversity``, ``pass_at_k``);
    skipped plots are absent."""
    notes: list[str]
    """Things the reader should know (skipped job dirs, skipped plots, runs that differ in thread count or package
    versions), also listed in the report."""


@dataclass
class Report:
    """Everything a document shows, computed once."""

    runs: list[Run]
    per_run: pd.DataFrame
    groups: pd.DataFrame
    compare: pd.DataFrame | None
    baseline: str | None
    headline: list[str]
    labels: dict[str, str]
    """group → numbered display label (``[1] parallel``)."""
    items: dict[str, dict[str, str]] = field(default_factory=dict)
    """group → what it is, as data (:func:`sesa_cli.report.runs.group_identity`): the ``sampler`` and ``algo`` its
    runs chose and each key its label shows. Code reads this, never the words of a label."""
    plots: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    """Runs whose numbers are not to be taken at face value (sesa_cli.report.marks); their groups carry ``(!)``."""

    @property
    def task(self) -> str:
        return next((run.task for run in self.runs if run.task is not None), None) or "unknown"

    @property
    def seeds(self) -> list[str]:
        """The seeds of the report's runs, in numeric order."""
        return sorted({run.seed for run in self.runs if run.seed is not None}, key=_seed_order)

    def intro(self) -> str:
        seeds = self.seeds
        n_groups = len(self.labels)
        seed_text = f" · seeds {', '.join(seeds)}" if seeds else ""
        return f"Task {self.task} · {len(self.runs)} runs in {n_groups} group{'s' * (n_groups != 1)}{seed_text}."

    def marked_labels(self) -> dict[str, str]:
        """``labels`` with :data:`sesa_cli.report.marks.MARK` after every group that has a marked run."""
        marked = {m.group for m in self.marks}
        return {g: f"{label} {MARK}" if g in marked else label for g, label in self.labels.items()}

    def headline_frame(self) -> pd.DataFrame:
        """The headline table, with each group's runs lost, cost and marked exact cells (sesa_cli.report.columns)."""
        table = headline_table(self.groups, self.headline, self.marked_labels())
        exact = self.exact_marked(list(self.labels))
        return add_group_columns(table, list(self.labels), self.lost(), self.costs, exact)

    @cached_property
    def costs(self) -> dict[str, float]:
        """Per group: its training compute relative to the baseline's (:func:`sesa_cli.report.columns.cost_ratios`),
        read once for every table."""
        return cost_ratios(self.runs, self.baseline)

    def lost(self) -> dict[str, tuple[int, int]]:
        """Per group: (runs lost, runs) (:func:`sesa_cli.report.columns.lost_counts`)."""
        return lost_counts(self.runs, self.marks)

    def lost_sentence(self) -> str | None:
        """The groups that lost runs, one clause each (``[3] parallel passk: 1 of 5 runs lost``), None when none did."""
        clauses = [f"{self.labels[g]}: {lost_text(k, n)}" for g, (k, n) in self.lost().items() if k]
        return f"Runs lost (ended broken, kept in the means): {'; '.join(clauses)}." if clauses else None

    def exact_marked(self, groups: Sequence[str], kinds: Collection[str] = ("exact",)) -> list[str]:
        """Those of ``groups`` with a run whose exact metrics cover too little of its policy (the ``exact`` marks
        of sesa_cli.report.marks: their cells carry †), or with a mark of any of ``kinds``."""
        return [g for g in groups if any(m.group == g and m.kind in kinds for m in self.marks)]

    def difference_frame(self) -> pd.DataFrame | None:
        if self.compare is None or self.compare.empty:
            return None
        table = difference_table(self.compare, self.headline, self.labels)
        groups = list(dict.fromkeys(self.compare["group"]))
        cost = self.costs
        if cost and not all(math.isnan(v) for v in cost.values()):
            table.insert(1, COST, [cost_text(cost.get(g, math.nan)) for g in groups])
        marked = self.exact_marked(groups)
        return mark_exact_cells(table, [i for i, g in enumerate(groups) if g in marked])

    def sized_baselines(self) -> dict[str, float]:
        """The baseline's method at every group size the report ran it (the groups whose items differ from the
        baseline's by ``sampler.group_size`` only, the baseline included), with their cost relative to the baseline;
        empty where the runs recorded no cost."""
        if self.baseline is None:
            return {}

        def method(group: str) -> dict[str, str]:
            return {k: v for k, v in self.items.get(group, {}).items() if k != GROUP_SIZE}

        return {
            g: c for g, c in self.costs.items() if method(g) == method(self.baseline) and not math.isnan(c) and c > 0
        }

    def nearest_sized(self, group: str) -> str | None:
        """Of :meth:`sized_baselines`, the one whose cost is nearest ``group``'s (on a log scale): the baseline's
        method at ``group``'s compute. None where the baseline's method ran at one group size only, or ``group``'s
        runs recorded no cost."""
        sized = self.sized_baselines()
        cost = self.costs.get(group, math.nan)
        if len(sized) < 2 or math.isnan(cost):
            return None
        return min(sized, key=lambda b: abs(math.log(sized[b] / cost)) if cost > 0 else 0.0)

    @cached_property
    def equal_compute(self) -> pd.DataFrame | None:
        """Each compared group minus the baseline's method given the compute nearest its own: of
        :meth:`sized_baselines`, the one whose cost is nearest the group's (on a log scale), as
        :func:`sesa_cli.report.tables.compare_groups` rows (paired by seed as in :meth:`difference_frame`). None where
        the baseline's method ran at one group size only: then the difference table is the only comparison there
        is."""
        if self.compare is None or self.compare.empty:
            return None
        sized = self.sized_baselines()
        pairs = {g: self.nearest_sized(g) for g in dict.fromkeys(self.compare["group"]) if g not in sized}
        parts = [compare_groups(self.per_run, nearest, [g]) for g, nearest in pairs.items() if nearest is not None]
        return pd.concat(parts, ignore_index=True) if parts else None

    def equal_compute_frame(self) -> pd.DataFrame | None:
        """:attr:`equal_compute` as the page's table: a row per group, its cost, the group it is set against (with
        that group's cost) and each headline metric's difference; exact cells marked † where either group's are."""
        compare = self.equal_compute
        if compare is None:
            return None
        cost = self.costs
        against = dict(zip(compare["group"], compare["baseline"], strict=True))
        groups = list(against)
        table = difference_table(compare, self.headline, self.labels)
        table.insert(1, COST, [cost_text(cost[g]) for g in groups])
        table.insert(2, AGAINST, [f"{self.labels[against[g]]} ({cost_text(cost[against[g]])})" for g in groups])
        return mark_exact_cells(table, [i for i, g in enumerate(groups) if self.exact_marked([g, against[g]])])

    def equal_compute_title(self) -> str:
        assert self.baseline is not None
        return (
            f"At equal compute: each group minus {method_name(self.items.get(self.baseline, {}))} given the group "
            f"size whose cost is nearest its own (cost relative to {self.labels[self.baseline]}; final values, paired "
            "by seed)"
        )

    def answer(self) -> str | None:
        """One sentence: which compared group kept more solutions (:data:`SOLUTIONS`' first metric the groups
        logged, named in it), with the final means and the difference's interval; None when no groups are compared.
        Where a compared group's exact metrics do not describe its samples (:meth:`exact_marked`), the sentence rests
        on the first sampled metric instead, and says why. The groups that lost runs follow (:meth:`lost_sentence`)."""
        verdict = self._answer()
        lost = self.lost_sentence()
        return " ".join(s for s in (verdict, lost) if s) or None

    def _answer(self) -> str | None:
        if self.baseline is None or self.compare is None or self.compare.empty:
            return None
        compared = [self.baseline, *self.compare["group"].unique()]
        # the metrics every compared group logged (compare_groups keeps those both of a pair logged)
        by_group = self.compare.groupby("group")["metric"].agg(set)
        logged = set.intersection(*by_group.tolist())
        marked = self.exact_marked(compared, ("exact", "gap"))
        why = ""
        if marked:
            names = ", ".join(self.labels[g] for g in marked)
            logged = {m for m in logged if not m.startswith("policy/")}
            why = f" Not read on the exact policy/* metrics: those of {names} do not describe what it samples."
        metric = solutions_metric(logged)
        if metric is None:
            return f"No verdict on the solutions kept.{why}" if marked else None
        sentence = self._verdict(compared, metric)
        return None if sentence is None else sentence + why

    def _verdict(self, compared: list[str], metric: str) -> str | None:
        """:meth:`answer`'s sentence on ``metric``."""
        assert self.baseline is not None
        assert self.compare is not None
        means = self.groups.set_index(["group", "metric"])["final_mean"]
        value = {g: float(means.get((g, metric), math.nan)) for g in compared}
        if any(math.isnan(v) for v in value.values()):
            return None
        diffs = self.compare.set_index(["group", "metric"])

        def versus(group: str) -> str:
            row = diffs.loc[(group, metric)]
            d, lo, hi = float(row["difference"]), float(row["low"]), float(row["high"])
            text = format_interval(d, lo, hi, sign=True)
            if math.isnan(lo) or math.isnan(hi):
                return f"difference {text}; {ONE_SEED}"
            mean, _, bounds = text.partition(" ")
            return f"difference {mean}, 95% interval {bounds}" + ("" if clear(group) else ", which holds 0")

        def clear(group: str) -> bool:
            row = diffs.loc[(group, metric)]
            return not float(row["low"]) <= 0 <= float(row["high"])  # NaN bounds (one seed) compare False: clear

        def name(group: str) -> str:
            return self.labels[group]

        decimals = decimals_for(*value.values())

        def shown(group: str) -> str:
            return format_value(value[group], decimals)

        best = max(compared, key=lambda g: value[g])
        if len(compared) == 2:
            other = compared[1]
            if value[other] == value[self.baseline]:
                return (f"{name(self.baseline)} and {name(other)} kept as many solutions: {metric} "
                        f"{shown(other)} each ({versus(other)}).")  # fmt: skip
            loser = self.baseline if best == other else other
            if not clear(other):
                return (f"Neither kept clearly more solutions: {metric} {shown(best)} in {name(best)} against "
                        f"{shown(loser)} in {name(loser)} ({versus(other)}).")  # fmt: skip
            return (f"{name(best)} kept more solutions than {name(loser)}: {metric} {shown(best)} "
                    f"against {shown(loser)} ({versus(other)}).")  # fmt: skip
        rest = ", ".join(f"{name(g)} {shown(g)}" for g in compared if g != best)
        against = "" if best == self.baseline else f"; {versus(best)} to {name(self.baseline)}"
        return f"{name(best)} kept the most solutions: {metric} {shown(best)} against {rest}{against}."

    def difference_title(self) -> str:
        assert self.baseline is not None
        assert self.compare is not None
        paired = set(self.compare.loc[self.compare["metric"].isin(self.headline), "paired"])
        how = "paired by seed" if paired == {True} else "unpaired" if paired == {False} else "paired where possible"
        return f"Difference to {self.labels[self.baseline]} (group − baseline, final values, {how})"


def solutions_metric(metrics: set[str]) -> str | None:
    """The first of :data:`SOLUTIONS` in ``metrics`` (an ``@{k}`` family at its largest k), or None."""
    for name in SOLUTIONS:
        if name.endswith("@{k}"):
            ks = at_k_values(sorted(metrics), family(name))
            name = metric_key(name, k=ks[-1]) if ks else ""
        if name in metrics:
            return name
    return None


def default_compare(runs: Sequence[Run]) -> list[str]:
    """The groups compared when ``compare=`` is not given, baseline first: the revivals with each other when two or
    more groups are revivals (``sesa revive`` runs), else the two groups when there are exactly two, else none. The
    one group of i.i.d. sampling (``sampler=parallel``) among them is the baseline, whatever the order of ``runs=``
    (the collapse -> revive -> report workflow of docs/usage.md); else the first."""
    order = list(dict.fromkeys(run.group for run in runs))
    revived = [g for g in order if all(r.info.get("command") == "revive" for r in runs if r.group == g)]
    chosen = revived if len(revived) >= 2 else order if len(order) == 2 else []
    # i.i.d. sampling is the baseline whatever the order of runs=[...]
    parallel = [g for g in chosen if all(_sampler(r) == "parallel" for r in runs if r.group == g)]
    base = parallel[0] if len(parallel) == 1 else chosen[0] if chosen else None
    return [base, *(g for g in chosen if g != base)] if base is not None else []


def _sampler(run: Run) -> str | None:
    sampler = run.config.get("sampler")
    return str(sampler.get("name")) if isinstance(sampler, dict) else None


def _seed_order(seed: str) -> tuple[int, str]:
    return (int(seed), "") if seed.lstrip("-").isdigit() else (1 << 30, seed)


def resolve_compare(spec: Sequence[str | int], runs: Sequence[Run]) -> list[str]:
    """The groups ``compare=[...]`` names, baseline first: each entry a group number as the report lists them
    (1, 2, ...), a label (full or short), a piece of exactly one label, or ``*`` (every group not named elsewhere,
    in order). Raises ConfigError naming the groups."""
    order = list(dict.fromkeys(run.group for run in runs))
    short = {run.group: short_label(run) for run in runs}
    listing = "; ".join(f"{i} = {short[g]}" for i, g in enumerate(order, start=1))
    chosen: list[str] = []
    rest = -1
    for entry in spec:
        text = str(entry).strip()
        if text == "*":
            rest = len(chosen)
            continue
        if text.isdigit():
            if not 1 <= int(text) <= len(order):
                raise ConfigError(f"compare: there is no group {text}; the groups are {listing}")
            chosen.append(order[int(text) - 1])
            continue
        exact = [g for g in order if text in (g, short[g])]
        matches = exact or [g for g in order if text in g or text in short[g]]
        if len(matches) != 1:
            what = "matches no group" if not matches else f"matches {len(matches)} groups"
            raise ConfigError(f"compare: {text!r} {what}; name a group by its number: {listing}")
        chosen.append(matches[0])
    if rest >= 0:
        chosen[rest:rest] = [g for g in order if g not in chosen]
    if len(chosen) == 1 or len(set(chosen)) != len(chosen):
        raise ConfigError(f"compare needs two or more different groups (baseline first); the groups are {listing}")
    return chosen


def analyse(runs: Sequence[str | Path], compare: Sequence[str | int] = (), metrics: Sequence[str] = ()) -> Report:
    """Load, group and summarise runs; resolve ``compare`` (default: :func:`default_compare`)."""
    loaded, notes = load_runs(runs)
    per_run = summarize(loaded)
    groups = group_summary(per_run)
    order = list(dict.fromkeys(run.group for run in loaded))
    labels = {g: f"[{i}] {short_label(next(r for r in loaded if r.group == g))}" for i, g in enumerate(order, 1)}
    present = sorted(set(per_run["metric"]), key=metric_sort_key)
    unknown = [m for m in metrics if m not in present]
    if unknown:
        raise ConfigError(f"metrics: no run logged {', '.join(unknown)}; logged: {', '.join(present)}")
    headline = with_pruned(list(metrics) or headline_metrics(present) or present[:4], present)
    chosen = resolve_compare(compare, loaded) if compare else default_compare(loaded)
    table = compare_groups(per_run, chosen[0], chosen[1:]) if chosen else None
    for group in order:
        seeds = [r.seed for r in loaded if r.group == group and r.seed is not None]
        repeated = sorted({s for s in seeds if seeds.count(s) > 1}, key=_seed_order)
        if repeated:
            notes.append(f"{labels[group]} has several runs of seed {', '.join(repeated)}: averaged as separate runs")
    notes += environment_notes(loaded)
    marks = run_marks(loaded)
    notes += [mark.line(labels) for mark in marks]
    items = {g: group_identity(next(r for r in loaded if r.group == g)) for g in order}
    return Report(
        loaded,
        per_run,
        groups,
        table,
        chosen[0] if chosen else None,
        headline,
        labels,
        items,
        notes=notes,
        marks=marks,
    )


# ---------------------------------------------------------------------------------------------------- documents
def _markdown(report: Report) -> str:
    parts = ["# sesa diversity report", "", report.intro(), ""]
    if report.notes:
        parts += ["## Notes", "", *(f"- {note}" for note in report.notes), ""]
    parts += [
        "## Headline",
        "",
        f"Final values: mean over seeds [95% interval]. {METHOD}{_marked_caption(report)}",
        "",
        markdown_table(report.headline_frame(), index=False),
        "",
    ]
    difference = report.difference_frame()
    if difference is not None:
        parts += [f"### {report.difference_title()}", "", markdown_table(difference, index=False), ""]
    equal = report.equal_compute_frame()
    if equal is not None:
        parts += [f"### {report.equal_compute_title()}", "", markdown_table(equal, index=False), ""]
    answer = report.answer()
    if answer is not None:
        parts += [f"**{answer}**", ""]
    parts += ["## Plots", ""]
    for name, path in report.plots.items():
        parts += [f"![{name}]({path.name})", "", _PLOT_CAPTIONS[name], ""]
    parts += [
        "## All metrics",
        "",
        "### Final values",
        "",
        _FINAL,
        "",
        markdown_table(wide_table(report.groups, "final", labels=report.labels)),
        "",
        "### Best values",
        "",
        _BEST,
        "",
        markdown_table(best_table(report.groups, labels=report.labels)),
        "",
        "## Runs",
        "",
        markdown_table(runs_table(report.runs, report.labels), index=False),
        "",
    ]
    return "\n".join(parts)


_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1280px; margin: 1.5em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0 1.2em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3em 0.7em; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
thead th { border-bottom: 2px solid #888; }
img { max-width: 100%; }
figure { margin: 0.8em 0 1.8em; }
figcaption, .note { color: #555; font-size: 0.9em; max-width: 1100px; }
.warn { color: #8a4b00; }
details { margin: 0.6em 0; }
summary { cursor: pointer; font-weight: 600; }
.scroll { overflow-x: auto; }
"""


def _html(report: Report) -> str:
    def table(frame: pd.DataFrame, index: bool = True) -> str:
        body: str = frame.to_html(index=index, border=0, escape=True, na_rep="")
        return "<div class='scroll'>" + body + "</div>"

    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>sesa diversity report</title>',
        f"<style>{_CSS}</style></head><body>",
        "<h1>sesa diversity report</h1>",
        f"<p>{html.escape(report.intro())}</p>",
    ]
    if report.notes:
        items = "".join(
            f"<li class='{'warn' if n.startswith('warning') else ''}'>{html.escape(n)}</li>" for n in report.notes
        )
        parts.append(f"<ul>{items}</ul>")
    caption = _marked_caption(report)
    parts += [
        "<h2>Headline</h2>",
        f"<p class='note'>{html.escape('Final values: mean over seeds [95% interval]. ' + METHOD + caption)}</p>",
        table(report.headline_frame(), index=False),
    ]
    difference = report.difference_frame()
    if difference is not None:
        parts += [f"<h3>{html.escape(report.difference_title())}</h3>", table(difference, index=False)]
    equal = report.equal_compute_frame()
    if equal is not None:
        parts += [f"<h3>{html.escape(report.equal_compute_title())}</h3>", table(equal, index=False)]
    answer = report.answer()
    if answer is not None:
        parts.append(f"<p><strong>{html.escape(answer)}</strong></p>")
    for name, path in report.plots.items():
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(
            f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(_PLOT_CAPTIONS[name])}</figcaption></figure>"
        )
    parts += [
        "<h2>All metrics</h2>",
        f"<details><summary>Final values of every metric</summary><p class='note'>{html.escape(_FINAL)}</p>",
        table(wide_table(report.groups, "final", labels=report.labels)),
        "</details>",
        f"<details><summary>Best values of every metric</summary><p class='note'>{html.escape(_BEST)}</p>",
        table(best_table(report.groups, labels=report.labels)),
        "</details>",
        "<details><summary>Runs</summary>",
        table(runs_table(report.runs, report.labels), index=False),
        "</details>",
        "</body></html>",
    ]
    return "\n".join(parts)


def _marked_caption(report: Report) -> str:
    if not report.marks:
        return ""
    exact = any(m.kind == "exact" for m in report.marks)
    why = (
        f" {EXACT_MARK}: its exact figures cover too little of its policy (the walk cut more than 0.05 of its mass, or"
        " under half of it is valid); no verdict rests on them."
        if exact
        else ""
    )
    return f" {MARK}: a run of the group is marked in the notes above.{why}"


def build_report(
    runs: Sequence[str | Path],
    out_dir: Path,
    compare: Sequence[str | int] = (),
    metrics: Sequence[str] = (),
) -> ReportFiles:
    """Compare runs and write a diversity report into ``out_dir`` (created if needed).

    ``runs`` lists run dirs (``metrics.jsonl``, or an eval run's ``metrics.json``) and multirun dirs (whose job
    subdirs are taken). Runs are grouped by their overrides minus the seed (:func:`sesa_cli.report.runs.assign_groups`)
    and every table and plot shows the mean over the seeds of a group with a 95% bootstrap interval. ``compare``
    names a baseline group and the groups to compare with it (:func:`resolve_compare`; default:
    :func:`default_compare`); ``metrics`` the headline metrics (default: :func:`sesa_cli.report.tables.headline_metrics`).
    Raises :class:`sesa_cli.config.ConfigError` (one line) for an empty list, a missing path, a dir without runs, runs
    of different tasks, or a ``compare``/``metrics`` entry that names nothing.
    """
    return write_report(analyse(runs, compare, metrics), out_dir)


def write_report(report: Report, out_dir: Path) -> ReportFiles:
    """Write the CSVs, the plots, report.md and report.html of an :func:`analyse` result into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = write_tables(report, out_dir)
    report.plots, skipped = draw_figures(report, out_dir)
    report.notes += [f"{name}.png not drawn: {reason}" for name, reason in skipped.items()]
    markdown_path = out_dir / "report.md"
    markdown_path.write_text(_markdown(report))
    html_path = out_dir / "report.html"
    html_path.write_text(_html(report))
    return ReportFiles(markdown=markdown_path, html=html_path, plots=report.plots, notes=report.notes, **files)


class TableFiles(TypedDict):
    """The CSVs of :func:`write_tables` (fields as in :class:`ReportFiles`)."""

    summary: Path
    groups: Path
    compare: Path | None


def write_tables(report: Report, out_dir: Path) -> TableFiles:
    """summary.csv, groups.csv and (when groups are compared) compare.csv."""
    paths = TableFiles(summary=out_dir / "summary.csv", groups=out_dir / "groups.csv", compare=None)
    report.per_run.to_csv(paths["summary"], index=False)
    report.groups.to_csv(paths["groups"], index=False)
    if report.compare is not None:
        paths["compare"] = out_dir / "compare.csv"
        report.compare.to_csv(paths["compare"], index=False)
    return paths


def draw_figures(report: Report, out_dir: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """The heatmap (tasks with exact policy metrics) and the curve plots; returns (written, skipped with reason)."""
    layout = Layout.of(report.runs)
    written: dict[str, Path] = {}
    heatmap = draw_heatmaps(pick_runs(layout.groups, list(layout.groups)), layout.colors, out_dir / "heatmap.png")
    if heatmap is not None:
        written["heatmap"] = heatmap
    plots, skipped = make_plots(report.runs, out_dir)
    return {**written, **plots}, skipped


def console_tables(report: Report) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of the tables ``sesa diversity-report`` prints, narrow enough for 80 columns: the
    groups by number, then per headline metric one row per group with its final mean and 95% interval, and the
    difference to the baseline where groups are compared."""
    numbered = {g: label.partition(" ")[0] for g, label in report.labels.items()}
    marked = report.marked_labels()
    lost = report.lost()
    out = [
        (
            "groups",
            ["#", "group", "seeds", "lost"],
            [
                [numbered[g], label.partition(" ")[2], str(_n(report, g)), str(lost[g][0])]
                for g, label in marked.items()
            ],
        )
    ]
    groups = report.groups.set_index(["group", "metric"])
    compare = report.compare.set_index(["group", "metric"]) if report.compare is not None else None
    for metric in report.headline:
        headers = ["#", "mean", "95% interval"]
        if compare is not None and report.baseline is not None:  # set together by analyse()
            headers += [f"− {numbered[report.baseline]}", "95% interval"]
        rows = []
        for group in report.labels:
            if (group, metric) not in groups.index:
                continue
            row = groups.loc[(group, metric)]
            cells = [numbered[group], *_split(format_interval(row["final_mean"], row["final_low"], row["final_high"]))]
            if compare is not None:
                if (group, metric) in compare.index:
                    d = compare.loc[(group, metric)]
                    cells += _split(format_interval(d["difference"], d["low"], d["high"], sign=True))
                else:
                    cells += ["", ""]
                    if group == report.baseline:
                        cells[-2] = "baseline"
            if cells[1] != "–" and not cells[2]:
                cells[2] = ONE_SEED
            if len(cells) > 3 and cells[3] not in ("", "–", "baseline") and not cells[4]:
                cells[4] = ONE_SEED
            rows.append(cells)
        out.append((f"{metric} (final)", headers, rows))
    return out


def _split(cell: str) -> list[str]:
    mean, _, rest = cell.partition(" ")
    return [mean, rest]


def _n(report: Report, group: str) -> int:
    return sum(run.group == group for run in report.runs)
