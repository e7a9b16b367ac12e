"""The real model's learning curves (issue 70): success and pass@k against steps and training time, per sampler,
mean and 95% bootstrap interval over seeds, from the runs of ``experiment=smollm2_larger`` (claim XXV).

``python scripts/real_model.py outputs/claims/smollm2_larger`` prints the table and, with ``--page``, rewrites the
``<!-- bench:real_model -->`` block of docs/real-models.md and draws ``--figure`` (docs/results/real_model.png):
two panels, success and pass@k, each against training time (the sum of the steps' ``time/step_s``: sampling and
update, evaluations excluded). Each sampler's final value is set against the base's (the evaluation before the
first update, the same questions) paired by seed; a run's wall time includes its evaluations (run.json's started
and ended). Reads what the runs logged; runs nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from sesa_cli.intervals import bootstrap_interval
from sesa_cli.report.runs import Run, load_runs

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "scripts")]
from docs_block import write_block
from results import run_seconds

SUCCESS = "eval/success"
STEP_TIME = "time/step_s"


def pass_metric(runs: list[Run]) -> str:
    """The largest-k ``eval/pass@k`` every run logged (k = eval.samples)."""
    shared = set.intersection(*(set(run.metrics.columns) for run in runs))
    ks = [int(m.rpartition("@")[2]) for m in shared if m.startswith("eval/pass@")]
    if not ks:
        raise SystemExit("the runs logged no eval/pass@k")
    return f"eval/pass@{max(ks)}"


def sampler_of(run: Run) -> str:
    return str(run.overrides.get("sampler") or run.config.get("sampler", {}).get("name", "?"))


def wall_minutes(run: Run) -> float:
    """The run's wall time (:func:`results.run_seconds`: run.json's started to ended), evaluations included; NaN
    when it has not ended."""
    seconds = run_seconds(run.path)
    return float("nan") if seconds is None else seconds[0] / 60


def curves(runs: list[Run], metric: str) -> pd.DataFrame:
    """Per sampler and evaluated step: training minutes (mean over seeds), and ``metric``'s mean, low and high."""
    rows = []
    for sampler in sorted({sampler_of(r) for r in runs}):
        group = [r for r in runs if sampler_of(r) == sampler]
        evaluated = sorted(set.intersection(*(set(r.metrics.index[r.metrics[SUCCESS].notna()]) for r in group)))
        for step in evaluated:
            values = np.array([[r.metrics.at[step, metric]] for r in group])
            minutes = [r.metrics[STEP_TIME].loc[:step].sum() / 60 for r in group]
            mean, low, high = (float(x[0]) for x in bootstrap_interval(values))
            rows.append(
                {"sampler": sampler, "step": step, "train_min": float(np.mean(minutes)), "seeds": len(group),
                 "mean": mean, "low": low, "high": high}
            )  # fmt: skip
    return pd.DataFrame(rows)


def gains(runs: list[Run], metric: str) -> pd.DataFrame:
    """Per sampler: the final evaluation minus the base's (step 0), paired by seed, with its interval."""
    rows = []
    for sampler in sorted({sampler_of(r) for r in runs}):
        group = [r for r in runs if sampler_of(r) == sampler]
        last = [r.metrics[SUCCESS].last_valid_index() for r in group]
        base = np.array([r.metrics.at[0, metric] for r in group])
        final = np.array([r.metrics.at[s, metric] for r, s in zip(group, last, strict=True)])
        d, d_low, d_high = bootstrap_interval((final - base)[:, None])  # paired by seed
        rows.append(
            {"sampler": sampler, "metric": metric, "base": float(base.mean()), "final": float(final.mean()),
             "gain": float(d[0]),
             "low": float(d_low[0]), "high": float(d_high[0]), "steps": int(max(last)),
             "wall_min": float(np.mean([wall_minutes(r) for r in group])),
             "train_min": float(np.mean([r.metrics[STEP_TIME].sum() / 60 for r in group])),
             "s_per_step": float(np.mean([r.metrics[STEP_TIME].mean() for r in group])), "seeds": len(group)}
        )  # fmt: skip
    return pd.DataFrame(rows)


def figure(frames: dict[str, pd.DataFrame], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(frames), figsize=(4.6 * len(frames), 3.2), squeeze=False)
    for ax, (metric, frame) in zip(axes[0], frames.items(), strict=True):
        for sampler, rows in frame.groupby("sampler"):
            line = ax.plot(rows["train_min"], rows["mean"], marker="o", ms=3, label=str(sampler))[0]
            ax.fill_between(rows["train_min"], rows["low"], rows["high"], color=line.get_color(), alpha=0.2, lw=0)
        ax.set_xlabel("training time (min; evaluations excluded)")
        ax.set_title(metric)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].legend(frameon=False, loc="lower right")
    n = int(next(iter(frames.values()))["seeds"].max())
    fig.suptitle(
        f"SmolLM2-135M, experiment=smollm2_larger: mean and 95% bootstrap interval over {n} seeds", fontsize=9
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _interval(mean: float, low: float, high: float) -> str:
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def lines_of(frames: dict[str, pd.DataFrame], gained: pd.DataFrame, figure_path: Path | None, page: Path) -> list[str]:
    success, passing = frames
    table = frames[success].merge(frames[passing], on=["sampler", "step", "train_min", "seeds"], suffixes=("_s", "_p"))
    out = [
        f"| sampler | step | training time (min) | {success} | {passing} |",
        "|---|---|---|---|---|",
    ]
    for row in table.itertuples():
        out.append(
            f"| {row.sampler} | {row.step} | {row.train_min:.1f} | {_interval(row.mean_s, row.low_s, row.high_s)} "
            f"| {_interval(row.mean_p, row.low_p, row.high_p)} |"
        )
    header = (
        "| sampler | metric | base | final | final − base, paired by seed | steps | s/step | training min "
        "| wall min (evaluations included) |"
    )
    out += ["", header, "|---|---|---|---|---|---|---|---|---|"]
    for row in gained.itertuples():
        out.append(
            f"| {row.sampler} | {row.metric} | {row.base:.3f} | {row.final:.3f} | "
            f"{_interval(row.gain, row.low, row.high)} | {row.steps} | {row.s_per_step:.1f} | {row.train_min:.1f} "
            f"| {row.wall_min:.1f} |"
        )
    if figure_path is not None:
        out += [
            "",
            f"![learning curves]({Path(*['..'] * 0, figure_path.resolve().relative_to(page.resolve().parent))})",
        ]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run dirs or a sweep dir (outputs/claims/smollm2_larger)")
    parser.add_argument("--page", type=Path, help="rewrite the bench:real_model block of this page")
    parser.add_argument("--figure", type=Path, default=ROOT / "docs" / "results" / "real_model.png")
    args = parser.parse_args(argv)
    runs, notes = load_runs(args.runs)
    for note in notes:
        print(note, file=sys.stderr)
    if not runs:
        raise SystemExit("no runs with metrics under " + " ".join(args.runs))
    passing = pass_metric(runs)
    frames = {metric: curves(runs, metric) for metric in (SUCCESS, passing)}
    gained = pd.concat([gains(runs, metric) for metric in (SUCCESS, passing)], ignore_index=True)
    figure_path = None
    if args.page:
        figure(frames, args.figure)
        figure_path = args.figure
    lines = lines_of(frames, gained, figure_path, args.page or ROOT / "docs" / "real-models.md")
    print("\n".join(lines))
    if args.page:
        write_block(args.page, "real_model", lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
