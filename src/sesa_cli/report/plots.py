"""PNG plots of a diversity report: curves over training steps (mean over seeds with a 95% bootstrap band) and
pass@k over k.

One colour per group, the same in every plot (and in the heatmaps, :mod:`sesa_cli.report.heatmap`). A panel
overlays a metric logged at every training step (solid: a ``rollout/`` statistic of what the sampler drew, or an
exact ``policy/`` metric) and its evaluation counterpart (dashed, markers: evaluation rows are sparse).

A revived run is drawn from its checkpoint on; the parent's history it copied (``revive/parent`` rows) is drawn
once, grey and dotted, unless the parent run is itself in the report (then it is a group of its own). When every run
is a revival and they start from different steps (``step=auto`` finds each seed's collapse at its own step), the x
axis counts steps since the revival, so the seeds of a group line up.

matplotlib is imported inside the functions that draw, so importing ``sesa_cli.report`` stays cheap. Figures are
built with ``matplotlib.figure.Figure`` and rendered by the Agg canvas, never through pyplot: no display is needed,
and a caller's pyplot state and backend (say, a notebook's) are left alone (matplotlib's "embedding in a web server"
advice).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sesa_cli.metric_keys import family
from sesa_cli.metric_keys import key as K
from sesa_cli.metrics import pass_at_k
from sesa_cli.report.marks import lost_reasons
from sesa_cli.report.runs import Run, short_label

COLLAPSE_FLAG = K("collapse/flag")
from sesa_cli.report.stats import CURVE_RESAMPLES, LEVEL, bootstrap_interval, mean_interval
from sesa_cli.report.tables import at_k_values

DPI = 100
# Inches of plotting area per panel: three panels and their margins come to ~1,240 px, what report.html shows at a
# 1280 px window without scaling the text down.
PANEL_SIZE = (3.3, 2.5)
# With fewer points than this a training curve also gets markers (a short run would otherwise hide its points).
_MARKER_BELOW = 25
_STYLES = {"train": "-", "eval": "--"}
# Rollout statistics of a small-batch RL run are noisy enough to turn several groups into spaghetti, so rollout
# curves get a centred rolling mean over ~4% of the run (each seed smoothed first, so the band stays the spread over
# seeds). Short runs (< _SMOOTH_FROM logged steps), exact policy metrics and evaluation curves are drawn raw; tables
# are always raw.
_SMOOTH_FROM = 50
PARENT_COLOR = "0.45"
BAND = f"line: mean over seeds; shaded: {LEVEL:.0%} bootstrap interval of the mean"


GROUP_COLORS = (
    *(f"C{i}" for i in range(10)),
    "black",
    "gold",
    "navy",
    "lime",
    "magenta",
    "teal",
    "maroon",
    "darkkhaki",
)
"""One colour per group in a figure: matplotlib's ten, then eight unlike them (a head to head has 13 groups; with the
ten alone group 11 took group 1's colour)."""


def smoothing_window(n_steps: int) -> int:
    """Odd rolling-mean window for training curves with ``n_steps`` logged steps (1 = no smoothing)."""
    return 1 if n_steps < _SMOOTH_FROM else (n_steps // 25) | 1


@dataclass(frozen=True)
class Panel:
    title: str
    ylabel: str
    metrics: tuple[str, ...]
    """Metrics drawn on this panel: per-step ones (``rollout/``, ``policy/``; solid) and/or ``eval/`` ones
    (dashed)."""
    probability: bool = False
    """Values in [0, 1]: the band is clipped to it."""


@dataclass(frozen=True)
class PlotSpec:
    name: str
    title: str
    panels: tuple[Panel, ...]
    optional: bool = False
    """Only some tasks log these metrics: when no run has them the plot is left out without a note."""
    requires: tuple[str, ...] = ()
    """Drawn only when some run logged one of these (the agent plot: episode lengths)."""


@dataclass
class Layout:
    """Who is drawn how: groups in order with their runs, colours and legend labels, and the x axis."""

    groups: dict[str, list[Run]]
    colors: dict[str, str]
    labels: dict[str, str]
    since_revival: bool
    parents: list[Run] = field(default_factory=list)
    """Revived runs whose copied parent history is drawn (one per parent run not itself in the report)."""

    @classmethod
    def of(cls, runs: Sequence[Run]) -> Layout:
        groups: dict[str, list[Run]] = {}
        for run in runs:
            groups.setdefault(run.group, []).append(run)
        palette = GROUP_COLORS
        colors = {g: palette[i % len(palette)] for i, g in enumerate(groups)}
        labels = {g: f"{short_label(members[0])} (n={len(members)})" for g, members in groups.items()}
        starts = {run.parent_step for run in runs}
        since_revival = None not in starts and len(starts) > 1
        present = {run.path.resolve() for run in runs}
        parents: dict[str, Run] = {}
        for run in runs:
            parent = run.info.get("parent_run")
            if run.parent_step is not None and parent and Path(parent).resolve() not in present:
                parents.setdefault(str(Path(parent).resolve()), run)
        return cls(groups, colors, labels, since_revival, list(parents.values()))

    @property
    def xlabel(self) -> str:
        return "steps since revival (checkpoint at 0)" if self.since_revival else "training step"

    def offset(self, run: Run) -> int:
        return (run.parent_step or 0) if self.since_revival else 0


def plot_specs(metrics: Sequence[str]) -> list[PlotSpec]:
    """The step-curve plots. Evaluation diversity is shown at the largest k logged (k = n: all samples)."""

    def largest_k(base: str) -> tuple[str, ...]:
        ks = at_k_values(metrics, base)
        return (f"{base}@{ks[-1]}",) if ks else ()

    policy_k = largest_k(family("policy/coverage@{k}"))
    return [
        PlotSpec(
            "policy",
            "The plain-prompt policy, measured exactly",
            (
                Panel("effective solutions", "exp(entropy of target mass)", (K("policy/effective_solutions"),)),
                Panel("mass on targets", "P(target | prompt)", (K("policy/target_mass"),), probability=True),
                Panel(
                    "coverage" + (f"@{policy_k[0].rpartition('@')[2]}" if policy_k else ""),
                    "expected targets hit / U",
                    policy_k,
                    probability=True,
                ),
            ),
            optional=True,
        ),
        PlotSpec(
            "agent",
            "Episodes",
            (
                Panel("success", "success rate", (K("rollout/success"), K("eval/success")), probability=True),
                Panel("episode length", "turns per episode", (K("rollout/turns"), K("eval/turns"))),
            ),
            optional=True,
            requires=(K("rollout/turns"), K("eval/turns")),
        ),
        PlotSpec(
            "sampling",
            "Success and token entropy of sampling",
            (
                Panel("success", "success rate", (K("rollout/success"), K("eval/success")), probability=True),
                Panel("token entropy", "mean token entropy (nats)", (K("rollout/entropy"), K("eval/entropy"))),
            ),
        ),
        PlotSpec(
            "diversity",
            "Diversity of what was sampled",
            (
                Panel(
                    "coverage",
                    "targets found / U",
                    (K("rollout/coverage"), *largest_k(family("eval/coverage@{k}"))),
                    True,
                ),
                Panel(
                    "distinct", "distinct solutions", (K("rollout/distinct"), *largest_k(family("eval/distinct@{k}")))
                ),
                Panel(
                    "distinct correct",
                    "distinct correct solutions",
                    (K("rollout/distinct_correct"), *largest_k(family("eval/distinct_correct@{k}"))),
                ),
            ),
        ),
    ]


def _curves(runs: Sequence[Run], metric: str, layout: Layout, window: int, inherited: bool = False) -> pd.DataFrame:
    """Columns = runs that logged ``metric``, index = x (union over runs), NaN where a run did not log it.

    A run's own rows, plus (revived runs) the checkpoint's row so the curve starts where the parent left off; with
    ``inherited`` the copied parent rows instead. Each column is smoothed over ``window`` steps first.
    """
    series = {}
    for run in runs:
        if metric not in run.metrics.columns:
            continue
        if inherited:
            frame = run.inherited
        else:
            frame = run.own
            start = run.parent_step
            if start is not None and start in run.metrics.index:
                frame = pd.concat([run.metrics.loc[[start]], frame])
        values = frame[metric].dropna() if metric in frame.columns else pd.Series(dtype=float)
        if values.empty:
            continue
        values = values.rolling(window, center=True, min_periods=1).mean() if window > 1 else values
        values.index = values.index - layout.offset(run)
        series[str(run.path)] = values[~values.index.duplicated(keep="last")]
    if not series:
        return pd.DataFrame()
    return pd.concat(series, axis=1).sort_index()


def _draw_band(
    ax: Any,
    frame: pd.DataFrame,
    color: str,
    style: str,
    marker: str | None,
    lw: float = 1.6,
    clip: tuple[float, float] = (-np.inf, np.inf),
    label: str | None = None,
) -> None:
    """Mean over the columns (seeds) as a line, the bootstrap interval of the mean as a band where at least two
    seeds have a value."""
    x = frame.index.to_numpy()
    mean, low, high = bootstrap_interval(frame.to_numpy().T, CURVE_RESAMPLES)
    ax.plot(x, mean, color=color, ls=style, lw=lw, marker=marker, ms=3.5, label=label)
    band = ~np.isnan(low)
    if band.any():
        ax.fill_between(x, np.clip(low, *clip), np.clip(high, *clip), where=band, color=color, alpha=0.18, lw=0)


def _draw_panel(ax: Any, panel: Panel, layout: Layout, window: int) -> set[str]:
    """Draw a panel's metrics for every group; returns the kinds drawn (``train`` / ``eval`` / ``parent``)."""
    drawn = set()
    clip = (0.0, 1.0) if panel.probability else (-np.inf, np.inf)
    for metric in panel.metrics:
        kind = "eval" if metric.startswith("eval/") else "train"
        smooth = window if metric.startswith("rollout/") else 1
        for group, members in layout.groups.items():
            frame = _curves(members, metric, layout, smooth)
            if frame.empty:
                continue
            few = kind == "eval" or len(frame) < _MARKER_BELOW
            _draw_band(ax, frame, layout.colors[group], _STYLES[kind], "o" if few else None, clip=clip)
            if metric in (K("rollout/entropy"), K("policy/effective_solutions")):
                _mark_collapse(ax, members, metric, layout, smooth)
            drawn.add(kind)
        parent = _curves(layout.parents, metric, layout, smooth, inherited=True) if "parent" not in drawn else None
        if parent is not None and not parent.empty:
            # one parent curve per panel (its first metric): two grey dotted curves would read as one zigzag
            _draw_band(ax, parent, PARENT_COLOR, ":", "o" if kind == "eval" else None, lw=1.5, clip=clip)
            drawn.add("parent")
    if layout.since_revival:
        ax.axvline(0, color=PARENT_COLOR, lw=0.8)
    ax.set_title(panel.title, fontsize=10)
    ax.xaxis.get_major_locator().set_params(integer=True)  # steps
    ax.set_xlabel(layout.xlabel)
    ax.set_ylabel(panel.ylabel)
    ax.grid(alpha=0.3)
    return drawn


def _mark_collapse(ax: Any, runs: Sequence[Run], metric: str, layout: Layout, window: int) -> None:
    """An ``x`` at the first step each run's collapse monitor fired (its own rows), on that run's smoothed curve."""
    for run in runs:
        own = run.own
        if COLLAPSE_FLAG not in own.columns or metric not in own.columns:
            continue
        flagged = own.index[own[COLLAPSE_FLAG].fillna(0) > 0]
        values = own[metric].dropna()
        values = values.rolling(window, center=True, min_periods=1).mean() if window > 1 else values
        if len(flagged) and not values.empty:
            step = flagged[0]
            y = float(np.interp(step, values.index.to_numpy(), values.to_numpy()))
            ax.plot([step - layout.offset(run)], [y], marker="x", color=layout.colors[run.group], ms=8, mew=2)


def figure(
    ncols: int, n_legend: int, legend_chars: int, caption: str, panel_size: tuple[float, float] = PANEL_SIZE
) -> tuple[Any, list[Any], int, str]:
    """A one-row figure with fixed-size panels and room for a legend below.

    Returns (figure, axes, legend columns, the caption wrapped to the figure width).

    The layout is computed by hand in inches: matplotlib's constrained layout looks no better here and doubles
    the drawing time, and ``sesa diversity-report`` should finish in about a second.
    """
    width, height = panel_size
    left, right, gap_w, xlabel = 0.75, 0.3, 0.75, 0.55
    top = 0.65 if ncols > 1 else 0.45  # room for the panel titles, or only the figure title
    fig_w = left + ncols * width + (ncols - 1) * gap_w + right
    entry_w = 0.7 + 0.075 * legend_chars
    legend_cols = max(1, min(n_legend, int((fig_w - 0.4) // entry_w)))
    caption = "\n".join(textwrap.wrap(caption, width=int((fig_w - 0.4) / 0.065)))  # ~0.065 in per char at 8.5 pt
    legend_h = 0.25 + 0.16 * (caption.count("\n") + 1) + 0.25 * -(-n_legend // legend_cols)
    bottom = xlabel + legend_h
    fig_h = top + height + bottom
    from matplotlib.figure import Figure

    fig = Figure(figsize=(fig_w, fig_h))
    axes = fig.subplots(1, ncols, squeeze=False)
    fig.subplots_adjust(
        left=left / fig_w, right=1 - right / fig_w, bottom=bottom / fig_h, top=1 - top / fig_h, wspace=gap_w / width
    )
    return fig, list(axes.flat), legend_cols, caption


def _legend(fig: Any, layout: Layout, kinds: set[str], ncol: int, caption: str, eval_note: str = "") -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=layout.colors[g], lw=2.5) for g in layout.groups]
    labels = list(layout.labels.values())
    if "parent" in kinds:
        handles.append(Line2D([], [], color=PARENT_COLOR, ls=":", lw=1.6))
        labels.append(f"parent runs before revival (n={len(layout.parents)})")
    if {"train", "eval"} <= kinds:  # only explain line styles when both appear
        handles += [Line2D([], [], color="0.3", ls=_STYLES[k], lw=1.6) for k in ("train", "eval")]
        labels += ["during training", "evaluation" + eval_note]
    fig.legend(
        handles,
        labels,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.08 / fig.get_figheight()),
        ncol=ncol,
        fontsize=10,
        frameon=False,
        title=caption,
        title_fontsize=9,
    )


def _size(ncols: int) -> tuple[float, float]:
    """Panel size: one or two panels get wider ones (the figure, and its legend, would be cramped)."""
    return {1: (6.0, 2.8), 2: (4.9, 2.6)}.get(ncols, PANEL_SIZE)


def _eval_note(panels: Sequence[Panel]) -> str:
    """``" (k=64 samples)"`` when the panels' evaluation curves are @k metrics of one k."""
    ks = {m.rpartition("@")[2] for p in panels for m in p.metrics if m.startswith("eval/") and "@" in m}
    return f" (k={ks.pop()} samples)" if len(ks) == 1 else ""


def make_plots(runs: Sequence[Run], out_dir: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Write ``policy.png`` (tasks with exact policy metrics), ``agent.png`` (agent tasks), ``sampling.png``
    (success and token entropy), ``diversity.png``, ``tradeoff.png`` (exact policy metrics, two groups or more) and
    ``pass_at_k.png`` into ``out_dir``.

    Returns (written plots by name, skipped plots by name → reason). A plot is skipped when no run logged any of
    its metrics; a panel is left out when no run logged its metrics.
    """
    layout = Layout.of(runs)
    longest = max(len(label) for label in layout.labels.values())
    metrics = sorted({m for run in runs for m in run.metrics.columns})
    has_collapse = any(
        COLLAPSE_FLAG in run.own.columns and (run.own[COLLAPSE_FLAG].fillna(0) > 0).any() for run in runs
    )
    window = smoothing_window(max(len(run.metrics) for run in runs))
    smoothed = f"; rollout curves: rolling mean over {window} steps" if window > 1 else ""

    written: dict[str, Path] = {}
    skipped: dict[str, str] = {}
    for spec in plot_specs(metrics):
        panels = [p for p in spec.panels if any(m in metrics for m in p.metrics)]
        if spec.name == "sampling" and "agent" in written:
            panels = [p for p in panels if p.title != "success"]  # the agent plot has it
        if spec.requires and not any(m in metrics for m in spec.requires):
            continue
        if not panels and spec.optional:
            continue
        if not panels:
            wanted = sorted({m for p in spec.panels for m in p.metrics})
            skipped[spec.name] = f"no run logged {', '.join(wanted)}"
            continue
        has_rollout = any(m.startswith("rollout/") and m in metrics for p in panels for m in p.metrics)
        caption = BAND + (smoothed if has_rollout else "")
        if spec.name in ("sampling", "policy") and has_collapse:
            caption += "; x: first collapse flag of a run"
        fig, axes, ncol, caption = figure(len(panels), len(layout.groups) + 3, longest, caption, _size(len(panels)))
        kinds: set[str] = set()
        for ax, panel in zip(axes, panels, strict=True):
            kinds |= _draw_panel(ax, panel, layout, window)
        if len(panels) == 1:  # the figure title says it all
            axes[0].set_title("")
        fig.suptitle(spec.title)
        _legend(fig, layout, kinds, ncol, caption, _eval_note(panels))
        written[spec.name] = out_dir / f"{spec.name}.png"
        fig.savefig(written[spec.name], dpi=DPI)

    tradeoff = _tradeoff(layout, longest, out_dir)
    if tradeoff is not None:
        written["tradeoff"] = tradeoff
    curves = pass_at_k_finals(layout)
    if curves is None:
        skipped["pass_at_k"] = "no run logged eval/pass@k"
        return written, skipped
    ks = sorted({k for frame in curves.values() for k in frame.index})
    fig, axes, ncol, caption = figure(1, len(layout.groups), longest, BAND, _size(1))
    ax = axes[0]
    every = all(len(frame.index) == frame.index.max() for frame in curves.values())
    for group, frame in curves.items():
        if frame.notna().any().any():
            marker = "" if every else "o"
            _draw_band(ax, frame, layout.colors[group], "-", marker, clip=(0.0, 1.0))  # pass@k is a probability
    ax.set_xscale("log", base=2)
    ticks = [k for k in ks if k & (k - 1) == 0 or k == ks[-1]]
    ax.set_xticks(ticks, [str(k) for k in ticks])
    ax.minorticks_off()
    ax.set_xlabel("k (samples per prompt)")
    ax.set_ylabel("pass@k")
    ax.grid(alpha=0.3)
    fig.suptitle(
        "pass@k of the final evaluation" + (", every k (unbiased, from each instance's counts)" if every else "")
    )
    _legend(fig, layout, {"eval"}, ncol, caption)
    written["pass_at_k"] = out_dir / "pass_at_k.png"
    fig.savefig(written["pass_at_k"], dpi=DPI)
    return written, skipped


TRADEOFF = (K("policy/effective_solutions"), K("policy/target_mass"))
"""The axes of ``tradeoff.png``: how many targets the exact policy's success mass is spread over, and that mass."""


def _tradeoff(layout: Layout, longest: int, out_dir: Path) -> Path | None:
    """``tradeoff.png``: one point per group at its final exact effective solutions and target mass (mean over seeds,
    with the 95% bootstrap interval of each as error bars), numbered as the report's tables number the groups; None
    (nothing written) for fewer than two groups or runs without both metrics."""
    points = {}
    lost: dict[str, int] = {}
    for group, members in layout.groups.items():
        finals = [[run.own[m].dropna().iloc[-1] for m in TRADEOFF] for run in members if _logged(run, TRADEOFF)]
        if finals:
            points[group] = [mean_interval([f[i] for f in finals]) for i in range(len(TRADEOFF))]
            lost[group] = sum(bool(lost_reasons(run)) for run in members)
    if len(points) < 2:
        return None
    fig, axes, ncol, caption = figure(
        1,
        len(layout.groups),
        longest,
        f"point: mean over seeds; bars: {LEVEL:.0%} bootstrap interval of each mean; [n]: the group's number in the tables;"
        " hollow: the group lost runs (ended broken; their values are in the mean)",
        _size(1),
    )
    ax = axes[0]
    for number, (group, (x, y)) in enumerate(points.items(), start=1):
        color = layout.colors[group]
        xerr = [[x[0] - x[1]], [x[2] - x[0]]] if not np.isnan(x[1]) else None
        yerr = [[y[0] - y[1]], [y[2] - y[0]]] if not np.isnan(y[1]) else None
        face = "none" if lost[group] else color
        ax.errorbar([x[0]], [y[0]], xerr=xerr, yerr=yerr, color=color, mfc=face, marker="o", ms=5, capsize=2, lw=1.2)
        text = f"[{number}]" + (f" {lost[group]} lost" if lost[group] else "")
        ax.annotate(text, (x[0], y[0]), textcoords="offset points", xytext=(4, 4), fontsize=8, color=color)
    ax.set_xlabel("effective solutions (exact, final)")
    ax.set_ylabel("target mass (exact, final)")
    ax.grid(alpha=0.3)
    fig.suptitle("Success against diversity of the plain-prompt policy")
    _legend(fig, layout, set(), ncol, caption)
    path = out_dir / "tradeoff.png"
    fig.savefig(path, dpi=DPI)
    return path


def pass_at_k_finals(layout: Layout) -> dict[str, pd.DataFrame] | None:
    """Per group, the final evaluation's pass@k of each run (a column per run, a row per k): at every k from 1 to
    the fewest samples an instance had, from the per-instance success counts (eval_counts.jsonl, the unbiased
    estimator of :func:`sesa_cli.metrics.pass_at_k` averaged over instances) where every run of the report wrote
    them, else at the k its evaluation rows logged (1, 2, 4, ..., n). None when no run has either."""
    runs = [run for members in layout.groups.values() for run in members]
    counts = {str(run.path): run.final_counts for run in runs}
    if all(c is not None for c in counts.values()):
        out = {}
        for group, members in layout.groups.items():
            finals = {}
            for run in members:
                pair = counts[str(run.path)]
                assert pair is not None  # every run has counts on this branch
                samples, correct = pair
                top = min(samples)
                finals[str(run.path)] = pd.Series(
                    [np.mean([pass_at_k(n, c, k) for n, c in zip(samples, correct, strict=True)])
                     for k in range(1, top + 1)], index=range(1, top + 1))  # fmt: skip
            out[group] = pd.DataFrame(finals)
        return out
    metrics = sorted({m for run in runs for m in run.metrics.columns})
    ks = at_k_values(metrics, family("eval/pass@{k}"))
    if not ks:
        return None
    out = {}
    for group, members in layout.groups.items():
        finals = {}
        for run in members:
            # Final value per k: the last own step that logged it (the same "final" as in summary.csv).
            own = run.own
            columns = [K("eval/pass@{k}", k=k) for k in ks if K("eval/pass@{k}", k=k) in own.columns]
            last = own[columns].apply(lambda s: s.dropna().iloc[-1] if s.notna().any() else np.nan)
            finals[str(run.path)] = pd.Series(last.to_numpy(), index=[int(c.rpartition("@")[2]) for c in columns])
        out[group] = pd.DataFrame(finals).reindex(ks)
    return out


def _logged(run: Run, metrics: Sequence[str]) -> bool:
    return all(m in run.own.columns and run.own[m].notna().any() for m in metrics)
