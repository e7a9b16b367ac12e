"""Assemble a diversity report: summary.csv, the PNG plots, report.md and a self-contained report.html."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

import pandas as pd

from sesa_cli.report.plots import make_plots
from sesa_cli.report.runs import Run, load_runs
from sesa_cli.report.tables import markdown_table, summarize, wide_table

_PLOT_CAPTIONS = {
    "policy": "The plain-prompt policy, exactly (every solution scored): success probability, effective number of "
    "correct solutions, expected coverage of the targets by k samples.",
    "success": "Success rate over training steps (what the sampler drew, and evaluation).",
    "diversity": "Diversity over training steps (what the sampler drew, and evaluation): coverage of the target set, "
    "distinct and distinct-correct solutions.",
    "entropy": "Mean token entropy of the sampling distribution over training steps (rollouts and evaluation).",
    "pass_at_k": "pass@k of the final evaluation against k (log2 axis).",
}
_METHOD = (
    "Groups are the overrides that differ between runs (seed excluded); values are mean ± std over seeds "
    "(sample std; none for a single seed)."
)
_FINAL = "Value at the last step that logged the metric."
_BEST = "Maximum over steps (for every metric, including entropy and step time)."


class ReportFiles(TypedDict):
    """What :func:`build_report` wrote (all paths inside ``out_dir``)."""

    summary: Path
    """summary.csv: one row per group × metric (group, metric, final_mean, final_std, best_mean, best_std, n_seeds)."""
    markdown: Path
    """report.md, referencing the PNGs next to it."""
    html: Path
    """report.html, self-contained (PNGs embedded as data URIs)."""
    plots: dict[str, Path]
    """Written PNGs by name (``policy``, ``success``, ``diversity``, ``entropy``, ``pass_at_k``); skipped plots are
    absent."""
    notes: list[str]
    """Things the reader should know (skipped job dirs, skipped plots), also listed in the report."""


def runs_table(runs: Sequence[Run]) -> pd.DataFrame:
    """One row per run: its group, seed, command, how far it got, and its parent checkpoint (revived runs)."""
    rows = []
    for run in runs:
        rows.append(
            {
                "group": run.group,
                "seed": run.seed if run.seed is not None else "",
                "command": run.info.get("command", ""),
                "last step": int(run.metrics.index.max()),
                "run": str(run.path),
                "parent": run.info.get("parent") or "",
            }
        )
    frame = pd.DataFrame(rows)
    empty = [c for c in ("seed", "command", "parent") if not frame[c].astype(bool).any()]
    return frame.drop(columns=empty)


def _markdown(
    task: str | None,
    runs: pd.DataFrame,
    final: pd.DataFrame,
    best: pd.DataFrame,
    plots: dict[str, Path],
    notes: list[str],
) -> str:
    parts = [
        "# sesa diversity report",
        "",
        f"Task: `{task or 'unknown'}` · {len(runs)} runs in {runs['group'].nunique()} groups. {_METHOD}",
        "The full long-form table is `summary.csv`.",
        "",
    ]
    if notes:
        parts += ["## Notes", "", *(f"- {note}" for note in notes), ""]
    parts += [
        "## Final values",
        "",
        _FINAL,
        "",
        markdown_table(final),
        "",
        "## Best values",
        "",
        _BEST,
        "",
        markdown_table(best),
        "",
        "## Plots",
        "",
    ]
    for name, path in plots.items():
        parts += [f"![{name}]({path.name})", "", _PLOT_CAPTIONS[name], ""]
    parts += ["## Runs", "", markdown_table(runs, index=False), ""]
    return "\n".join(parts)


_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1400px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0 1.5em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3em 0.8em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { border-bottom: 2px solid #888; }
img { max-width: 100%; border: 1px solid #eee; }
figure { margin: 1em 0 2em; }
figcaption, .note { color: #555; font-size: 0.9em; }
"""


def _html(
    task: str | None,
    runs: pd.DataFrame,
    final: pd.DataFrame,
    best: pd.DataFrame,
    plots: dict[str, Path],
    notes: list[str],
) -> str:
    def table(frame: pd.DataFrame, index: bool = True) -> str:
        return frame.to_html(index=index, border=0, escape=True, na_rep="")

    intro = (
        f"Task: <code>{html.escape(task or 'unknown')}</code> · {len(runs)} runs in {runs['group'].nunique()} groups."
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>sesa diversity report</title>',
        f"<style>{_CSS}</style></head><body>",
        "<h1>sesa diversity report</h1>",
        f"<p>{intro} {html.escape(_METHOD)}</p>",
    ]
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    parts += [
        f"<h2>Final values</h2><p class='note'>{html.escape(_FINAL)}</p>",
        table(final),
        f"<h2>Best values</h2><p class='note'>{html.escape(_BEST)}</p>",
        table(best),
        "<h2>Plots</h2>",
    ]
    for name, path in plots.items():
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(
            f'<figure><img alt="{name}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(_PLOT_CAPTIONS[name])}</figcaption></figure>"
        )
    parts += ["<h2>Runs</h2>", table(runs, index=False), "</body></html>"]
    return "\n".join(parts)


def build_report(runs: Sequence[str | Path], out_dir: Path) -> ReportFiles:
    """Compare runs and write a diversity report into ``out_dir`` (created if needed).

    ``runs`` lists run dirs (``metrics.jsonl``, or an eval run's ``metrics.json``) and multirun dirs (whose job
    subdirs are taken). Runs are grouped by the overrides that differ between them, seed excluded, and every table
    and plot shows mean ± std over the seeds of a group. Raises :class:`sesa_cli.config.ConfigError` (one line) for
    an empty list, a missing path, a dir without runs, or runs of different tasks.
    """
    loaded, notes = load_runs(runs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    summary = summarize(loaded)
    summary_path = out_dir / "summary.csv"
    summary.to_csv(summary_path, index=False)

    plots, skipped = make_plots(loaded, out_dir)
    notes = notes + [f"{name}.png not drawn: {reason}" for name, reason in skipped.items()]

    task = next((run.task for run in loaded if run.task is not None), None)
    table = runs_table(loaded)
    final = wide_table(summary, "final")
    best = wide_table(summary, "best")
    markdown_path = out_dir / "report.md"
    markdown_path.write_text(_markdown(task, table, final, best, plots, notes))
    html_path = out_dir / "report.html"
    html_path.write_text(_html(task, table, final, best, plots, notes))
    return ReportFiles(summary=summary_path, markdown=markdown_path, html=html_path, plots=plots, notes=notes)
