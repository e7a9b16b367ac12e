"""PNG plots of a diversity report: curves over training steps (mean over seeds, ±1 std band) and pass@k over k.

One colour per group, the same in every plot. A panel overlays a metric logged at every training step (solid: a
``rollout/`` statistic of what the sampler drew, or an exact ``policy/`` metric) and its evaluation counterpart
(dashed, markers: evaluation rows are sparse).

matplotlib is imported inside :func:`make_plots`, so importing ``sesa_cli.report`` stays cheap. Figures are built
with ``matplotlib.figure.Figure`` and rendered by the Agg canvas, never through pyplot: no display is needed, and a
caller's pyplot state and backend (say, a notebook's) are left alone (matplotlib's "embedding in a web server"
advice).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sesa_cli.report.runs import Run
from sesa_cli.report.tables import at_k_values

DPI = 100
PANEL_SIZE = (4.4, 2.9)  # inches of plotting area per panel
# With fewer points than this a training curve also gets markers (a short run would otherwise hide its points).
_MARKER_BELOW = 25
_STYLES = {"train": "-", "eval": "--"}
# Rollout statistics of a small-batch RL run are noisy enough to turn several groups into spaghetti, so rollout
# curves get a centred rolling mean over ~4% of the run (each seed smoothed first, so the band stays the spread over
# seeds). Short runs (< _SMOOTH_FROM logged steps), exact policy metrics and evaluation curves are drawn raw; tables
# are always raw.
_SMOOTH_FROM = 50


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


@dataclass(frozen=True)
class PlotSpec:
    name: str
    title: str
    panels: tuple[Panel, ...]
    optional: bool = False
    """Only some tasks log these metrics: when no run has them the plot is left out without a note."""


def plot_specs(metrics: Sequence[str]) -> list[PlotSpec]:
    """The step-curve plots. Evaluation diversity is shown at the largest k logged (k = n: all samples)."""

    def largest_k(base: str) -> tuple[str, ...]:
        ks = at_k_values(metrics, base)
        return (f"{base}@{ks[-1]}",) if ks else ()

    return [
        PlotSpec(
            "policy",
            "Exact plain-prompt policy",
            (
                Panel("success probability", "P(target)", ("policy/target_mass",)),
                Panel("effective correct solutions", "exp(entropy over targets)", ("policy/effective_solutions",)),
                Panel("coverage", "expected targets hit / U", largest_k("policy/coverage")),
            ),
            optional=True,
        ),
        PlotSpec("success", "Success rate", (Panel("success", "success rate", ("rollout/success", "eval/success")),)),
        PlotSpec(
            "diversity",
            "Diversity",
            (
                Panel("coverage", "targets found / U", ("rollout/coverage", *largest_k("eval/coverage"))),
                Panel("distinct", "distinct solutions", ("rollout/distinct", *largest_k("eval/distinct"))),
                Panel(
                    "distinct correct",
                    "distinct correct solutions",
                    ("rollout/distinct_correct", *largest_k("eval/distinct_correct")),
                ),
            ),
        ),
        PlotSpec(
            "entropy",
            "Token entropy of sampling",
            (Panel("entropy", "mean token entropy", ("rollout/entropy", "eval/entropy")),),
        ),
    ]


def _group_frame(runs: Sequence[Run], metric: str) -> pd.DataFrame:
    """Columns = runs that logged ``metric``, index = step (union over runs), NaN where a run did not log it."""
    series = {str(run.path): run.metrics[metric].dropna() for run in runs if metric in run.metrics.columns}
    series = {k: s for k, s in series.items() if not s.empty}
    if not series:
        return pd.DataFrame()
    return pd.concat(series, axis=1).sort_index()


def _draw_band(
    ax: Any,
    x: np.ndarray,
    frame: pd.DataFrame,
    color: str,
    style: str,
    marker: str | None,
    clip: tuple[float, float] = (-np.inf, np.inf),
) -> None:
    """Mean over the columns (seeds) as a line, ±1 sample std as a band where at least two seeds have a value."""
    mean = frame.mean(axis=1).to_numpy()
    ax.plot(x, mean, color=color, ls=style, lw=1.6, marker=marker, ms=3.5)
    band = frame.count(axis=1).to_numpy() >= 2
    if band.any():
        std = frame.std(axis=1, ddof=1).to_numpy()
        low, high = np.clip(mean - std, *clip), np.clip(mean + std, *clip)
        ax.fill_between(x, low, high, where=band, color=color, alpha=0.18, lw=0)


def _smooth(frame: pd.DataFrame, window: int) -> pd.DataFrame:
    return frame if window <= 1 else frame.rolling(window, center=True, min_periods=1).mean()


def _draw_panel(ax: Any, panel: Panel, groups: dict[str, list[Run]], colors: dict[str, str], window: int) -> set[str]:
    """Draw a panel's metrics for every group; returns the kinds drawn (``train`` / ``eval``) for the legend."""
    drawn = set()
    for metric in panel.metrics:
        kind = "eval" if metric.startswith("eval/") else "train"
        for group, members in groups.items():
            frame = _group_frame(members, metric)
            if frame.empty:
                continue
            smooth = window if metric.startswith("rollout/") else 1
            frame = _smooth(frame, smooth)
            few = kind == "eval" or len(frame) < _MARKER_BELOW
            _draw_band(ax, frame.index.to_numpy(), frame, colors[group], _STYLES[kind], "o" if few else None)
            if metric in ("rollout/entropy", "policy/effective_solutions"):
                _mark_collapse(ax, members, metric, colors[group], smooth)
            drawn.add(kind)
    evals = [m for m in panel.metrics if m.startswith("eval/") and "@" in m]
    ax.set_title(panel.title + (f" (eval at k={evals[0].rpartition('@')[2]})" if evals else ""), fontsize=10)
    ax.set_xlabel("training step")
    ax.set_ylabel(panel.ylabel)
    ax.grid(alpha=0.3)
    return drawn


def _mark_collapse(ax: Any, runs: Sequence[Run], metric: str, color: str, window: int) -> None:
    """An ``x`` at the first step each run's collapse monitor fired, on that run's own (smoothed) curve."""
    for run in runs:
        if "collapse/flag" not in run.metrics.columns or metric not in run.metrics.columns:
            continue
        flagged = run.metrics.index[run.metrics["collapse/flag"].fillna(0) > 0]
        values = _smooth(run.metrics[[metric]].dropna(), window)[metric]
        if len(flagged) and not values.empty:
            step = flagged[0]
            y = float(np.interp(step, values.index.to_numpy(), values.to_numpy()))
            ax.plot([step], [y], marker="x", color=color, ms=8, mew=2, ls="none")


def _figure(ncols: int, n_legend: int, legend_chars: int, caption: str) -> tuple[Any, Any, int, str]:
    """A one-row figure with fixed-size panels and room for a legend below.

    Returns (figure, axes, legend columns, the caption wrapped to the figure width).

    The layout is computed by hand in inches: matplotlib's constrained layout looks no better here and doubles
    the drawing time, and ``sesa diversity-report`` should finish in about a second.
    """
    width, height = PANEL_SIZE
    left, right, gap_w, xlabel = 0.75, 0.3, 0.85, 0.55
    top = 0.65 if ncols > 1 else 0.45  # room for the panel titles, or only the figure title
    fig_w = left + ncols * width + (ncols - 1) * gap_w + right
    entry_w = 0.7 + 0.075 * legend_chars
    legend_cols = max(1, min(n_legend, int((fig_w - 0.4) // entry_w)))
    caption = "\n".join(textwrap.wrap(caption, width=int((fig_w - 0.4) / 0.06)))  # ~0.06 in per char at 8 pt
    legend_h = 0.2 + 0.15 * (caption.count("\n") + 1) + 0.24 * -(-n_legend // legend_cols)
    bottom = xlabel + legend_h
    fig_h = top + height + bottom
    from matplotlib.figure import Figure

    fig = Figure(figsize=(fig_w, fig_h))
    axes = fig.subplots(1, ncols, squeeze=False)
    fig.subplots_adjust(
        left=left / fig_w, right=1 - right / fig_w, bottom=bottom / fig_h, top=1 - top / fig_h, wspace=gap_w / width
    )
    return fig, list(axes.flat), legend_cols, caption


def _legend(fig: Any, colors: dict[str, str], kinds: set[str], ncol: int, caption: str) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=color, lw=2) for color in colors.values()]
    labels = list(colors)
    if len(kinds) > 1:  # only explain line styles when both appear
        handles += [Line2D([], [], color="0.3", ls=_STYLES[k], lw=1.6) for k in ("train", "eval")]
        labels += ["train", "eval"]
    fig.legend(
        handles,
        labels,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.08 / fig.get_figheight()),
        ncol=ncol,
        fontsize=9,
        frameon=False,
        title=caption,
        title_fontsize=8,
    )


def make_plots(runs: Sequence[Run], out_dir: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Write ``policy.png`` (tasks with exact policy metrics), ``success.png``, ``diversity.png``, ``entropy.png``
    and ``pass_at_k.png`` into ``out_dir``.

    Returns (written plots by name, skipped plots by name → reason). A plot is skipped when no run logged any of
    its metrics; a panel is left out when no run logged its metrics.
    """
    by_group: dict[str, list[Run]] = {}
    for run in runs:
        by_group.setdefault(run.group, []).append(run)
    groups = {f"{g} (n={len(members)})": members for g, members in by_group.items()}
    colors = {label: f"C{i % 10}" for i, label in enumerate(groups)}
    longest = max(len(label) for label in groups)
    metrics = sorted({m for run in runs for m in run.metrics.columns})
    has_collapse = any(
        "collapse/flag" in run.metrics.columns and (run.metrics["collapse/flag"].fillna(0) > 0).any() for run in runs
    )
    band = "line: mean over seeds; shaded: ±1 std over seeds"
    window = smoothing_window(max(len(run.metrics) for run in runs))
    smoothed = f"; rollout curves: rolling mean over {window} steps" if window > 1 else ""

    written: dict[str, Path] = {}
    skipped: dict[str, str] = {}
    for spec in plot_specs(metrics):
        panels = [p for p in spec.panels if any(m in metrics for m in p.metrics)]
        if not panels and spec.optional:
            continue
        if not panels:
            wanted = sorted({m for p in spec.panels for m in p.metrics})
            skipped[spec.name] = f"no run logged {', '.join(wanted)}"
            continue
        has_rollout = any(m.startswith("rollout/") and m in metrics for p in panels for m in p.metrics)
        caption = band + (smoothed if has_rollout else "")
        if spec.name in ("entropy", "policy") and has_collapse:
            caption += "; x: first collapse flag of a run"
        fig, axes, ncol, caption = _figure(len(panels), len(groups) + 2, longest, caption)
        kinds: set[str] = set()
        for ax, panel in zip(axes, panels, strict=True):
            kinds |= _draw_panel(ax, panel, groups, colors, window)
        if len(panels) == 1:  # the figure title says it all
            axes[0].set_title("")
        fig.suptitle(spec.title)
        _legend(fig, colors, kinds, ncol, caption)
        written[spec.name] = out_dir / f"{spec.name}.png"
        fig.savefig(written[spec.name], dpi=DPI)

    ks = at_k_values(metrics, "eval/pass")
    if not ks:
        skipped["pass_at_k"] = "no run logged eval/pass@k"
        return written, skipped
    fig, axes, ncol, caption = _figure(1, len(groups), longest, band)
    ax = axes[0]
    for label, members in groups.items():
        finals = {}
        for run in members:
            # Final value per k: the last step that logged it (the same "final" as in summary.csv).
            columns = [f"eval/pass@{k}" for k in ks if f"eval/pass@{k}" in run.metrics.columns]
            last = run.metrics[columns].apply(lambda s: s.dropna().iloc[-1] if s.notna().any() else np.nan)
            finals[str(run.path)] = pd.Series(last.to_numpy(), index=[int(c.rpartition("@")[2]) for c in columns])
        frame = pd.DataFrame(finals).reindex(ks)
        if frame.notna().any().any():
            _draw_band(ax, np.asarray(ks), frame, colors[label], "-", "o", clip=(0.0, 1.0))  # pass@k is a probability
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("k (samples per prompt)")
    ax.set_ylabel("pass@k")
    ax.grid(alpha=0.3)
    fig.suptitle("pass@k of the final evaluation")
    _legend(fig, colors, {"eval"}, ncol, caption)
    written["pass_at_k"] = out_dir / "pass_at_k.png"
    fig.savefig(written["pass_at_k"], dpi=DPI)
    return written, skipped
