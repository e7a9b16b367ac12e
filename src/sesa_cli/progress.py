"""The one console of a sesa command: the live view, plain progress lines, the log and the ending, all on stdout.

Every wait longer than a few seconds is an *activity* (the training loop, a warm start, an evaluation, a checkpoint,
a model load). On a terminal each running activity is one row of a single rich live display, and log lines print
above it (:class:`ConsoleHandler` writes through the same console, so a line never lands inside a bar). Anywhere else
(a pipe, ``tee``, nohup, CI, a notebook) there is no live display: an activity prints a plain line when it starts,
one every ``SESA_PROGRESS_SECONDS`` seconds (default 15) while it runs (its step, rate and ETA, or its elapsed time
when it has no steps), and the log records how long it took. Third-party progress bars (transformers' "Loading
weights", "Writing model shards") are switched off (:func:`use_console`); the activity that did that work is logged
once instead. Errors stay one line on stderr (sesa_cli.cli.fail).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Column
from typing_extensions import Self

from sesa_cli import metric_keys

log = logging.getLogger("sesa")
train_log = logging.getLogger("sesa.train")
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


def _fmt(row: dict[str, Any], markup: bool = True) -> str:
    parts = [f"{label} {row[key]:.3g}" for key, label in LIVE if key in row]
    if row.get("collapse/flag"):
        parts.append("[bold red]COLLAPSED[/]" if markup else "COLLAPSED")
    return "  ".join(parts)


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

    def line(self) -> str:
        """The plain progress line: ``train 12/100 (12%)  0.85 step/s  ETA 1:43  elapsed 0:14 | success 0.3``."""
        elapsed = time.monotonic() - self.started
        if self.total is None:
            text = f"{self.label}: running, elapsed {_clock(elapsed)}"
        else:
            done = self.completed - self.first
            rate = done / elapsed if elapsed > 0 else 0.0
            eta = f"ETA {_clock((self.total - self.completed) / rate)}" if rate > 0 else "ETA -"
            pct = 100 * self.completed / self.total if self.total else 100.0
            text = (f"{self.label} {self.completed}/{self.total} ({pct:.0f}%)  {_rate(rate, self.unit)}  {eta}  "
                    f"elapsed {_clock(elapsed)}")  # fmt: skip
        return f"{text} | {self.info}" if self.info else text


def _rate(rate: float, unit: str) -> str:
    return f"{rate:.3g} {unit}/s" if rate >= 1 or rate == 0 else f"{1 / rate:.3g} s/{unit}"


class Display:
    """The running activities, shown as rows of one rich live display (terminal) or as plain lines (elsewhere)."""

    def __init__(self) -> None:
        self.activities: list[Activity] = []
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
                    # the metrics last: a narrow terminal cuts them, never the counts and clocks
                    self.progress = Progress(
                        TextColumn("[bold]{task.description}"), BarColumn(bar_width=24),
                        TextColumn("{task.fields[count]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                        TextColumn("{task.fields[info]}", table_column=Column(no_wrap=True, overflow="ellipsis")),
                        console=console, transient=True, refresh_per_second=4,
                    )  # fmt: skip
                    self.progress.start()
                act.task_id = self.progress.add_task(label, total=total, completed=completed, count=_count(act),
                                                     info="")  # fmt: skip
            else:
                console.print(_stamp(act.line() if total is not None else f"{label} ..."), soft_wrap=True,
                              markup=False, highlight=False)  # fmt: skip
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
            if self.progress is not None and act.task_id is not None:
                shown = markup_info if markup_info is not None else act.info
                self.progress.update(act.task_id, completed=act.completed, count=_count(act), info=shown)

    def end(self, act: Activity) -> float:
        """Remove ``act``; returns its seconds."""
        with self.lock:
            if act in self.activities:
                self.activities.remove(act)
            if self.progress is not None and act.task_id is not None:
                self.progress.remove_task(act.task_id)
            if not self.activities:
                if self.progress is not None:
                    self.progress.stop()
                    self.progress = None
                if self.heartbeat is not None:
                    self.stop.set()
                    self.heartbeat = None
        return time.monotonic() - act.started

    def _beat(self) -> None:
        every = plain_every()
        while not self.stop.wait(min(1.0, max(0.2, every))):
            with self.lock:
                now = time.monotonic()
                for act in self.activities:
                    if now - act.last_line >= every:
                        act.last_line = now
                        console.print(_stamp(act.line()), soft_wrap=True, markup=False, highlight=False)


def _count(act: Activity) -> str:
    return f"{act.completed}/{act.total}" if act.total is not None else ""


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
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Self:
        if self.enabled:
            self.act = self._stack.enter_context(activity("train", self.total, self.start, done=None))
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._stack.__exit__(et, e, tb)

    def update(self, step: int, row: dict[str, Any]) -> None:
        self.policy.update({k: v for k, v in row.items() if k.startswith("policy/")})
        shown = {**self.policy, **row}
        self.info = _fmt(shown)
        if self.act is not None:
            DISPLAY.update(self.act, completed=step, info=_fmt(shown, markup=False), markup_info=self.info)
        if (self.log_every and step % self.log_every == 0) or any(k.startswith("eval/") for k in row):
            text = "  ".join(f"{k}={v:.4g}" for k, v in row.items() if isinstance(v, float) and not k.startswith(
                ("loss/", "time/sample", "time/update")) and "@" not in k)  # fmt: skip
            train_log.info("step %d  %s", step, text)
