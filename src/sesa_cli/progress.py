"""The one console of a sesa command: the live view, plain progress lines, the log and the ending, all on stdout.

Every wait longer than a few seconds is an *activity* (the training loop, a warm start, an evaluation, a checkpoint,
a model load). On a terminal each running activity is one row of a single rich live display, and log lines print
above it (:class:`ConsoleHandler` writes through the same console, so a line never lands inside a bar). Anywhere else
(a pipe, ``tee``, nohup, CI, a notebook) there is no live display: an activity prints a plain line when it starts,
one every ``SESA_PROGRESS_SECONDS`` seconds (default 15) while it runs (its step, ETA, elapsed time and rate, or its
elapsed time when it has no steps; of nested activities, a model load and the warm start inside it, only the
innermost), and the log records how long it took. Either way a progress line fits the console's width (80 columns
off a terminal): the step count, ETA and elapsed time stay, the metrics go first, then the rate. Third-party progress bars (transformers' "Loading
weights", "Writing model shards") are switched off (:func:`use_console`); the activity that did that work is logged
once instead. Errors stay one line on stderr (sesa_cli.cli.fail).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import Progress, ProgressColumn, TaskID
from rich.progress import Task as RichTask
from rich.table import Table
from rich.text import Text
from typing_extensions import Self

from sesa_cli import metric_keys
from sesa_cli.intervals import exact_text

log = logging.getLogger("sesa")
console = Console()
"""The one console (stdout). Everything a command shows goes through it; errors go to stderr."""

PLAIN_SECONDS_ENV = "SESA_PROGRESS_SECONDS"
"""Seconds between two plain progress lines of an activity when stdout is not a terminal (default 15; 0 = as often
as the heartbeat checks, a few times a second)."""

# (metrics key, short label) shown live, in this order, when the row has them: the exact plain-prompt policy
# (pi ...) where the task has it, then what the sampler drew this step. The labels are the metric table's
# (sesa_cli.metric_keys, where docs/metrics.md explains them; `sesa train --help` prints the legend).
LIVE = [
    (name, metric_keys.label(name))
    for name in (
        "policy/target_mass",
        "policy/effective_solutions",
        "policy/pruned_mass",
        "rollout/reward_mean",
        "rollout/success",
        "rollout/coverage",
        "rollout/distinct_correct",
        "rollout/entropy",
        "time/step_s",
    )
]


def legend() -> list[tuple[str, str, str]]:
    """(live label, metric key, meaning) of every label the live view can show, from sesa_cli.metric_keys."""
    return [(lab, name, metric_keys.find(name).meaning) for name, lab in LIVE]  # type: ignore[union-attr]


def _fmt(row: dict[str, Any], markup: bool = True, stale: int | None = None) -> str:
    return METRIC_SEP.join(_parts(row, markup, stale))


METRIC_SEP = "  "
"""Between two metrics of a progress line (a label holds single spaces)."""


def _parts(row: dict[str, Any], markup: bool = True, stale: int | None = None) -> list[str]:
    """``label value`` of each :data:`LIVE` metric ``row`` has. ``stale``: the step the row's ``policy/*`` values
    were measured at, when that is an earlier step than the row's: they say so (``pi success 0.25 (step 40)``) and
    are dimmed, so a value repeated between measurements never reads as this step's."""
    parts = []
    for key, label in LIVE:
        if key in row:
            part = f"{label} {_value(key, row, stale)}"
            old = stale is not None and key.startswith("policy/")
            parts.append(f"[dim]{part}[/]" if old and markup else part)
    if row.get("collapse/flag"):
        parts.append("[bold red]COLLAPSED[/]" if markup else "COLLAPSED")
    return parts


def _value(key: str, row: dict[str, Any], stale: int | None) -> str:
    """``row[key]`` as shown live, with the step it is from where ``stale`` says a ``policy/*`` value is old; an exact
    figure of a walk that pruned too much is a bound or marked (:func:`sesa_cli.intervals.exact_text`)."""
    text = exact_text(key, row[key], row, lambda v: f"{v:.3g}")
    return f"{text} (step {stale})" if stale is not None and key.startswith("policy/") else text


def fit(head: str, optional: list[str], metrics: list[str], width: int) -> str:
    """``head`` (kept whole), then each ``optional`` part and, after `` | ``, each metric while the line stays within
    ``width`` cells; the metrics go first, then the optional parts from the last. Parts may hold rich markup (only
    their text is measured)."""

    def cells(text: str) -> int:
        return Text.from_markup(text).cell_len if "[" in text else len(text)

    kept = list(optional)
    while kept and cells("  ".join([head, *kept])) > width:
        kept.pop()
    text = "  ".join([head, *kept])
    shown: list[str] = []
    for part in metrics:
        candidate = text + (" | " if not shown else METRIC_SEP) + part
        if cells(candidate) > width or len(kept) < len(optional):
            break
        text = candidate
        shown.append(part)
    return text


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def plain_every() -> float:
    try:
        return max(0.0, float(os.environ.get(PLAIN_SECONDS_ENV, "15")))
    except ValueError:
        return 15.0


# ------------------------------------------------------------------------------------------------ activities
@dataclass
class Activity:
    """One wait the user should see: ``total`` steps (None = unknown: a phase with an elapsed clock only)."""

    label: str
    total: int | None = None
    completed: int = 0
    unit: str = "step"
    info: str = ""
    started: float = field(default_factory=time.monotonic)
    first: int = 0  # completed at start (a resumed loop): the rate counts only this process's steps
    last_line: float = field(default_factory=time.monotonic)
    task_id: TaskID | None = None
    markup_info: str = ""  # the live row's metrics (rich markup); ``info`` is their plain text
    apart: dict[str, float] = field(default_factory=dict)
    """Seconds of the activities nested in this one, by kind (``eval``, ``checkpoint``): the training loop's
    evaluations and checkpoints, which its rate leaves out and its row shows apart."""

    def clock(self) -> tuple[str, list[str]]:
        """(the count and clocks that always show, the rate and the time spent apart), e.g. (``train 12/100 (12%)
        ETA 1:43  elapsed 0:14``, [``0.85 step/s``, ``eval 0:03``]); a phase without steps: (``evaluation: running,
        elapsed 0:14``, []). The rate counts the steps' own time only: a SmolLM2 run whose evaluations took minutes
        showed 596 s/step; the ETA counts everything, evaluations to come included, at the pace so far."""
        elapsed = time.monotonic() - self.started
        if self.total is None:
            return f"{self.label}: running, elapsed {_clock(elapsed)}", []
        done = self.completed - self.first
        own = elapsed - sum(self.apart.values())
        rate = done / own if own > 0 else 0.0
        eta = _clock((self.total - self.completed) * elapsed / done) if done > 0 else "-"
        pct = 100 * self.completed / self.total if self.total else 100.0
        head = f"{self.label} {self.completed}/{self.total} ({pct:.0f}%)  ETA {eta}  elapsed {_clock(elapsed)}"
        return head, [_rate(rate, self.unit), *(f"{kind} {_clock(s)}" for kind, s in self.apart.items() if s >= 1)]

    def line(self, width: int | None = None) -> str:
        """The plain progress line, within ``width`` cells (default: the console's):
        ``train 12/100 (12%)  ETA 1:43  elapsed 0:14  0.85 step/s | success 0.3``."""
        head, optional = self.clock()
        metrics = self.info.split(METRIC_SEP) if self.info else []
        return fit(head, optional, metrics, console.width if width is None else width)


def _rate(rate: float, unit: str) -> str:
    return f"{rate:.3g} {unit}/s" if rate >= 1 or rate == 0 else f"{1 / rate:.3g} s/{unit}"


class _Row(ProgressColumn):
    """A live row: the label, a bar, the count, ETA and elapsed time, the rate and the metrics, fitted to the
    console's width as a plain line is (:func:`fit`), so a narrow terminal cuts the metrics, never the clocks."""

    def __init__(self, display: Display) -> None:
        super().__init__()
        self.display = display

    def render(self, task: RichTask) -> Text:
        act = self.display.by_task.get(task.id)
        if act is None:
            return Text(str(task.description))
        head, optional = act.clock()
        metrics = act.markup_info.split(METRIC_SEP) if act.markup_info else []
        width = console.width - 1
        if act.total is not None:
            filled = round(BAR * act.completed / act.total) if act.total else BAR
            bar = f"[green]{'━' * filled}[/][grey35]{'━' * (BAR - filled)}[/]"
            label, _, rest = head.partition(f" {act.completed}/")
            rest = re.sub(r" \(\d+%\)", "", rest, count=1)  # the bar shows it
            line = fit(f"[bold]{_escape(label)}[/] {bar} {act.completed}/{_escape(rest)}", optional, metrics, width)
            if Text.from_markup(line).cell_len > width:  # a label too long for the bar: the bar goes
                line = fit(f"[bold]{_escape(head)}[/]", optional, metrics, width)
        else:
            line = fit(f"[bold]{_escape(head)}[/]", optional, metrics, width)
        text = Text.from_markup(line)
        text.truncate(width, overflow="ellipsis")
        return text


BAR = 10
"""Cells of a live row's bar (at 80 columns a training row keeps room for a metric or two)."""


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


class Display:
    """The running activities, shown as rows of one rich live display (terminal) or as plain lines (elsewhere)."""

    def __init__(self) -> None:
        self.activities: list[Activity] = []
        self.by_task: dict[TaskID, Activity] = {}
        self.progress: Progress | None = None
        self.lock = threading.RLock()
        self.stop = threading.Event()
        self.heartbeat: threading.Thread | None = None

    @property
    def live(self) -> bool:
        return console.is_terminal

    def begin(self, label: str, total: int | None = None, completed: int = 0, unit: str = "step") -> Activity:
        with self.lock:
            act = Activity(label, total, completed, unit, first=completed)
            self.activities.append(act)
            if self.live:
                if self.progress is None:
                    # one column: the row is fitted to the width as a whole (the metrics go first, never the clocks)
                    self.progress = Progress(_Row(self), console=console, transient=True, refresh_per_second=4)
                    self.progress.start()
                act.task_id = self.progress.add_task(label, total=total, completed=completed)
                self.by_task[act.task_id] = act
            else:
                first = act.line(console.width - STAMP) if total is not None else f"{label} ..."
                console.print(_stamp(first), soft_wrap=True, markup=False, highlight=False)
                if self.heartbeat is None:
                    self.stop.clear()
                    self.heartbeat = threading.Thread(target=self._beat, name="sesa-progress", daemon=True)
                    self.heartbeat.start()
            return act

    def update(self, act: Activity, completed: int | None = None, info: str | None = None,
               markup_info: str | None = None) -> None:  # fmt: skip
        """Move ``act`` to ``completed`` steps; ``info`` is its plain text, ``markup_info`` the live row's (rich
        markup; defaults to ``info``)."""
        with self.lock:
            if completed is not None:
                act.completed = completed
            if info is not None:
                act.info = info
                act.markup_info = markup_info if markup_info is not None else info
            if self.progress is not None and act.task_id is not None:
                self.progress.update(act.task_id, completed=act.completed)

    def end(self, act: Activity) -> float:
        """Remove ``act``; returns its seconds, which the activity it ran inside counts apart (:attr:`Activity.apart`)."""
        seconds = time.monotonic() - act.started
        with self.lock:
            if act in self.activities:
                at = self.activities.index(act)
                if at > 0:
                    outer = self.activities[at - 1].apart
                    kind = "eval" if "evaluation" in act.label else act.label.split(" ")[0]
                    outer[kind] = outer.get(kind, 0.0) + seconds
                self.activities.remove(act)
            if self.progress is not None and act.task_id is not None:
                self.progress.remove_task(act.task_id)
                self.by_task.pop(act.task_id, None)
            if not self.activities:
                if self.progress is not None:
                    self.progress.stop()
                    self.progress = None
                if self.heartbeat is not None:
                    self.stop.set()
                    self.heartbeat = None
        return seconds

    def _beat(self) -> None:
        every = plain_every()
        while not self.stop.wait(min(1.0, max(0.2, every))):
            with self.lock:
                now = time.monotonic()
                # Only the innermost activity ticks (the warm start inside a model load, the evaluation inside the
                # training loop): one progress line at a time, never two interleaved.
                act = self.activities[-1] if self.activities else None
                if act is not None and now - act.last_line >= every:
                    act.last_line = now
                    console.print(_stamp(act.line(console.width - STAMP)), soft_wrap=True, markup=False,
                                  highlight=False)  # fmt: skip


STAMP = len("[00:00:00] ")


def _stamp(text: str) -> str:
    return f"[{time.strftime('%H:%M:%S')}] {text}"


DISPLAY = Display()


@contextlib.contextmanager
def activity(label: str, total: int | None = None, completed: int = 0, unit: str = "step",
             done: str | None = "{label} done in {seconds:.1f}s") -> Iterator[Activity]:  # fmt: skip
    """Show ``label`` while the block runs; log ``done`` (formatted with label and seconds; None = nothing) at its
    end. Advance it with ``DISPLAY.update(act, completed=...)``."""
    act = DISPLAY.begin(label, total, completed, unit)
    ok = False
    try:
        yield act
        ok = True
    finally:
        seconds = DISPLAY.end(act)
        if ok and done:
            log.info(done.format(label=label, seconds=seconds))


def phase(label: str) -> contextlib.AbstractContextManager[Activity]:
    """A wait with no steps (an evaluation, a checkpoint, a model load): a live row with a clock, or plain lines."""
    return activity(label)


# ----------------------------------------------------------------------------------------------------- logging
class ConsoleHandler(logging.Handler):
    """Log records printed through the one console: above the live display on a terminal, plain lines elsewhere."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", datefmt="%H:%M:%S"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            if record.levelno >= logging.WARNING:
                text = text.replace("] ", f"] {record.levelname.lower()}: ", 1)
            console.print(text, soft_wrap=True, markup=False, highlight=False,
                          style="yellow" if record.levelno >= logging.WARNING else None)  # fmt: skip
        except Exception:  # noqa: BLE001  (logging's contract: a handler never raises)
            self.handleError(record)


def use_console() -> None:
    """Route the job's console log (Hydra's stream handler) through the one console, and switch off third-party
    progress bars (their work is logged once by the activity that does it) and send Python warnings to the log.
    Idempotent; the log file is untouched."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when huggingface_hub/transformers import
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    elif "huggingface_hub" in sys.modules:
        from huggingface_hub.utils.tqdm import disable_progress_bars

        disable_progress_bars()
    # Python warnings (a library's FutureWarning) become log records: one line through the console, above the live
    # view and in the log file, instead of raw text on stderr breaking into a bar.
    logging.captureWarnings(True)
    root = logging.getLogger()
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler and handler.stream in (sys.stdout, sys.stderr,
                                                                          sys.__stdout__, sys.__stderr__):  # fmt: skip
            root.removeHandler(handler)
            root.addHandler(ConsoleHandler(handler.level))


# ------------------------------------------------------------------------------------------------ the training loop
class TrainProgress:
    """The training loop's activity (step, rate, ETA and the step's headline metrics); also logs a line of metrics
    every ``log_every`` steps and at every evaluation. ``enabled=False`` (a data-parallel replica) shows nothing."""

    def __init__(self, total: int, start: int = 0, enabled: bool = True, log_every: int = 10) -> None:
        self.enabled = enabled
        self.log_every = log_every
        self.total = total
        self.start = start
        self.act: Activity | None = None
        self.info = ""  # the live row's text (rich markup)
        self.policy: dict[str, Any] = {}  # the latest policy/* values: measured every train.policy_every steps
        self.policy_step: int | None = None  # the step they were measured at
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Self:
        if self.enabled:
            self.act = self._stack.enter_context(activity("train", self.total, self.start, done=None))
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._stack.__exit__(et, e, tb)

    def update(self, step: int, row: dict[str, Any]) -> None:
        measured = {k: v for k, v in row.items() if k.startswith("policy/")}
        if measured:
            self.policy.update(measured)
            self.policy_step = step
        shown = {**self.policy, **row}
        stale = self.policy_step if self.policy_step is not None and self.policy_step < step else None
        self.info = _fmt(shown, stale=stale)
        if self.act is not None:
            DISPLAY.update(
                self.act, completed=step, info=_fmt(shown, markup=False, stale=stale), markup_info=self.info
            )
        evaluated = any(k.startswith("eval/") for k in row)
        if self.enabled and ((self.log_every and step % self.log_every == 0) or evaluated):
            console.print(metrics_table(step, self.total, shown, stale))


EVAL_HEADLINE = (metric_keys.key("eval/success"), metric_keys.key("eval/pass@{k}"))
"""The evaluation's metrics the periodic table adds on an evaluation step (``@{k}`` at the largest k logged)."""
PAIRS_PER_LINE = 3
"""At most this many ``label value`` pairs to a line of the periodic metrics table (fewer when they would pass
:data:`TABLE_WIDTH`)."""
TABLE_WIDTH = 80


def metrics_table(step: int, total: int, row: dict[str, Any], stale: int | None = None) -> Table:
    """The periodic metrics table of the training loop (every ``train.log_every`` steps and at each evaluation): the
    live view's headline metrics (:data:`LIVE`, by their labels), on an evaluation step :data:`EVAL_HEADLINE` (by
    key), and ``collapse/flag`` once it is up; up to :data:`PAIRS_PER_LINE` pairs to a line within
    :data:`TABLE_WIDTH` columns. Every metric is in metrics.jsonl. ``stale``: as in the live row, the step of
    ``policy/*`` values measured before ``step``."""
    pairs = [(label, _value(key, row, stale)) for key, label in LIVE if isinstance(row.get(key), (int, float))]
    for name in EVAL_HEADLINE:
        if name.endswith("@{k}"):
            family = metric_keys.family(name)
            ks = [
                int(k.rsplit("@", 1)[1]) for k in row if k.startswith(family + "@") and k.rsplit("@", 1)[1].isdigit()
            ]
            name = metric_keys.key(name, k=max(ks)) if ks else ""
        if isinstance(row.get(name), (int, float)):
            pairs.append((name, f"{row[name]:.3g}"))
    if row.get("collapse/flag"):
        pairs.append(("collapse/flag", "1"))
    head = f"step {step}/{total}"

    def cells(per_line: int) -> list[list[str]]:
        """The pairs as ``label value`` cells, ``per_line`` columns, each column's labels and values aligned."""
        columns = [pairs[j::per_line] for j in range(per_line)]
        shown = []
        for column in columns:
            lw, vw = max((len(a) for a, _ in column), default=0), max((len(b) for _, b in column), default=0)
            shown.append([f"{a:<{lw}} {b:>{vw}}" for a, b in column])
        return [[c[i] for c in shown if i < len(c)] for i in range(len(shown[0]))]

    def width(lines: list[list[str]]) -> int:  # two cells between columns, none at the edges
        return len(head) + sum(2 + max(len(line[j]) for line in lines if j < len(line)) for j in range(len(lines[0])))

    per_line = 1
    for n in range(PAIRS_PER_LINE, 1, -1):
        if pairs and width(cells(n)) <= TABLE_WIDTH:
            per_line = n
            break
    table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
    table.add_column(no_wrap=True)
    for _ in range(per_line):
        table.add_column(no_wrap=True)
    for i, line in enumerate(cells(per_line) if pairs else [[]]):
        table.add_row(head if i == 0 else "", *line)
    return table
