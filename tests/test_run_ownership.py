"""A run owns its dir, survives the signals schedulers send, and resumes when its command runs again (issue 31 cases
1, 2, 6, 9; issue 33 item 3).

* Two commands into one run dir: the second stops with one line naming the holder, exit 2; the first run's records
  stay its own (sesa_cli.run_lock).
* SIGTERM and SIGUSR1 stop a run as Ctrl-C does: an interrupt checkpoint, run.json ``interrupted``, exit 128 + the
  signal; the run dir is consistent wherever the signal lands, during a checkpoint write too (sesa_cli.commands.interrupt).
* Rerunning the same ``sesa train`` command into the dir of a stopped run (SIGTERM, SIGKILL) continues it from its
  last checkpoint, bit-identical to the run never stopped (``train.resume=auto``).
* A full disk, a read-only file system, a run dir deleted mid-run or a symlink loop: one line, exit 2, no ``.tmp``.

The signal cases run ``python -m sesa_cli`` as a real subprocess, as a scheduler would stop it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.conftest import run_cli
from tests.test_damaged_inputs import check_one_line

RUN = ["sampler=parallel", "train.batch_size=2", "sampler.group_size=4", "eval.samples=4", "train.sample_every=0",
       "threads=1"]  # fmt: skip


def _sesa(args: list[str], cwd: Path, stdout: int = subprocess.DEVNULL) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "sesa_cli", *args], cwd=cwd, env=env, text=True, stdout=stdout,
                            stderr=subprocess.PIPE)  # fmt: skip


def _lines(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):  # a line being written
            out.append(json.loads(line))
    return out


def wait_until(proc: subprocess.Popen, until: Callable[[], bool], timeout: float = 600) -> None:
    """Poll ``until`` every 5 ms while ``proc`` runs; fail if it ends first or the time runs out (generous: on a loaded
    machine a Ray sweep took over 300 s to reach its first step; a process that dies fails at once)."""
    end = time.monotonic() + timeout
    while not until():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def _train_steps(run: Path) -> list[int]:
    return [r["step"] for r in _lines(run / "metrics.jsonl") if "rollout/reward_mean" in r]


def _checkpoint_steps(run: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in (run / "checkpoints").glob("step_*") if p.name[5:].isdigit())


def _tmp_files(run: Path) -> list[Path]:
    return [p for p in run.rglob("*") if p.name.endswith(".tmp")]


def _check_checkpoint(run: Path, step: int) -> dict:
    """The checkpoint at ``step`` is complete: every file a resumed run reads passes sesa's checks and loads."""
    from sesa_cli.runs import check_checkpoint

    ckpt = run / "checkpoints" / f"step_{step:06d}"
    state = check_checkpoint(ckpt, training=True)
    assert state["step"] == step
    assert load_file(ckpt / "model.safetensors")
    torch.load(ckpt / "optimizer.pt", weights_only=True)
    return state


def _check_own_run(run: Path, seed: int, steps: int) -> None:
    """``run`` holds one finished run of ``seed``: its steps in order, its config, its checkpoints, no leftovers."""
    assert _train_steps(run) == list(range(1, steps + 1))
    all_steps = [r["step"] for r in _lines(run / "metrics.jsonl")]
    assert all_steps == sorted(all_steps)
    assert yaml.safe_load((run / "config.yaml").read_text())["seed"] == seed
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "finished"
    assert f"seed={seed}" in info["overrides"]
    for step in _checkpoint_steps(run):
        assert _check_checkpoint(run, step)["config"]["seed"] == seed
    assert not _tmp_files(run)
    assert not (run / ".sesa.lock").exists()


# ------------------------------------------------------------------------------------------- case 1: one dir, one run
@pytest.mark.e2e
def test_a_second_command_into_a_run_dir_in_use_stops_naming_the_holder(tmp_path, tiny_overrides, path_setup):
    # path_setup built the cached tiny base, so the commands only load it
    run = tmp_path / "run"
    settings = [*tiny_overrides, *RUN, "train.steps=20", "train.checkpoint_every=5", f"hydra.run.dir={run}"]
    first = _sesa(["train", *settings, "seed=1"], cwd=tmp_path)
    try:
        wait_until(first, lambda: len(_train_steps(run)) >= 2)  # training, with records on disk
        # held still while the second command starts (seconds of imports), which the first's 20 short steps could
        # otherwise outrun: then it would find a finished run instead of one in use
        os.kill(first.pid, signal.SIGSTOP)
        try:
            second = _sesa(["train", *settings, "seed=2"], cwd=tmp_path)
            _, err = second.communicate(timeout=300)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        line = check_one_line(second.returncode, err, f"hydra.run.dir={run} is in use by another sesa command "
                                                      f"(pid {first.pid} on host ")  # fmt: skip
        assert "sesa train " in line
        assert "seed=1" in line
        assert ", started 20" in line
        _, err = first.communicate(timeout=600)
    finally:
        first.kill()
    assert first.returncode == 0, err[-3000:]
    _check_own_run(run, seed=1, steps=20)


@pytest.mark.e2e
def test_two_commands_started_at_the_same_instant_leave_one_run(tmp_path, tiny_overrides, path_setup):
    run = tmp_path / "run"
    settings = [*tiny_overrides, *RUN, "train.steps=10", "train.checkpoint_every=2", f"hydra.run.dir={run}"]
    procs = {seed: _sesa(["train", *settings, f"seed={seed}"], cwd=tmp_path) for seed in (1, 2)}
    errs = {seed: p.communicate(timeout=600)[1] for seed, p in procs.items()}
    codes = {seed: p.returncode for seed, p in procs.items()}
    assert sorted(codes.values()) == [0, 2], errs
    winner = next(seed for seed, code in codes.items() if code == 0)
    loser = 3 - winner
    check_one_line(codes[loser], errs[loser], f"hydra.run.dir={run} is in use by another sesa command (")
    _check_own_run(run, seed=winner, steps=10)


def test_the_lock_names_a_live_holder_and_takes_over_a_dead_ones_record(tmp_path):
    from sesa_cli import run_lock
    from sesa_cli.config import ConfigError

    run = tmp_path / "run"
    script = (
        "import sys, time; from pathlib import Path; from sesa_cli import run_lock; d = Path(sys.argv[1]); "
        "run_lock.claim(d, 'train', ['seed=1']); run_lock.record(d, 'train', ['seed=1']); print('held', flush=True); "
        "time.sleep(120)"
    )
    holder = subprocess.Popen([sys.executable, "-c", script, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=rf"is in use by another sesa command \(pid {holder.pid} on host "):
            run_lock.claim(run, "train", ["seed=2"])
    finally:
        holder.kill()
        holder.wait()
    # Killed: the kernel dropped its lock; its record stays behind and is taken over.
    assert json.loads((run / ".sesa.lock").read_text())["pid"] == holder.pid
    assert run_lock.claim(run, "train", ["seed=2"])
    try:
        assert not run_lock.alive(json.loads((run / ".sesa.lock").read_text()))
        run_lock.record(run, "train", ["seed=2"])
        assert json.loads((run / ".sesa.lock").read_text())["pid"] == os.getpid()
        assert not run_lock.claim(run, "train", ["seed=2"])  # held already by this process
    finally:
        run_lock.release(run)
    assert not (run / ".sesa.lock").exists()


# ---------------------------------------------------------------------------------- case 2: SIGTERM as Ctrl-C
def _checkpoint_being_written(run: Path) -> bool:
    return any((run / "checkpoints").glob("*.tmp"))


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("sig", "when", "twice"),
    [
        (signal.SIGTERM, "rows", False),
        (signal.SIGTERM, "checkpoint-write", False),
        (signal.SIGUSR1, "rows", False),
        (signal.SIGTERM, "checkpoint-write", True),  # a second signal stops at once, wherever it lands
    ],
    ids=["sigterm", "sigterm-during-checkpoint-write", "sigusr1", "sigterm-twice"],
)
def test_a_signal_saves_a_checkpoint_and_marks_the_run_interrupted(tmp_path, tiny_overrides, path_setup, sig,
                                                                    when, twice):  # fmt: skip
    run = tmp_path / "run"
    # A checkpoint every step, so signals land during checkpoint writes too.
    proc = _sesa(["train", *tiny_overrides, *RUN, "train.steps=40", "train.checkpoint_every=1",
                  f"hydra.run.dir={run}"], cwd=tmp_path, stdout=subprocess.PIPE)  # fmt: skip
    try:
        if when == "rows":
            wait_until(proc, lambda: len(_train_steps(run)) >= 3)
        else:
            wait_until(proc, lambda: _checkpoint_being_written(run))
        proc.send_signal(sig)
        if twice:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err[-3000:]
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"sesa train: interrupted ({sig.name})"
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["reason"], info["exit_code"]) == ("interrupted", sig.name, 128 + sig)
    assert info["compute"]["train_flops"] > 0  # what the run spent until it stopped (sesa_cli.compute)
    assert not _tmp_files(run)
    assert not (run / ".sesa.lock").exists()
    steps = _train_steps(run)
    last = _checkpoint_steps(run)[-1]
    _check_checkpoint(run, last)
    if not twice:  # the step under way finished and its checkpoint holds it: nothing lost
        assert last == steps[-1]
        # the ending names the commands that continue the run: this very command into this run dir, or a revival
        text = " ".join(out.split())
        assert f"stopped at step {last} of 40; continue with: sesa train {' '.join(tiny_overrides)} " in text
        assert f"hydra.run.dir={run} (train.resume=auto) or sesa revive ckpt=run more_steps={40 - last}" in text
    else:
        assert last <= steps[-1]


# ------------------------------------------------------------------------------- issue 33: rerun resumes exactly
def _rows(run: Path) -> list[dict]:
    """metrics.jsonl rows without timings (wall-clock)."""
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in _lines(run / "metrics.jsonl")]


def _counts(run: Path) -> dict:
    """run.json's compute block without its seconds (wall-clock)."""
    block = json.loads((run / "run.json").read_text())["compute"]
    phases = {name: {k: v for k, v in cost.items() if k != "seconds"} for name, cost in block["phases"].items()}
    return {**block, "phases": phases}


@pytest.mark.e2e
def test_a_stopped_run_rerun_with_its_command_equals_the_uninterrupted_run(tmp_path, monkeypatch, tiny_overrides,
                                                                          path_setup):  # fmt: skip
    settings = [*tiny_overrides, *RUN, "train.steps=10", "train.checkpoint_every=3", "train.eval_every=4", "seed=5"]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert run_cli(["train", *settings, f"hydra.run.dir={whole}"], monkeypatch) == 0
    command = ["train", *settings, f"hydra.run.dir={stopped}"]

    # SIGTERM after step 3 or later: the interrupt checkpoint holds the last step
    proc = _sesa(command, cwd=tmp_path)
    wait_until(proc, lambda: len(_train_steps(stopped)) >= 3)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=300)
    assert proc.returncode == 143
    first_stop = _checkpoint_steps(stopped)[-1]
    assert first_stop >= 3

    # the same command resumes; SIGKILL once step 7 is logged (the checkpoint at 6 is the last): no ending at all,
    # the row of step 7 lies past the last checkpoint and the lock's record stays behind
    proc = _sesa(command, cwd=tmp_path)
    wait_until(proc, lambda: 7 in _train_steps(stopped))
    proc.kill()
    proc.communicate(timeout=60)
    assert (stopped / ".sesa.lock").exists()
    assert _checkpoint_steps(stopped)[-1] < 7

    proc = _sesa(command, cwd=tmp_path)  # resumes from the checkpoint at 6: the rows after it are dropped
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    info = json.loads((stopped / "run.json").read_text())
    assert info["status"] == "finished"
    assert info["resumed"] == [first_stop, 6]

    assert _rows(stopped) == _rows(whole)  # compute/* included: what training spent by each step
    # the compute on record: every phase's tokens and FLOPs those of the run never stopped (the seconds are its own)
    assert _counts(stopped) == _counts(whole)
    assert _counts(whole)["train_flops"] > 0
    final = "checkpoints/step_000010"
    a, b = load_file(whole / final / "model.safetensors"), load_file(stopped / final / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    opt_a = torch.load(whole / final / "optimizer.pt", weights_only=True)["state"]
    opt_b = torch.load(stopped / final / "optimizer.pt", weights_only=True)["state"]
    assert opt_a.keys() == opt_b.keys()
    assert all(torch.equal(opt_a[i][k], opt_b[i][k]) for i in opt_a for k in ("exp_avg", "exp_avg_sq"))
    assert not _tmp_files(stopped)


def test_submitits_preemption_signal_checkpoints_then_requeues_and_the_requeued_job_resumes(
    tmp_path, monkeypatch, tiny_overrides, path_setup
):
    """What submitit does on SLURM (its handler of SIGUSR2 checkpoints the submission, requeues the job with the same
    command and exits), with a stand-in for that handler: the trainer finishes its step and saves a checkpoint
    first, run.json says interrupted, and the requeued command resumes the run."""
    from sesa_cli import progress

    run = tmp_path / "run"
    command = ["train", *tiny_overrides, *RUN, "train.steps=4", "train.checkpoint_every=0", f"hydra.run.dir={run}"]
    requeued: list[int] = []

    def submitit_handler(signum, frame):
        requeued.append(signum)
        raise SystemExit(-1)  # submitit's SignalHandler._exit after requeueing

    update = progress.TrainProgress.update

    def preempted_at_step_2(self, step, row):
        update(self, step, row)
        if step == 2:
            os.kill(os.getpid(), signal.SIGUSR2)

    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL", raising=False)
    monkeypatch.setattr(progress.TrainProgress, "update", preempted_at_step_2)
    previous = signal.signal(signal.SIGUSR2, submitit_handler)
    try:
        assert run_cli(command, monkeypatch) == -1
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert requeued == [signal.SIGUSR2]  # handed on once, after the checkpoint
    assert _checkpoint_steps(run) == [2]
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["reason"]) == ("interrupted", "SIGUSR2")
    monkeypatch.setattr(progress.TrainProgress, "update", update)
    assert run_cli(command, monkeypatch) == 0  # the requeued job: the same command
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["resumed"]) == ("finished", [2])
    assert _train_steps(run) == [1, 2, 3, 4]


def test_the_submitit_preset_composes_and_requeues_the_same_job(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install 'sesa[launchers]'")
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from sesa_cli.commands.schemas import register_configs
    from sesa_cli.commands.validate import validate_argv
    from sesa_cli.config import conf_dir

    sweep = ["-m", "hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu", "task=path", "seed=0,1",
             f"hydra.sweep.dir={tmp_path / 'sweep'}"]  # fmt: skip
    assert validate_argv("train", sweep) is None
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        cfg = compose("train", overrides=sweep[1:4], return_hydra_config=True)
    launcher = instantiate(cfg.hydra.launcher)
    assert type(launcher).__name__ == "SlurmLauncher"
    # submitit calls the launcher's checkpoint() on preemption: a resubmission of the same job (same overrides, same
    # job number, so the same job dir), which train.resume=auto then continues
    job = (["seed=0"], "hydra.sweep.dir", 0, "job_id_for_0", {})
    delayed = launcher.checkpoint(*job)
    assert type(delayed).__name__ == "DelayedSubmission"
    assert delayed.function is launcher
    assert delayed.args == job


# ------------------------------------------------------------------- case 6: full disk, read-only file system
def _raise(exc: BaseException) -> Callable[..., None]:
    def raising(*args, **kwargs):
        raise exc

    return raising


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "no space left on device while writing {ckpt}"),
        (OSError(errno.EROFS, "Read-only file system"), "read-only file system: cannot write {ckpt}"),
        # torch's zip writer on a full disk says only that a write came up short
        (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4160 vs 4054"),
         "no space left on device while writing {ckpt}"),
    ],
    ids=["enospc", "erofs", "torch-short-write"],
)  # fmt: skip
def test_a_checkpoint_write_that_fails_is_one_line_and_leaves_no_tmp(tmp_path, monkeypatch, capsys, tiny_overrides,
                                                                     path_setup, error, expected):  # fmt: skip
    import sesa_cli.runs

    run = tmp_path / "run"
    monkeypatch.setattr(torch, "save", _raise(error))
    real_usage = shutil.disk_usage
    monkeypatch.setattr(sesa_cli.runs.shutil, "disk_usage", lambda p: real_usage(p)._replace(free=4096))
    capsys.readouterr()
    code = run_cli(["train", *tiny_overrides, *RUN, "train.steps=2", "train.checkpoint_every=1",
                    f"hydra.run.dir={run}"], monkeypatch)  # fmt: skip
    line = check_one_line(code, capsys.readouterr().err, expected.format(ckpt=run / "checkpoints" / "step_000001"))
    assert line.startswith("sesa train: error: ")
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["exit_code"]) == ("failed", 2)
    assert info["compute"]["phases"]["update"]["backward_flops"] > 0  # what the failed run spent (sesa_cli.compute)
    assert not _tmp_files(run)
    assert not _checkpoint_steps(run)


def test_a_run_json_that_cannot_be_written_is_one_line_and_leaves_no_tmp(tmp_path, monkeypatch, capsys,
                                                                         tiny_overrides, path_setup):  # fmt: skip
    import sesa_cli.runs

    run = tmp_path / "run"
    replace = os.replace

    def full_disk(src, dst):
        if Path(dst).name == "run.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        replace(src, dst)

    monkeypatch.setattr(sesa_cli.runs.os, "replace", full_disk)
    capsys.readouterr()
    code = run_cli(["train", *tiny_overrides, *RUN, "train.steps=2", f"hydra.run.dir={run}"], monkeypatch)
    check_one_line(code, capsys.readouterr().err, f"no space left on device while writing {run / 'run.json'}")
    assert not _tmp_files(run)


# ----------------------------------------------------------- case 9: a run dir deleted mid-run, a symlink loop
def test_a_run_dir_deleted_mid_run_stops_the_run_with_one_line(tmp_path, monkeypatch, capsys, tiny_overrides,
                                                               path_setup):  # fmt: skip
    from sesa_cli.trainer import Trainer

    run = tmp_path / "run"
    step = Trainer.train_step

    def deleted_after_step_1(self):
        row = step(self)
        if self.step == 1:
            shutil.rmtree(run)
        return row

    monkeypatch.setattr(Trainer, "train_step", deleted_after_step_1)
    capsys.readouterr()
    code = run_cli(["train", *tiny_overrides, *RUN, "train.steps=3", f"hydra.run.dir={run}"], monkeypatch)
    check_one_line(
        code,
        capsys.readouterr().err,
        f"run dir {run} disappeared while writing metrics.jsonl (deleted or unmounted); the run stopped",
    )
    assert not run.exists()  # not recreated half-empty


@pytest.mark.parametrize("kind", ["loop", "parent-loop", "dangling"])
def test_a_run_dir_that_is_a_broken_symlink_is_one_line(tmp_path, monkeypatch, capsys, tiny_overrides, kind):
    link = tmp_path / "link"
    if kind == "loop":
        link.symlink_to(link)
        run = link
    elif kind == "parent-loop":
        link.symlink_to(tmp_path / "other")
        (tmp_path / "other").symlink_to(link)
        run = link / "run"
    else:
        link.symlink_to(tmp_path / "gone")
        run = link
    capsys.readouterr()
    code = run_cli(["train", *tiny_overrides, f"hydra.run.dir={run}"], monkeypatch)
    check_one_line(
        code,
        capsys.readouterr().err,
        f"hydra.run.dir={run}: {link} is a symlink that leads nowhere (a loop, or its target is gone)",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["link", *(["other"] if kind == "parent-loop" else [])]
    )


def test_under_submitit_sigterm_stays_submitits_and_its_preemption_signal_is_deferred(monkeypatch):
    from sesa_cli.commands import interrupt as stopping

    def bypass(signum, frame):  # what submitit installs for SIGTERM
        pass

    def requeue(signum, frame):  # and for its preemption signal
        pass

    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL", raising=False)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    signal.signal(signal.SIGTERM, bypass)
    signal.signal(signal.SIGUSR2, requeue)
    try:
        with stopping.stop_after_step("sesa train") as stop:
            assert signal.getsignal(signal.SIGTERM) is bypass
            assert signal.getsignal(signal.SIGUSR2) is not requeue
            assert signal.getsignal(signal.SIGUSR1) is signal.getsignal(signal.SIGINT)  # the deferring handler
            assert stop.chained is requeue
        assert signal.getsignal(signal.SIGUSR2) is requeue
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    with stopping.stop_after_step("sesa train") as stop:  # without submitit: SIGTERM stops the run as Ctrl-C does
        assert signal.getsignal(signal.SIGTERM) is signal.getsignal(signal.SIGINT)
        assert stop.chained is None


@pytest.mark.e2e
def test_a_stopped_revive_rerun_with_its_command_equals_the_uninterrupted_revive(tmp_path, monkeypatch,
                                                                                tiny_overrides, path_setup):  # fmt: skip
    from sesa_cli import progress

    parent, whole, stopped = tmp_path / "parent", tmp_path / "whole", tmp_path / "stopped"
    settings = [*tiny_overrides, *RUN, "train.steps=4", "train.checkpoint_every=2", "seed=3"]
    assert run_cli(["train", *settings, f"hydra.run.dir={parent}"], monkeypatch) == 0
    revive = ["revive", f"ckpt={parent}", "sampler=sequential", "more_steps=5", "train.checkpoint_every=2"]
    assert run_cli([*revive, f"hydra.run.dir={whole}"], monkeypatch) == 0

    update = progress.TrainProgress.update

    def sigterm_at_step_7(self, step, row):
        update(self, step, row)
        if step == 7:
            os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler would: deferred to this step's checkpoint

    monkeypatch.setattr(progress.TrainProgress, "update", sigterm_at_step_7)
    assert run_cli([*revive, f"hydra.run.dir={stopped}"], monkeypatch) == 143
    assert _checkpoint_steps(stopped) == [6, 7]
    monkeypatch.setattr(progress.TrainProgress, "update", update)
    assert run_cli([*revive, f"hydra.run.dir={stopped}"], monkeypatch) == 0
    assert json.loads((stopped / "run.json").read_text())["resumed"] == [7]
    assert _rows(stopped) == _rows(whole)  # the parent's rows (revive/parent), then steps 5-9 and the evaluations
    final = "checkpoints/step_000009"
    a, b = load_file(whole / final / "model.safetensors"), load_file(stopped / final / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
