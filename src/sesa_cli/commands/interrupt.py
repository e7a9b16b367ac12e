"""The stop policy of every command: Ctrl-C (SIGINT), SIGTERM and SIGUSR1 (what SLURM, Kubernetes and ``timeout``
send) all stop a command the same way, with one line and exit code 128 + the signal's number (130 for Ctrl-C, 143 for
SIGTERM, 138 for SIGUSR1), as a shell reports it.

* During start-up (imports, validation, Hydra's composition, model loading) there is nothing to save: the command
  prints the line of :func:`interrupted` and exits at once (:func:`exit_at_once`, installed by the dispatcher,
  sesa_cli.cli).
* During training (:func:`stop_after_step`, around the trainer's loop in ``sesa train`` and ``sesa revive``) the
  first signal lets the current step finish (its row logged, its evaluation and checkpoint written), then the trainer
  saves an interrupt checkpoint and the command ends as after Ctrl-C: run.json ``status: interrupted`` (written by
  sesa_cli.commands.common's ``user_errors``), the line of :func:`interrupted`, and the commands that continue the
  run. A checkpoint taken at a step boundary resumes bit-identically; one taken mid-step would not (the batch's
  prompts and random draws are already consumed). A second signal stops at once (a KeyboardInterrupt where it lands).
* Under submitit (``hydra/launcher=submitit_slurm``) its preemption signal (``SIGUSR2`` unless
  ``SUBMITIT_PREEMPT_SIGNAL`` says otherwise) is deferred the same way, then handed to submitit's own handler, which
  requeues the job with the same command: the requeued job resumes the run (``train.resume=auto``). SIGTERM stays
  submitit's there (it ignores it: SLURM sends it around a requeue).

Imports nothing of sesa_cli.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)

_received: signal.Signals | None = None
"""The last stop signal this process received (None: none, or only a KeyboardInterrupt raised by code)."""
_pending: signal.Signals | None = None
"""A stop signal :func:`noting_stops` noted before training began: the trainer stops after its first step."""
_why: str | None = None
"""Why the command was stopped when no signal of its own says it (:data:`stop_poll`'s reason)."""
on_first_stop: Callable[[int], bool] | None = None
"""Set by the dispatcher for a sweep whose jobs run in other processes (sesa_cli.commands.sweep.stop_sweep): the
first stop signal is passed to it, and when it returns True the command waits for its jobs instead of exiting."""
stop_poll: Callable[[], tuple[int, str | None] | None] | None = None
"""Set by a sweep's job (sesa_cli.commands.sweep) while it runs: asked at every step boundary whether the sweep asks
the job to stop, as ``(the stop signal it counts as, a reason other than that signal's name or None)``. A sweep's
stop reaches its jobs this way, not as a signal: Ray's workers block SIGINT, a Ctrl-C at a terminal also reaches
joblib's workers directly (a forwarded copy made it a second, immediate stop), and a job on another machine sees
the sweep dir, not the signal."""


def reason() -> str:
    """How the command was stopped, for run.json and the ending: ``Ctrl-C``, the signal's name, or what a sweep's
    job was told (:data:`stop_poll`)."""
    if _why is not None:
        return _why
    return "Ctrl-C" if _received in (None, signal.SIGINT) else _received.name


def exit_code() -> int:
    """The exit code of a stopped command: 128 + the signal's number."""
    return 128 + int(_received or signal.SIGINT)


def _note(signum: int, why: str | None = None) -> None:
    global _received, _why
    _received = signal.Signals(signum)
    _why = why


def _install(handlers: dict[int, Any]) -> dict[int, Any]:
    """Install ``handlers`` (signal -> handler); returns the previous ones (main thread only, else nothing)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}


def _restore(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@contextlib.contextmanager
def exit_at_once(command: str | None) -> Iterator[None]:
    """Inside the block (the whole command, in the main thread) every stop signal prints :func:`interrupted`'s line
    and exits at once with its exit code (no buffered IO and no exception: start-up has nothing to save, and a
    KeyboardInterrupt raised inside a library there can come out as another error). A KeyboardInterrupt
    raised by code that installed its own handler (:func:`stop_after_step`) ends the same way."""

    stopping: list[int] = []

    def exit_now(signum: int, frame: object) -> None:
        _note(signum)
        if on_first_stop is not None and not stopping and on_first_stop(signum):
            stopping.append(signum)
            os.write(2, f"sesa {command}: {reason()}: stopping the sweep after its running jobs' checkpoints (send "
                        "it again to stop at once)\n".encode())  # fmt: skip
            return
        os.write(2, (_interrupted_line(command) + "\n").encode())
        # The run dir's lock record goes with the process (a record left behind is taken over anyway). No import
        # here: the signal may land inside one.
        release_all = getattr(sys.modules.get("sesa_cli.run_lock"), "release_all", None)
        if release_all is not None:
            with contextlib.suppress(Exception):
                release_all()
        os._exit(exit_code())

    global _received, _why
    _received, _why = None, None  # a new command (the CLI run in-process again)
    previous = _install(dict.fromkeys(STOP_SIGNALS, exit_now))
    try:
        yield
    except KeyboardInterrupt:  # raised by code that installed its own handler
        interrupted(command)
    finally:
        _restore(previous)


def preemption_signal() -> signal.Signals | None:
    """The signal submitit's job environment turns into checkpoint-and-requeue, when submitit installed a handler
    for it in this process; None otherwise."""
    name = "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    signum = getattr(signal, name, None)
    if signum is None or signum in STOP_SIGNALS:
        return None
    return signum if callable(signal.getsignal(signum)) else None


class StopRequest:
    """What :func:`stop_after_step` hands the training loop: ``check()`` at each step boundary raises
    KeyboardInterrupt once a stop signal arrived or a sweep asks its job to stop (:data:`stop_poll`; the trainer then
    saves its checkpoint); ``after_checkpoint()`` hands a deferred preemption signal to submitit's handler."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self.chained: Any = None  # submitit's handler of a deferred preemption signal
        self.label = "sesa"

    def stop(self, signum: int, why: str | None = None) -> None:
        """Note a stop (a signal, or a sweep's request) and say on stderr that the current step finishes first."""
        self.signal = signal.Signals(signum)
        _note(signum, why)
        name = why or ("Ctrl-C" if signum == signal.SIGINT else self.signal.name)
        os.write(
            2,
            f"{self.label}: {name}: stopping after this step's checkpoint (send it again to stop at once)\n".encode(),
        )

    def check(self) -> None:
        if self.signal is None and stop_poll is not None:
            asked = stop_poll()
            if asked is not None:
                self.stop(*asked)
        if self.signal is not None:
            raise KeyboardInterrupt

    def after_checkpoint(self) -> None:
        if self.chained is not None and self.signal is not None:
            self.chained(int(self.signal), None)  # checkpoint the submission, requeue, exit (submitit)


@contextlib.contextmanager
def stop_after_step(label: str, request: StopRequest | None = None) -> Iterator[StopRequest]:
    """Inside the block the first stop signal is noted in ``request`` (and ``label`` tells the user on stderr that
    the current step finishes first); a second one raises KeyboardInterrupt where it lands."""
    request = request or StopRequest()
    request.label = label

    def defer(signum: int, frame: object) -> None:
        if request.signal is not None:
            _note(signum)
            raise KeyboardInterrupt
        request.stop(signum)

    preempt = preemption_signal()
    handlers: dict[int, Any] = dict.fromkeys(STOP_SIGNALS, defer)
    if preempt is not None:
        request.chained = signal.getsignal(preempt)
        handlers[preempt] = defer
        # submitit ignores SIGTERM on purpose (SLURM sends it around a requeue): a SIGTERM taken as a stop there
        # would end the job without its requeue, or turn the preemption signal into a second, immediate stop
        del handlers[signal.SIGTERM]
    previous = _install(handlers)
    if _pending is not None:  # noted during the job's start-up (noting_stops): stop after the first step
        defer(int(_pending), None)
    try:
        yield request
    finally:
        _restore(previous)


@contextlib.contextmanager
def noting_stops() -> Iterator[None]:
    """Inside the block (a sweep's job in a launcher's worker process, where no dispatcher catches signals) a stop
    signal is noted, not acted on: the worker is not killed mid-start-up, and the trainer, if the job trains, stops
    after its first step's checkpoint (:func:`stop_after_step` reads the note)."""
    global _pending

    def note(signum: int, frame: object) -> None:
        global _pending
        _note(signum)
        _pending = signal.Signals(signum)

    _pending = None
    previous = _install(dict.fromkeys(STOP_SIGNALS, note))
    try:
        yield
    finally:
        _restore(previous)
        _pending = None


def _interrupted_line(command: str | None) -> str:
    why = "" if reason() == "Ctrl-C" else f" ({reason()})"
    return (f"sesa {command}: interrupted" if command else "sesa: interrupted") + why


def interrupted(command: str | None = None) -> NoReturn:
    """A stop signal, wherever it lands (start-up, or training after the trainer saved a checkpoint): one line, exit
    128 + the signal's number (130 for Ctrl-C)."""
    print(_interrupted_line(command), file=sys.stderr)
    raise SystemExit(exit_code())
