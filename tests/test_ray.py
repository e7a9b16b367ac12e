"""``hydra/launcher=ray``: a sweep's jobs run as Ray tasks on a local Ray the launcher starts, one CPU each; every run
dir is complete and the report reads the sweep; scripts/results.py writes its --smoke page through a local Ray cluster
of two workers. Ray is a large install (``sesa[ray]``): ``nox -s integrations`` runs this."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts import results as R

pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="pip install 'sesa[ray]' (nox -s integrations)")

SMALL = ["train.steps=2", "train.batch_size=2", "sampler.group_size=2", "eval.samples=4"]


def test_a_ray_sweep_runs_four_jobs_on_one_cpu_each(tmp_path: Path, tiny_overrides, path_setup) -> None:
    # path_setup built the cached tiny base, so the jobs only load it
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "sesa_cli", "train", "-m", "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2",
           "+hydra.launcher.ray.init.include_dashboard=false", "+hydra.launcher.ray.remote.num_cpus=1",
           "seed=0,1,2,3", *tiny_overrides, *SMALL, f"hydra.sweep.dir={sweep}"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # Ray sets it from each task's num_cpus
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Ray Launcher is launching 4 jobs" in proc.stdout + proc.stderr
    seeds = set()
    for job in ("0", "1", "2", "3"):
        run = sweep / job
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows if "rollout/reward_mean" in r] == [1, 2]
        assert [r["step"] for r in rows if "eval/success" in r] == [0, 2]  # the base and the final evaluation
        assert (run / "checkpoints" / "step_000002" / "trainer_state.json").is_file()
        assert (run / "metrics.csv").is_file()
        info = json.loads((run / "run.json").read_text())
        assert info["status"] == "finished"
        assert info["torch_threads"] == 1  # Ray's OMP_NUM_THREADS for a task of one CPU
        seeds |= {o for o in info["overrides"] if o.startswith("seed=")}
        # the job ran as a Ray task: the launcher names each job by its index
        assert "id: job_id_for_" + job in (run / ".hydra" / "hydra.yaml").read_text()
    assert seeds == {"seed=0", "seed=1", "seed=2", "seed=3"}

    out = tmp_path / "report"
    cmd = [sys.executable, "-m", "sesa_cli", "diversity-report", f"runs=[{sweep}]", f"hydra.run.dir={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import pandas as pd

    summary = pd.read_csv(out / "summary.csv")  # a row per run and metric
    assert sorted(set(summary["seed"])) == [0, 1, 2, 3]
    assert summary["group"].nunique() == 1  # one setting, four seeds
    success = summary[summary["metric"] == "eval/success"]
    assert len(success) == 4
    for name in ("report.md", "report.html"):
        assert (out / name).is_file(), name


@pytest.mark.e2e
def test_a_stopped_ray_sweep_rerun_with_its_command_equals_the_uninterrupted_sweep(tmp_path, tiny_overrides,
                                                                                  path_setup):  # fmt: skip
    # issue 50's acceptance check on Ray: SIGTERM to the sweep's own process during its second job; the Ray tasks
    # running then stop after their step's checkpoint, the job not started yet does nothing, and the same command
    # resumes the sweep (tests/test_sweep_ownership.py runs it on joblib)
    from tests.test_sweep_ownership import stopped_sweep_resumes

    ray = ["hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2", "+hydra.launcher.ray.init.include_dashboard=false",
           "+hydra.launcher.ray.remote.num_cpus=1"]  # fmt: skip
    stopped_sweep_resumes(tmp_path, tiny_overrides, ray)


def _processes_naming(text: str) -> list[str]:
    """The command lines of this machine's processes that hold ``text`` (Ray's processes name their temp dir)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line:
            found.append(f"{proc.name}: {line[:200]}")
    return found


@pytest.mark.e2e
def test_one_ctrl_c_stops_a_ray_sweep_at_its_jobs_next_checkpoint_and_leaves_no_ray_process(tmp_path, tiny_overrides,
                                                                                          path_setup):  # fmt: skip
    # issue 67 case 6: Ray's workers block SIGINT, so the Ctrl-C the sweep forwarded never reached its jobs, which
    # trained to their end; the jobs now see the sweep's stop mark at their next step boundary
    import shutil
    import signal
    import tempfile
    import time

    from tests.test_run_ownership import wait_until
    from tests.test_sweep_ownership import S, train_steps

    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths must stay under 108 bytes
    steps = 40
    sweep = tmp_path / "sw"
    cmd = [sys.executable, "-m", "sesa_cli", "train", "-m", "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2",
           "+hydra.launcher.ray.init.include_dashboard=false", "+hydra.launcher.ray.remote.num_cpus=1",
           f"+hydra.launcher.ray.init._temp_dir={temp}", *tiny_overrides, *S, f"train.steps={steps}", "seed=0,1",
           f"hydra.sweep.dir={sweep}"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    with (tmp_path / "out.log").open("w") as log:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_until(proc, lambda: all(train_steps(sweep / job) for job in ("0", "1")))
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    out = (tmp_path / "out.log").read_text()
    assert proc.returncode == 130, out[-3000:]
    assert "stopping the sweep after its running jobs' checkpoints" in out
    for job in ("0", "1"):
        info = json.loads((sweep / job / "run.json").read_text())
        assert (info["status"], info["reason"], info["exit_code"]) == ("interrupted", "Ctrl-C", 130)
        last = max(train_steps(sweep / job))
        assert last < steps
        assert (sweep / job / "checkpoints" / f"step_{last:06d}" / "manifest.json").is_file()
    assert f"sweep {sweep}: 0 finished, 0 refused, 0 failed, 2 interrupted" in out
    end = time.monotonic() + 60
    while _processes_naming(str(temp)):
        assert time.monotonic() < end, _processes_naming(str(temp))
        time.sleep(0.5)
    shutil.rmtree(temp, ignore_errors=True)  # Ray's session files (only once no process holds them)


def test_the_smoke_page_through_a_local_ray_cluster_of_two_workers(
    tmp_path: Path, cache_dir: Path, path_setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 69: `python scripts/results.py --smoke --launcher ray --address ADDR` on a cluster of a head without CPUs
    # and two workers of one CPU each, claim I's two runs on the tiny base path_setup built (the smoke's small world at
    # the tests' 600 warm-start steps); run again, it resumes: nothing runs, the page is written
    from ray.cluster_utils import Cluster

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the workers inherit this process's environment
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        root = tmp_path / "claims"
        script = Path(__file__).resolve().parents[1] / "scripts" / "results.py"
        ray = ["--launcher", "ray", "--address", cluster.address]
        base = [f"model.cache_dir={cache_dir}", "model.warm_start_steps=600"]
        cmd = [sys.executable, str(script), "--smoke", "--claims", "I", *ray, "--root", str(root), *base]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        log = (root / "logs" / "collapse.log").read_text()
        assert "Ray Launcher is launching 2 jobs" in log, log[-3000:]
        assert "hydra.launcher.n_jobs" not in log
        spans = []
        for job in ("0", "1"):
            assert "id: job_id_for_" + job in (root / "collapse" / job / ".hydra" / "hydra.yaml").read_text()
            info = json.loads((root / "collapse" / job / "run.json").read_text())
            assert (info["status"], info["torch_threads"]) == ("finished", 1)
            stamps = [line[1:24] for line in (root / "collapse" / job / "train.log").read_text().splitlines()
                      if line.startswith("[20")]  # fmt: skip
            spans.append((stamps[0], stamps[-1]))  # its log's first and last line, to the millisecond
        assert max(s for s, _ in spans) < min(e for _, e in spans)  # at once: one on each worker (the head has no CPU)
        page = root / "docs" / "results.md"
        text = page.read_text()
        assert "**Smoke run**" in text
        assert "through Hydra's ray launcher" in text
        assert "The page's 2 runs took" in text
        section = R.page_sections(text)["I"]
        assert any(line.startswith("Seeds 0, 1: 2 runs under `<root>`") for line in section), section
        assert "Not run yet." not in section

        page.unlink()
        logs = sorted((root / "logs").iterdir())
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert "[results] collapse:" not in again.stdout  # every job has its run: no multirun starts
        assert sorted((root / "logs").iterdir()) == logs
        assert "**Smoke run**" in page.read_text()
    finally:
        cluster.shutdown()
