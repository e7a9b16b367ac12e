"""A sweep's jobs own their dirs before Hydra writes into them, a rerun of a sweep resumes it, and reports own their
dir as runs do (issue 50 cases 1-5; sesa_cli.commands.sweep, sesa_cli.commands.rundir).

The sweeps run ``python -m sesa_cli`` as a real subprocess (Hydra's multirun, a launcher's worker processes, the
signals a scheduler sends); the report cases run the CLI in-process on fabricated runs (tests/fake_runs.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fake_runs import write_run
from tests.test_damaged_inputs import check_one_line
from tests.test_run_ownership import wait_until

pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="pip install hydra-joblib-launcher (extra: test)")

S = ["sampler=parallel", "threads=1", "train.steps=3", "eval.instances=1", "eval.samples=2", "train.sample_every=0"]
"""The brief's small run (issue 50's S) on the session's small path base."""


def sesa(args: list[str], cwd: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "sesa_cli", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)  # fmt: skip


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    return proc.returncode, out, err


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` -> the sha256 of its bytes and its mtime (directories: their mtime)."""
    out = {}
    for path in sorted(root.rglob("*")):
        stamp = str(path.lstat().st_mtime_ns)
        out[str(path.relative_to(root))] = stamp + (
            ":" + hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        )
    return out


def rows(run: Path) -> list[dict]:
    """metrics.jsonl without timings (wall-clock)."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines]


def train_steps(run: Path) -> list[int]:
    if not (run / "metrics.jsonl").is_file():
        return []
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        with contextlib.suppress(ValueError):  # a line being written
            row = json.loads(line)
            if "rollout/reward_mean" in row:
                out.append(row["step"])
    return out


def status(run: Path) -> str:
    return json.loads((run / "run.json").read_text())["status"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory, tiny_overrides, path_setup) -> Path:
    """A0: a finished run of S, seed 0 (path_setup built the cached base, so every command here only loads it)."""
    run = tmp_path_factory.mktemp("a0") / "A0"
    mp = pytest.MonkeyPatch()
    try:
        assert run_cli(["train", *tiny_overrides, *S, "seed=0", f"hydra.run.dir={run}"], mp) == 0
    finally:
        mp.undo()
    return run


# ------------------------------------------------------------------------------- cases 1 and 2: a job's own dir
@pytest.mark.e2e
def test_a_sweep_skips_a_job_dir_holding_another_run_and_fails_an_unwritable_one(tmp_path, tiny_overrides,
                                                                                finished_run):  # fmt: skip
    sweep = tmp_path / "sw"
    sweep.mkdir()
    shutil.copytree(finished_run, sweep / "1", symlinks=True)  # case 1: another run (seed 0) where job 1 goes
    (sweep / "2").write_text("a file where job 2's dir goes\n")  # case 2: a job dir that cannot be made
    (sweep / "3").mkdir()
    (sweep / "3" / "train.log").mkdir()  # ... and one whose log file Hydra cannot open
    before = tree(sweep / "1")
    command = ["train", "-m", *tiny_overrides, *S, "seed=0,1,2,3,4", f"hydra.sweep.dir={sweep}"]
    code, out, err = finish(sesa(command, cwd=tmp_path))
    assert code == 1, err[-3000:]  # a job failed: non-zero, after every other job ran
    assert "Traceback" not in err
    assert tree(sweep / "1") == before  # byte for byte, mtimes included: nothing of A0 was touched
    assert (sweep / "2").read_text() == "a file where job 2's dir goes\n"
    assert sorted(p.name for p in (sweep / "3").iterdir()) == ["train.log"]
    for job, seed in (("0", 0), ("4", 4)):
        assert status(sweep / job) == "finished"
        assert train_steps(sweep / job) == [1, 2, 3]
        assert f"seed={seed}" in json.loads((sweep / job / "run.json").read_text())["overrides"]
    # one line per job that did not run
    lines = [line for line in err.splitlines() if line.startswith("sesa train: job")]
    assert len(lines) == 3, err[-3000:]
    assert lines[0].startswith(f"sesa train: job 1 skipped: job dir {sweep / '1'} already holds a run "
                               "(metrics.jsonl) that finished of another config (seed: 0 -> 1")  # fmt: skip
    assert lines[1] == f"sesa train: job 2 failed: job dir {sweep / '2'}: {sweep / '2'} is a file, not a directory"
    assert lines[2] == f"sesa train: job 3 failed: job dir {sweep / '3'} is not writable: {sweep / '3' / 'train.log'} is not a file"  # fmt: skip
    # the summary: the counts, then each job with its dir
    summary = out[out.index(f"sweep {sweep}: ") :].splitlines()
    assert summary[0] == f"sweep {sweep}: 2 finished, 1 refused, 2 failed"
    assert [line.split()[:2] for line in summary[1:6]] == [
        ["finished", f"{sweep / '0'}"],
        ["refused", f"{sweep / '1:'}"],
        ["failed", f"{sweep / '2:'}"],
        ["failed", f"{sweep / '3:'}"],
        ["finished", f"{sweep / '4'}"],
    ]
    # the report reads A0 as what it is, a finished run of seed 0 (before, Hydra's files in sw/1 said seed 1)
    assert json.loads((sweep / "1" / "run.json").read_text())["overrides"].count("seed=0") == 1

    # rerun with the same command: the finished jobs are skipped (with one line each), nothing is run again
    (sweep / "2").unlink()  # the file in the way is gone: job 2 runs now
    finished = {job: tree(sweep / job) for job in ("0", "4")}
    code, out, err = finish(sesa(command, cwd=tmp_path))
    assert code == 1, err[-3000:]  # job 3 still cannot write its log
    assert {job: tree(sweep / job) for job in ("0", "4")} == finished
    assert tree(sweep / "1") == before
    assert status(sweep / "2") == "finished"
    assert f"sweep {sweep}: 3 finished, 1 refused, 1 failed" in out
    assert f"sesa train: job 0: {sweep / '0'} holds this job's finished run: skipped" in err


def test_a_sweep_into_another_sweeps_dir_is_one_line(tmp_path, monkeypatch, capsys, tiny_overrides):
    sweep = tmp_path / "sw"
    sweep.mkdir()
    multirun = "hydra:\n  job:\n    config_name: train\n  overrides:\n    task:\n    - task=path\n    - seed=0,1\n"
    (sweep / "multirun.yaml").write_text(multirun)
    code = run_cli(["train", "-m", "task=path", "seed=0,1,2", f"hydra.sweep.dir={sweep}"], monkeypatch)
    check_one_line(code, capsys.readouterr().err, f"hydra.sweep.dir={sweep} holds another sweep (it ran seed=0,1 "
                                                  "where this command has seed=0,1,2); rerun that sweep's own command")  # fmt: skip
    code = run_cli(["eval", "-m", "task=path", "seed=0,1", f"hydra.sweep.dir={sweep}"], monkeypatch)
    check_one_line(code, capsys.readouterr().err, f"hydra.sweep.dir={sweep} holds another sweep (of sesa train)")
    assert sorted(p.name for p in sweep.iterdir()) == ["multirun.yaml"]


# ---------------------------------------------------------------------------- case 3 and the acceptance check
STEPS = 8
"""Training steps of each job of :func:`stopped_sweep_resumes`'s sweep."""


def stopped_sweep_resumes(tmp_path: Path, tiny_overrides: list[str], launcher: list[str],
                          rerun_launcher: list[str] | None = None) -> None:  # fmt: skip
    """A 3-job sweep stopped with SIGTERM during its second job, rerun with the same command, ends with 3 finished
    runs whose metrics equal an uninterrupted sweep's (timings aside): launcher-independent, so the uninterrupted
    sweep runs on Hydra's basic launcher (and the rerun on ``rerun_launcher`` when given: a sweep stopped on one
    machine, resumed on a cluster)."""
    # 8 short steps: a stop forwarded late (a Ray driver handles signals between its waits) still lands mid-run
    settings = [*tiny_overrides, *S, f"train.steps={STEPS}", "train.checkpoint_every=1", "seed=0,1,2"]
    whole, sweep = tmp_path / "whole", tmp_path / "sw"
    mp = pytest.MonkeyPatch()
    try:
        assert run_cli(["train", "-m", *settings, f"hydra.sweep.dir={whole}"], mp) == 0
    finally:
        mp.undo()

    command = ["train", "-m", *settings, *launcher, f"hydra.sweep.dir={sweep}"]
    proc = sesa(command, cwd=tmp_path)
    wait_until(proc, lambda: len(train_steps(sweep / "1")) >= 1)
    proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc)
    assert code == 143, err[-3000:]
    assert "Traceback" not in err
    assert status(sweep / "1") == "interrupted"
    stopped_at = max(train_steps(sweep / "1"))
    assert stopped_at < STEPS
    text = " ".join(out.split())  # the ending of the interrupted job, unwrapped: the sweep's own command resumes it
    assert f"stopped at step {stopped_at} of {STEPS}; continue with: sesa train -m " in text
    assert f"hydra.sweep.dir={sweep} (its finished jobs are skipped, this one resumes: train.resume=auto)" in text

    if rerun_launcher is not None:
        command = ["train", "-m", *settings, *rerun_launcher, f"hydra.sweep.dir={sweep}"]
    code, out, err = finish(sesa(command, cwd=tmp_path), timeout=600)
    assert code == 0, err[-3000:]
    assert f"sweep {sweep}: 3 finished, 0 refused, 0 failed" in out
    for job in ("0", "1", "2"):
        assert status(sweep / job) == "finished"
        assert rows(sweep / job) == rows(whole / job), job
    assert json.loads((sweep / "1" / "run.json").read_text())["resumed"] == [stopped_at]


@pytest.mark.e2e
def test_a_stopped_joblib_sweep_rerun_with_its_command_equals_the_uninterrupted_sweep(tmp_path, tiny_overrides,
                                                                                     path_setup):  # fmt: skip
    # two workers: jobs 0 and 1 run side by side, both stop after their step's checkpoint, job 2 never starts
    stopped_sweep_resumes(tmp_path, tiny_overrides, ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"])


@pytest.mark.e2e
def test_the_workers_of_a_killed_joblib_sweep_stop_within_a_step_and_the_rerun_resumes_them(tmp_path, tiny_overrides,
                                                                                         path_setup):  # fmt: skip
    # issue 67 case 7: SIGKILL to a joblib sweep's own process left its workers training to their end, holding their
    # dirs; they now see their parent gone at their next step boundary and stop after that step's checkpoint
    steps = 20
    settings = [*tiny_overrides, *S, f"train.steps={steps}", "seed=0,1", "hydra/launcher=joblib",
                "hydra.launcher.n_jobs=2"]  # fmt: skip
    sweep = tmp_path / "sw"
    command = ["train", "-m", *settings, f"hydra.sweep.dir={sweep}"]
    with (tmp_path / "out.log").open("w") as log:  # a file: the orphans go on writing where the sweep wrote
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "sesa_cli", *command], cwd=tmp_path, env=env, stdout=log,
                                stderr=subprocess.STDOUT)  # fmt: skip
        wait_until(proc, lambda: all(train_steps(sweep / job) for job in ("0", "1")))
        proc.kill()
        proc.wait(timeout=60)
    end = time.monotonic() + 120
    while not all((sweep / job / "run.json").is_file() and "status" in json.loads((sweep / job / "run.json").read_text())
                  for job in ("0", "1")):  # fmt: skip
        assert time.monotonic() < end, "the orphaned jobs did not stop"
        time.sleep(0.1)
    stopped = {}
    for job in ("0", "1"):
        info = json.loads((sweep / job / "run.json").read_text())
        assert (info["status"], info["reason"]) == ("interrupted", "the sweep's own process is gone")
        stopped[job] = max(train_steps(sweep / job))
        assert stopped[job] < steps
        assert (sweep / job / "checkpoints" / f"step_{stopped[job]:06d}" / "manifest.json").is_file()
    time.sleep(2)
    assert {job: max(train_steps(sweep / job)) for job in ("0", "1")} == stopped  # they stay stopped

    code, out, err = finish(sesa(command, cwd=tmp_path), timeout=600)
    assert code == 0, err[-3000:]
    assert f"sweep {sweep}: 2 finished, 0 refused, 0 failed" in out
    for job in ("0", "1"):
        assert status(sweep / job) == "finished"
        assert train_steps(sweep / job) == list(range(1, steps + 1))
        assert json.loads((sweep / job / "run.json").read_text())["resumed"] == [stopped[job]]


def test_a_sweeps_records_are_its_own_runs_not_an_earlier_runs_orphans(tmp_path, monkeypatch):
    # issue 67 case 7: an orphan of a killed sweep that ends after the rerun started writes its record into its own
    # run's folder, never over the rerun's ("3 finished, 0 refused" where the rerun refused three jobs)
    from sesa_cli.commands import sweep as sweeps

    root = tmp_path / "sw"
    monkeypatch.setenv(sweeps.SESSION, "first")
    orphan = sweeps.JobClaim(0, "train", root, root / "0", "own")
    sweeps.record(orphan, "running", "")
    monkeypatch.setenv(sweeps.SESSION, "rerun")
    sweeps.clear_records(root)
    sweeps.record(sweeps.JobClaim(0, "train", root, root / "0", "refused", "in use"), "refused", "in use")
    monkeypatch.setenv(sweeps.SESSION, "first")
    sweeps.record(orphan, "interrupted", "the sweep's own process is gone")  # the orphan ends, later
    monkeypatch.setenv(sweeps.SESSION, "rerun")
    lines, code = sweeps.summary(root)
    assert lines[0] == f"sweep {root}: 0 finished, 1 refused, 0 failed"
    assert code == 0


# ---------------------------------------------------------------------------------- cases 4 and 5: report dirs
def _runs(tmp_path: Path) -> tuple[Path, Path]:
    return (write_run(tmp_path / "par", {"sampler": "parallel", "seed": 0}),
            write_run(tmp_path / "seq", {"sampler": "sequential", "seed": 0}))  # fmt: skip


def test_a_report_never_writes_into_a_run_dir(tmp_path, monkeypatch, capsys):
    par, _ = _runs(tmp_path)
    before = tree(par)
    code = run_cli(["diversity-report", f"runs=[{par}]", f"hydra.run.dir={par}"], monkeypatch)
    check_one_line(code, capsys.readouterr().err, f"hydra.run.dir={par} holds a run (metrics.jsonl); a report never "
                                                  "writes into a run dir: choose a new directory")  # fmt: skip
    assert tree(par) == before
    # nor into a dir of other files, which a report's rerun would delete with its own
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("mine\n")
    code = run_cli(["diversity-report", f"runs=[{par}]", f"hydra.run.dir={other}"], monkeypatch)
    check_one_line(code, capsys.readouterr().err, f"hydra.run.dir={other} holds files that are not a sesa report "
                                                  "(todo.txt)")  # fmt: skip
    assert sorted(p.name for p in other.iterdir()) == ["todo.txt"]
    # and a train into a report's dir is refused as one into another run's
    report = tmp_path / "report"
    assert run_cli(["diversity-report", f"runs=[{par}]", f"hydra.run.dir={report}"], monkeypatch) == 0
    capsys.readouterr()
    code = run_cli(["train", "task=path", f"hydra.run.dir={report}"], monkeypatch)
    check_one_line(code, capsys.readouterr().err, f"hydra.run.dir={report} holds a report (report.html)")


def test_a_report_rerun_replaces_its_dir_whole_and_a_failed_one_leaves_it(tmp_path, monkeypatch, capsys):
    par, seq = _runs(tmp_path)
    out = tmp_path / "report"
    assert run_cli(["diversity-report", f"runs=[{par},{seq}]", f"hydra.run.dir={out}"], monkeypatch) == 0
    assert (out / "compare.csv").is_file()  # two groups
    assert run_cli(["diversity-report", f"runs=[{par}]", f"hydra.run.dir={out}"], monkeypatch) == 0
    assert not (out / "compare.csv").exists()  # one group: no stale comparison
    one_run = tree(out)
    for name in ("summary.csv", "report.md", "report.html"):  # the run of the first report is in none of them
        assert str(seq) not in (out / name).read_text(), name
    capsys.readouterr()
    # a rerun that fails, and one stopped while writing its files: the report there stays as it was
    assert run_cli(["diversity-report", f"runs=[{tmp_path / 'nope'}]", f"hydra.run.dir={out}"], monkeypatch) == 2
    from sesa_cli.report import document

    write_tables = document.write_tables

    def stopped_midway(report, out_dir):
        write_tables(report, out_dir)
        raise KeyboardInterrupt

    monkeypatch.setattr(document, "write_tables", stopped_midway)
    assert run_cli(["diversity-report", f"runs=[{par},{seq}]", f"hydra.run.dir={out}"], monkeypatch) == 130
    assert tree(out) == one_run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["par", "report", "seq"]  # no staging dir left beside it


def test_a_second_report_into_a_report_dir_in_use_is_refused(tmp_path, monkeypatch, capsys):
    par, seq = _runs(tmp_path)
    out = tmp_path / "report"
    first = sesa(["diversity-report", f"runs=[{par},{seq}]", f"hydra.run.dir={out}"], cwd=tmp_path)
    try:
        wait_until(first, lambda: (tmp_path / ".report.sesa-report").is_dir())  # the first holds the dir and writes
        os.kill(first.pid, signal.SIGSTOP)
        try:
            code = run_cli(["diversity-report", f"runs=[{par}]", f"hydra.run.dir={out}"], monkeypatch)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        line = check_one_line(code, capsys.readouterr().err, f"hydra.run.dir={out} is in use by another sesa command "
                                                             f"(pid {first.pid} on host ")  # fmt: skip
        assert "sesa diversity-report " in line
        code, _, err = finish(first)
    finally:
        first.kill()
    assert code == 0, err[-3000:]
    # the report there is the first's alone: two groups in every file
    assert (out / "compare.csv").is_file()
    for name in ("summary.csv", "report.md", "report.html"):
        assert str(seq) in (out / name).read_text(), name


@pytest.mark.e2e
def test_a_sweep_stopped_here_resumes_on_submitit(tmp_path, tiny_overrides, path_setup):
    # submitit's local executor runs each job in a process of its own, through the launcher sesa's SLURM preset
    # uses (run_job inside a pickled submission): the interrupted job resumes, the missing one runs
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install 'sesa[launchers]'")
    stopped_sweep_resumes(tmp_path, tiny_overrides, [], rerun_launcher=["hydra/launcher=submitit_local"])


def test_a_report_sweep_writes_each_report_whole_into_its_own_job_dir(tmp_path, monkeypatch, capsys):
    # a report's job dir goes through the same claim: staged beside it, published whole (no staging dir left), and a
    # rerun replaces it
    par, seq = _runs(tmp_path)
    sweep = tmp_path / "sw"
    argv = ["diversity-report", "-m", f"runs=[{par}],[{par},{seq}]", f"hydra.sweep.dir={sweep}"]
    for _ in range(2):
        assert run_cli(argv, monkeypatch) == 0
        assert f"sweep {sweep}: 2 finished, 0 refused, 0 failed" in capsys.readouterr().out
        assert sorted(p.name for p in sweep.iterdir()) == [".sesa-jobs", "0", "1", "multirun.yaml"]
        assert not (sweep / "0" / "compare.csv").exists()
        assert (sweep / "1" / "compare.csv").is_file()
        for job in ("0", "1"):
            assert (sweep / job / "report.html").is_file()
            assert (sweep / job / ".hydra" / "overrides.yaml").is_file()
