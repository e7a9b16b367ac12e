"""Live training display (rich) and the final metrics table. The trainer only calls ``update(step, row)``."""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from typing_extensions import Self

from sesa_cli import metric_keys

log = logging.getLogger("sesa.train")
console = Console(stderr=True)

# (metrics key, short label) shown live, in this order, when the row has them: the exact plain-prompt policy
# (pi ...) where the task has it, then what the sampler drew this step. The labels are the table's
# (sesa_cli.metric_keys, where docs/metrics.md explains them).
LIVE = [
    (name, metric_keys.label(name))
    for name in (
        "policy/target_mass",
        "policy/effective_solutions",
        "rollout/reward_mean",
        "rollout/success",
        "rollout/coverage",
        "rollout/distinct_correct",
        "rollout/entropy",
        "time/step_s",
    )
]


def _fmt(row: dict[str, Any]) -> str:
    parts = [f"{label} {row[key]:.3g}" for key, label in LIVE if key in row]
    if row.get("collapse/flag"):
        parts.append("[bold red]COLLAPSED[/]")
    return "  ".join(parts)


class TrainProgress:
    """A rich progress bar with the step's headline metrics; also logs a plain line every ``log_every`` steps."""

    def __init__(self, total: int, start: int = 0, enabled: bool = True, log_every: int = 10) -> None:
        self.enabled = enabled
        self.log_every = log_every
        self.progress = Progress(
            TextColumn("[bold]train"), MofNCompleteColumn(), BarColumn(bar_width=24), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), TimeRemainingColumn(), console=console, disable=not enabled,
        )  # fmt: skip
        self.task_id = self.progress.add_task("train", total=total, completed=start, info="")
        self.policy: dict[str, Any] = {}  # the latest policy/* values: measured every train.policy_every steps

    def __enter__(self) -> Self:
        self.progress.__enter__()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.progress.__exit__(et, e, tb)

    def update(self, step: int, row: dict[str, Any]) -> None:
        self.policy.update({k: v for k, v in row.items() if k.startswith("policy/")})
        self.progress.update(self.task_id, completed=step, info=_fmt({**self.policy, **row}))
        if (self.log_every and step % self.log_every == 0) or any(k.startswith("eval/") for k in row):
            text = "  ".join(f"{k}={v:.4g}" for k, v in row.items() if isinstance(v, float) and not k.startswith(
                ("loss/", "time/sample", "time/update")) and "@" not in k)  # fmt: skip
            log.info("step %d  %s", step, text)


def final_table(row: dict[str, Any], title: str, caption: str | None = None) -> None:
    """Print the headline metrics of a finished run (``caption``: e.g. the evaluation protocol)."""
    table = Table(title=title, show_header=True, caption=caption)
    table.add_column("metric")
    table.add_column("value", justify="right")
    # Of each @k family only k = 1 and the largest k; the full curves are in metrics.jsonl.
    largest: dict[str, int] = {}
    for key in row:
        if "@" in key:
            family, k = key.rsplit("@", 1)
            largest[family] = max(largest.get(family, 0), int(k))
    for key in sorted(row):
        value = row[key]
        if "@" in key:
            family, k = key.rsplit("@", 1)
            if int(k) not in (1, largest[family]):
                continue
        if key == "step" or key.startswith(("policy/", "rollout/", "train/", "optim/", "eval/", "collapse/")):
            table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)
