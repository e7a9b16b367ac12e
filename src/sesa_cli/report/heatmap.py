"""Where the policy's mass goes: the exact probability of each target solution over training, as a heatmap.

Drawn from ``policy_probs.jsonl`` (written at every evaluation by tasks that can enumerate their solutions; one line
per evaluation: per instance, the targets and the probability of every target and of every other solution with
p >= 0.001). Rows are the targets of the first instance, ordered by their final probability, plus one row for the
mass on everything else (1 - the targets' total: other valid answers and invalid ones); columns are the evaluation
steps. A collapsed policy is one bright row; a policy that keeps several solutions is several.

One panel per group (every group of the report, three to a row), for one run each: the lowest seed all panels share,
so the panels show the same targets (the seed picks them) with one colour scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sesa_cli.report.runs import Run, short_label
from sesa_cli.runs import read_metrics

if TYPE_CHECKING:
    from matplotlib.collections import QuadMesh

POLICY_PROBS = "policy_probs.jsonl"
FLOOR = 1e-3
"""Bottom of the log colour scale: policy_probs.jsonl keeps non-targets only above it."""
ELSEWHERE = "everything else"
PANELS_PER_ROW = 3
"""Panels side by side before the figure starts another row (every group gets its panel)."""
CAPTION = (
    "π(answer | plain prompt) of each target at each evaluation, exact (log colour scale, {floor} and below darkest); "
    f"last row: the mass on {ELSEWHERE} (non-target and invalid answers). Targets ordered by their final "
    "probability; dashed line: the checkpoint a revived run started from."
)


@dataclass
class Probs:
    """One run's target probabilities over its evaluations (first instance)."""

    run: Run
    steps: np.ndarray
    """(E,) evaluation steps, increasing."""
    targets: list[str]
    values: np.ndarray
    """(len(targets) + 1, E): each target's probability, then the mass elsewhere."""


def load_probs(run: Run) -> Probs | None:
    """The run's target probabilities from its policy_probs.jsonl; None when it has none (or no targets)."""
    path = run.path / POLICY_PROBS
    if not path.is_file():
        return None
    by_step: dict[int, dict[str, float]] = {}
    targets: list[str] = []
    for record in read_metrics(path):
        instances = record.get("instances")
        if not isinstance(instances, list) or not instances or not isinstance(instances[0], dict):
            continue
        first = instances[0]
        probs, keys = first.get("probs"), first.get("targets")
        if not isinstance(probs, dict) or not isinstance(keys, list) or not isinstance(record.get("step"), int):
            continue
        targets = targets or [str(k) for k in keys]
        by_step[record["step"]] = {str(k): float(v) for k, v in probs.items() if isinstance(v, (int, float))}
    if not by_step or not targets:
        return None
    steps = np.array(sorted(by_step))
    values = np.array([[by_step[s].get(t, 0.0) for s in steps] for t in targets])
    elsewhere = np.clip(1.0 - values.sum(axis=0), 0.0, 1.0)
    return Probs(run, steps, targets, np.vstack([values, elsewhere]))


def pick_runs(groups: dict[str, list[Run]], names: Sequence[str]) -> list[Run]:
    """One run per named group: the lowest seed they all share (else each group's lowest seed), among runs that
    wrote policy_probs.jsonl."""
    members = {g: [r for r in groups[g] if (r.path / POLICY_PROBS).is_file()] for g in names}
    members = {g: runs for g, runs in members.items() if runs}
    if not members:
        return []

    def seed_key(run: Run) -> tuple[int, str]:
        seed = run.seed or ""
        return (int(seed), "") if seed.lstrip("-").isdigit() else (1 << 30, seed)

    common = set.intersection(*({r.seed for r in runs} for runs in members.values()))
    chosen = []
    for runs in members.values():
        pool = [r for r in runs if r.seed in common] or runs
        chosen.append(min(pool, key=seed_key))
    return chosen


def draw_heatmaps(runs: Sequence[Run], colors: dict[str, str], path: Path) -> Path | None:
    """Write the heatmap figure for ``runs`` (one panel each, :data:`PANELS_PER_ROW` to a row) to ``path``; None if
    none has data."""
    loaded = [p for p in (load_probs(run) for run in runs) if p is not None]
    if not loaded:
        return None
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    shared = all(p.targets == loaded[0].targets for p in loaded)
    order = _order(loaded) if shared else None
    cols = min(len(loaded), PANELS_PER_ROW)
    n_rows = -(-len(loaded) // cols)
    label_w, panel_w, gap, cbar_w, row_gap = 1.45, 4.9 if len(loaded) > 1 else 7.5, 0.3, 1.05, 0.8
    plot_h = 0.17 * (len(loaded[0].targets) + 1)
    top, bottom = 0.75, 0.55
    step_w = panel_w + gap + (0 if shared else label_w)
    fig_w = label_w + cols * step_w - gap - (0 if shared else label_w) + cbar_w
    fig_h = top + n_rows * plot_h + (n_rows - 1) * row_gap + bottom
    fig = Figure(figsize=(fig_w, fig_h))
    norm = LogNorm(vmin=FLOOR, vmax=1.0)
    for i, probs in enumerate(loaded):
        row, col = divmod(i, cols)
        rows = order if order is not None else _order([probs])
        x = label_w + col * step_w
        y = bottom + (n_rows - 1 - row) * (plot_h + row_gap)
        ax = fig.add_axes((x / fig_w, y / fig_h, panel_w / fig_w, plot_h / fig_h))
        image = _panel(ax, probs, rows, norm, show_labels=col == 0 or not shared, color=colors[probs.run.group])
    height = n_rows * plot_h + (n_rows - 1) * row_gap
    cax = fig.add_axes(((fig_w - cbar_w + 0.15) / fig_w, bottom / fig_h, 0.15 / fig_w, height / fig_h))
    fig.colorbar(image, cax=cax, label="probability")
    seeds = sorted({p.run.seed or "?" for p in loaded})
    fig.suptitle(
        f"Where the policy's mass goes: each target's probability (seed {', '.join(seeds)})", y=1 - 0.25 / fig_h
    )
    fig.savefig(path, dpi=100)
    return path


def _order(loaded: Sequence[Probs]) -> list[int]:
    """Target rows by final probability summed over the panels (descending), the 'elsewhere' row last."""
    final = sum(p.values[:-1, -1] for p in loaded)
    return [*np.argsort(-np.asarray(final), kind="stable").tolist(), len(loaded[0].targets)]


def _panel(ax: Any, probs: Probs, rows: list[int], norm: Any, show_labels: bool, color: str) -> QuadMesh:
    steps = probs.steps.astype(float)
    if len(steps) > 1:
        mids = (steps[1:] + steps[:-1]) / 2
        edges = np.concatenate([[steps[0] - (mids[0] - steps[0])], mids, [steps[-1] + (steps[-1] - mids[-1])]])
    else:
        edges = np.array([steps[0] - 0.5, steps[0] + 0.5])
    values = np.clip(probs.values[rows], FLOOR, 1.0)
    image: QuadMesh = ax.pcolormesh(edges, np.arange(len(rows) + 1), values, norm=norm, cmap="viridis", shading="flat")
    ax.set_ylim(len(rows), 0)
    ax.axhline(len(rows) - 1, color="white", lw=1.5)
    labels = [probs.targets[r] if r < len(probs.targets) else ELSEWHERE for r in rows]
    ax.set_yticks(np.arange(len(rows)) + 0.5, labels if show_labels else [], fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel("training step (evaluations)")
    start = probs.run.parent_step
    if start is not None:
        ax.axvline(start, color="white", ls="--", lw=1.2)
    ax.set_title(f"{short_label(probs.run)} · seed {probs.run.seed or '?'}", fontsize=10, color=color)
    return image
