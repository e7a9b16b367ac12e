"""What a user sees while sesa works: plain progress lines without a terminal, a live view on one that log lines
never break, the ending, the failed-run marker and the usage line of a missing mandatory key."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli

SMALL = ["train.batch_size=2", "sampler.group_size=4", "train.steps=4", "train.eval_every=2",
         "train.checkpoint_every=2"]  # fmt: skip
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
STAMP = re.compile(r"\[\d\d:\d\d:\d\d\] ")  # the console's log and progress lines start with it


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **extra}


def _sesa(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "sesa_cli", *argv]


@pytest.mark.e2e
def test_without_a_terminal_progress_lines_appear_during_the_warm_start_and_the_evaluation(tmp_path):
    argv = ["train", "task=path", "task.regions=4", "task.cities=4", "task.districts=4", "task.list_max=8",
            "model.warm_start_steps=20", "model.warm_start_corpus_size=2000", f"model.cache_dir={tmp_path / 'cache'}",
            *SMALL, "eval.samples=1024", f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    # 1024 samples: an evaluation of ~1.5 s on a 2-core CPU, several of the heartbeat's 0.2 s ticks (at 64 samples it
    # took 0.2 s and whether it ticked was a race)
    proc = subprocess.run(_sesa(argv), env=_env(SESA_PROGRESS_SECONDS="0"), capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert not any("\x1b[" in line or "\r" in line for line in lines)  # plain text, no cursor movement

    def index(pattern: str) -> int:
        return next(i for i, line in enumerate(lines) if re.search(pattern, line))

    # The warm start: periodic lines with its step, ETA, elapsed time and rate, then the line naming the cache it
    # landed in; inside the model load, only the warm start ticks (never the two interleaved); no progress line
    # passes 80 columns.
    warm = [
        line
        for line in lines
        if re.search(r"warm start \(path\) \d+/20 \(\d+%\)  ETA \S+  elapsed \S+  \S+ (step/s|s/step)", line)
    ]
    assert len(warm) >= 2, proc.stdout
    during = lines[lines.index(warm[0]) : lines.index(warm[-1])]
    assert not any(re.search(r"model load .*: running, elapsed", line) for line in during), proc.stdout
    progress = [line for line in lines if re.search(r" \d+/\d+ \(\d+%\)  ETA |: running, elapsed ", line)]
    assert all(len(line) <= 80 for line in progress), proc.stdout
    done = index(r"warm start done in .* -> ")
    assert lines[done].endswith(str(tmp_path / "cache" / lines[done].rsplit("/", 1)[1]))
    assert not lines[done].endswith(".tmp")
    assert index(r"warm start \(path\) \d+/20") < done
    # Every evaluation is a phase: announced, ticking while it runs, and logged once when done.
    start = index(r"evaluation of the start \(step 0\) \.\.\.$")
    ticking = index(r"evaluation of the start \(step 0\): running, elapsed \d+:\d\d")
    assert start < ticking < index(r"evaluation of the start \(step 0\) done in ")
    assert index(r"train \d+/4 \(\d+%\)") < index(r"final evaluation \(step 4\) done in ")
    # The ending: the protocol, base -> trained, the run dir on one line and the next commands.
    assert index(r"base \(step 0\).*trained \(step 4\)") < index(r"^run dir: ")
    assert lines[index(r"^run dir: ")] == f"run dir: {tmp_path / 'run'}"
    for command in ("sesa eval ckpt=", "sesa revive ckpt=", "sesa diversity-report 'runs=["):
        assert any(line.strip().startswith(command) for line in lines), command
    assert any("protocol: 1 instances x 1024 samples" in line for line in lines)
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["status"] == "finished"


def _run_in_a_terminal(argv: list[str], cwd: Path, columns: int = 140) -> tuple[int, str]:
    """Run ``sesa <argv>`` with stdout and stderr on a pseudo-terminal; (exit code, everything it wrote)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = _env(TERM="xterm-256color", COLUMNS=str(columns), LINES="40")
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CI"):
        env.pop(name, None)
    proc = subprocess.Popen(_sesa(argv), stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=60), b"".join(chunks).decode(errors="replace")


@pytest.mark.e2e
def test_the_live_view_keeps_log_lines_out_of_the_bars(tmp_path, tiny_overrides, path_setup):
    # path_setup built the session's tiny base: the run loads it (transformers' "Loading weights" would show here)
    argv = [
        "train",
        *tiny_overrides,
        *SMALL,
        "eval.samples=16",
        "train.log_every=1",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    code, out = _run_in_a_terminal(argv, tmp_path)
    assert code == 0, out
    segments = [ANSI.sub("", s) for s in re.split(r"[\r\n]", out)]
    bars = [s for s in segments if "━" in s]
    logs = [s for s in segments if STAMP.search(s)]
    assert any(re.search(r"train\s.*\d/4", s) for s in bars), out  # the live view was drawn
    assert logs  # log lines were printed while it ran, and the metrics table every step (train.log_every=1)
    assert any(re.match(r"step 2/4 +(pi success|reward) ", s) for s in segments), out
    joined = [s for s in segments if "━" in s and STAMP.search(s)]
    assert not joined, joined
    for third_party in ("Writing model shards", "Loading weights", "it/s]", "Warning:"):
        assert third_party not in out
    assert any(s.startswith("run dir: ") for s in segments)


def test_a_failed_run_is_marked_and_commands_that_take_it_say_so(tmp_path, monkeypatch, capsys):
    # A task data file that is gone when the run starts (after Hydra made the run dir): the overrides' check, which
    # builds the task and so finds a missing file before any run dir exists (issue 49), is taken to have passed, as
    # for a file deleted between the check and the run.
    from sesa_cli.commands import validate

    monkeypatch.setattr(validate, "registry_problem", lambda config: None)
    run = tmp_path / "run"
    argv = ["train", "task=math", f"task.data={tmp_path / 'missing.jsonl'}", f"model.cache_dir={tmp_path / 'c'}",
            f"hydra.run.dir={run}"]  # fmt: skip
    code = run_cli(argv, monkeypatch)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1, err
    assert not run.exists()  # nothing but bookkeeping in it: removed (commands.common.drop_empty_run_dir)
    # a dir of the user's own files is refused before anything is written (issue 67), the note kept
    run.mkdir()
    (run / "notes.txt").write_text("kept\n")
    assert run_cli(argv, monkeypatch) == 2
    assert "holds files sesa did not write (notes.txt)" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]
    # a run dir that holds something else (an earlier attempt's .hydra/, and a note of the user's) stays, failed
    (run / ".hydra").mkdir()
    assert run_cli(argv, monkeypatch) == 2
    capsys.readouterr()
    assert (run / "notes.txt").read_text() == "kept\n"
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["exit_code"]) == ("failed", 2)
    assert "missing.jsonl" in info["reason"]
    for argv, command in ((["eval", f"ckpt={run}"], "eval"), (["revive", f"ckpt={run}"], "revive")):
        assert run_cli([*argv, f"hydra.run.dir={tmp_path / command}"], monkeypatch) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert f"run dir {run} is a failed train run (exit code 2: math data file" in err[0]
    report = ["diversity-report", f"runs=[{run}]", f"hydra.run.dir={tmp_path / 'report'}"]
    assert run_cli(report, monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{run} is a failed train run (exit code 2: " in err[0]


def test_a_missing_mandatory_key_is_the_commands_usage_line(monkeypatch, capsys):
    assert run_cli(["revive"], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("sesa revive: error: ckpt= is required; usage: sesa revive ckpt=RUN_DIR|CHECKPOINT")
    assert "Structured config" not in err[0]


def test_each_wrong_key_is_named_with_its_own_value(monkeypatch, capsys):
    assert run_cli(["train", "train.steps=-5", "train.batch_size=0"], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "train.steps=-5 must be >= 1" in err[0]
    assert "train.batch_size=0 must be >= 1" in err[0]
    assert run_cli(["train", "train.steps=-5"], monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert "train.steps=-5 must be >= 1" in err
    assert "batch_size" not in err


def test_busy_cores_does_not_count_a_finished_burst(monkeypatch) -> None:
    """threads=auto: the 1-minute load average lags (right after `pip install ... && sesa train` it still counts
    the install); the tasks running now bound it from above, so an idle machine gets all its cores."""
    import os

    from sesa_cli import cpus

    monkeypatch.setattr(os, "getloadavg", lambda: (0.9, 0.5, 0.2))
    busy = cpus.busy_cores()
    assert 0.0 <= busy <= 0.9  # never more than the average, never negative
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert cpus.busy_cores() == 0.0  # nothing busy: every core gets a thread


def test_a_library_warning_becomes_one_log_line_of_the_console(capsys):
    import logging
    import warnings

    from sesa_cli import progress

    root = logging.getLogger()
    saved = list(root.handlers)
    root.addHandler(logging.StreamHandler(sys.stderr))  # what Hydra's job logging installs
    logging.captureWarnings(False)  # an earlier in-process command's capture ended with its test's warning recorder
    try:
        progress.use_console()
        with warnings.catch_warnings(), progress.console.capture() as shown:
            warnings.simplefilter("always")
            warnings.warn("`past_key_values` is deprecated", FutureWarning, stacklevel=1)
    finally:
        logging.captureWarnings(False)
        root.handlers[:] = saved
    out = shown.get()
    assert capsys.readouterr().err == ""  # nothing raw on stderr, where it would break into the live view
    assert re.search(
        r"^\[\d\d:\d\d:\d\d\] warning: .*FutureWarning: `past_key_values` is deprecated", out, re.MULTILINE
    ), out


# ------------------------------------------------------------------------------------- 80 columns (issue 28 item 4)
LONG_ROW = {
    "policy/target_mass": 0.5123,
    "policy/effective_solutions": 3.21,
    "rollout/reward_mean": 0.45,
    "rollout/success": 0.4,
    "rollout/coverage": 0.25,
    "rollout/distinct_correct": 2.1,
    "rollout/entropy": 0.83,
    "time/step_s": 1.2,
    "collapse/flag": 1,
    "eval/success": 0.375,
    **{f"eval/pass@{k}": 0.5 for k in (1, 2, 4, 8, 16, 32, 64)},
    "eval/greedy_success": 1.0,
    **{f"loss/x{i}": 0.1 * i for i in range(40)},  # what the old dump printed: every float of the row
}


def _train_activity(completed: int = 12):
    from sesa_cli import progress

    act = progress.Activity("train", 100, completed)
    act.started -= 14  # 14 s in: a rate and an ETA
    act.info = progress._fmt(LONG_ROW, markup=False)
    act.markup_info = progress._fmt(LONG_ROW)
    return act


def test_a_plain_progress_line_keeps_the_count_and_clocks_at_80_columns_and_drops_metrics_first():
    act = _train_activity()
    wide = act.line(width=400)
    assert "pi success 0.512" in wide  # every metric when there is room
    assert "COLLAPSED" in wide
    line = act.line(width=80)
    assert len(line) <= 80, line
    assert re.match(r"train 12/100 \(12%\)  ETA \d+:\d\d  elapsed 0:1\d", line), line
    assert "COLLAPSED" not in line  # the last metrics went first
    narrow = act.line(width=50)
    assert re.fullmatch(r"train 12/100 \(12%\)  ETA \d+:\d\d  elapsed 0:1\d", narrow), narrow  # then the rate
    phase = __import__("sesa_cli.progress", fromlist=["Activity"]).Activity("evaluation (step 4)")
    assert re.fullmatch(r"evaluation \(step 4\): running, elapsed 0:00", phase.line(width=80))


def test_the_live_row_fits_80_columns_with_its_labelled_clocks():
    from rich.console import Console
    from rich.progress import Progress

    from sesa_cli import progress

    shown = Console(width=80, record=True, force_terminal=True, color_system=None)
    display = progress.Display()
    bars = Progress(progress._Row(display), console=shown, auto_refresh=False)
    for act in (_train_activity(), progress.Activity("model load (model=tiny, task=path, a long label)")):
        act.task_id = bars.add_task(act.label, total=act.total, completed=act.completed)
        display.by_task[act.task_id] = act
    shown.print(bars.make_tasks_table(bars.tasks))
    lines = shown.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert re.match(r"train ━+ 12/100  ETA \d+:\d\d  elapsed 0:1\d  \S+ s/step \| pi success 0.512", lines[0])
    assert re.match(r"model load \(model=tiny, task=path, a long label\): running, elapsed 0:00", lines[1])


def test_the_periodic_metrics_are_a_short_table_within_80_columns():
    from rich.console import Console

    from sesa_cli import progress

    shown = Console(width=80, record=True, color_system=None)
    shown.print(progress.metrics_table(10, 100, LONG_ROW))
    lines = shown.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert "…" not in "".join(lines)  # no value cut to fit
    # the widest values .3g gives, at a 5-digit step: fewer pairs to a line, still nothing cut
    widest = {k: 0.00721 if isinstance(v, float) else v for k, v in LONG_ROW.items()}
    shown.print(progress.metrics_table(12345, 99999, widest))
    wide_lines = shown.export_text().splitlines()
    assert all(len(line) <= 80 for line in wide_lines), wide_lines
    assert "…" not in "".join(wide_lines)
    assert "0.00721" in "".join(wide_lines)
    assert len(lines) <= 5  # the headline metrics, three to a line
    text = "\n".join(lines)
    assert lines[0].startswith("step 10/100")
    for shown_name in ("pi success", "pi eff.sol", "success", "s/step", "eval/success", "eval/pass@64"):
        assert shown_name in text, shown_name
    assert "eval/pass@32" not in text  # the largest k only
    assert "loss/" not in text


def test_the_training_rate_leaves_out_its_evaluations_and_shows_them_apart(monkeypatch):
    # issue 67: a SmolLM2 run's live view showed 596 s/step, its evaluations counted as steps
    import io

    from rich.console import Console

    from sesa_cli import progress

    monkeypatch.setattr(progress, "console", Console(file=io.StringIO(), width=80, color_system=None))
    display = progress.Display()
    train = display.begin("train", total=10)
    train.started -= 100  # 100 s in, 5 steps done ...
    display.update(train, completed=5)
    evaluation = display.begin("evaluation (step 4)")
    evaluation.started -= 80  # ... of which an evaluation took 80 s
    display.end(evaluation)
    checkpoint = display.begin("checkpoint (step 4)")
    checkpoint.started -= 4
    display.end(checkpoint)
    head, optional = train.clock()
    assert optional[0] == "3.2 s/step"  # (100 - 80 - 4) s / 5 steps, not 20 s/step
    assert optional[1:] == ["eval 1:20", "checkpoint 0:04"]
    assert "ETA 1:40" in head  # 5 steps to go at the pace so far, evaluations included
    assert "eval 1:20" in train.line(width=120)
    display.end(train)


def test_nested_activities_print_one_progress_line_at_a_time(monkeypatch):
    import io

    from rich.console import Console

    from sesa_cli import progress

    out = io.StringIO()
    monkeypatch.setattr(progress, "console", Console(file=out, width=80, color_system=None))
    monkeypatch.setenv(progress.PLAIN_SECONDS_ENV, "0")
    display = progress.Display()
    outer = display.begin("model load (model=tiny, task=path)")
    inner = display.begin("warm start (path)", total=20)
    for step in range(1, 4):
        display.update(inner, completed=step)
        time.sleep(0.5)
    display.end(inner)
    display.end(outer)
    lines = out.getvalue().splitlines()
    ticking = [line for line in lines if "elapsed" in line]
    assert len(ticking) >= 2, lines
    assert all("warm start (path)" in line for line in ticking), lines  # never the model load's clock between them
    assert all(len(line) <= 80 for line in lines), lines


@pytest.mark.e2e
def test_the_library_api_prints_through_the_one_console(tmp_path, tiny_overrides, path_setup):
    # sesa_cli.api in a fresh interpreter (a notebook's): one log format (the console's), no Hydra-format lines and
    # no transformers bars while it saves checkpoints
    script = f"from sesa_cli import api\napi.train({[*tiny_overrides, *SMALL]!r}, run_dir={str(tmp_path / 'run')!r})\n"
    proc = subprocess.run([sys.executable, "-c", script], env=_env(), capture_output=True, text=True, timeout=600,
                          check=False, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    both = proc.stdout + proc.stderr
    for unwanted in ("[INFO]", "][sesa", "Writing model shards", "it/s]"):  # Hydra's format: "[time][sesa.x][INFO] - "
        assert unwanted not in both, both
    assert re.search(r"^\[\d\d:\d\d:\d\d\] torch threads: ", proc.stdout, re.MULTILINE), proc.stdout
    assert sum("final evaluation (step 4) done in" in line for line in both.splitlines()) == 1  # once, not twice
