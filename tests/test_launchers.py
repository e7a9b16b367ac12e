"""Hydra launcher presets: a 2-job sweep with ``hydra/launcher=joblib``, each job on its share of the CPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="pip install hydra-joblib-launcher (extra: test)")


@pytest.mark.e2e
def test_joblib_sweep_runs_two_jobs_with_one_cpu_budget_each(tmp_path: Path, tiny_overrides, path_setup) -> None:
    # path_setup built the cached tiny base, so the jobs only load it
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable,
        "-m",
        "sesa_cli",
        "train",
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "seed=0,1",
        *tiny_overrides,
        "task=path",
        "train.steps=2",
        "train.batch_size=2",
        "sampler.group_size=2",
        "eval.samples=4",
        "threads=auto",  # a joblib job's share of the cores (the default is one thread whatever the launcher)
        f"hydra.sweep.dir={sweep}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    cpus = os.cpu_count() or 1
    for job in ("0", "1"):
        run = sweep / job
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows if "rollout/reward_mean" in r] == [1, 2]
        assert f"joblib sweep job: {max(1, cpus // 2)} of {cpus} cpus (n_jobs=2)" in (run / "train.log").read_text()
        # run.json records what the numbers depend on besides the config: the thread count the job ran with
        info = json.loads((run / "run.json").read_text())
        assert info["torch_threads"] == max(1, cpus // 2)
        assert set(info["versions"]) == {"python", "torch", "transformers", "sesa"}
        assert info["versions"]["torch"].startswith("2.")
    seeds = {json.loads((sweep / j / "run.json").read_text())["overrides"].count("seed=0") for j in ("0", "1")}
    assert seeds == {0, 1}  # one job per seed
    # the revival sweep of the collapse_revival recipe: one job per parent run, on the same launcher
    revived = tmp_path / "revived"
    cmd = [sys.executable, "-m", "sesa_cli", "revive", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
           f"ckpt={sweep / '0'},{sweep / '1'}", "more_steps=1", "train.checkpoint_every=0",
           f"hydra.sweep.dir={revived}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for job in ("0", "1"):
        rows = [json.loads(line) for line in (revived / job / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows if "rollout/reward_mean" in r] == [1, 2, 3]  # the parent's rows, then its own


def test_unknown_launcher_names_the_plugins_extra(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from tests.conftest import run_cli

    assert run_cli(["train", "hydra/launcher=nope"], monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "hydra/launcher=nope" in err
    assert "sesa[launchers]" in err


def test_a_missing_ray_launcher_names_its_extra(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import importlib.util

    from tests.conftest import run_cli

    if importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is not None:
        pytest.skip("the Ray launcher is installed (nox -s integrations runs a sweep on it)")
    assert run_cli(["train", "-m", "hydra/launcher=ray", "seed=0,1"], monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("sesa train: error: hydra/launcher=ray is not a hydra/launcher option; choose one of: basic")
    assert err.endswith("(Hydra's Ray launcher: pip install 'sesa[ray]')")
