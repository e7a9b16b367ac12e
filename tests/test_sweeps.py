"""Hyperparameter search: ``hydra/sweeper=optuna`` runs trials of ``sesa train``, each returning its ``sweep.objective``
at the run's last evaluation; the study's best trial is the run dir with the best objective."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="pip install 'sesa[optuna]' (extra: test)")

SMALL = ["train.steps=2", "train.batch_size=2", "sampler.group_size=2", "eval.samples=4", "train.checkpoint_every=0"]


def _final(run: Path, key: str) -> float:
    """``key`` in the run's last evaluation row (the final evaluation: the last row holding eval/success)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return float([r for r in rows if "eval/success" in r][-1][key])


def _overrides(run: Path, prefixes: tuple[str, ...]) -> dict[str, float]:
    overrides = json.loads((run / "run.json").read_text())["overrides"]
    return {o.split("=", 1)[0]: float(o.split("=", 1)[1]) for o in overrides if o.startswith(prefixes)}


@pytest.mark.e2e
def test_an_optuna_study_picks_the_run_with_the_best_objective(tmp_path: Path, tiny_overrides, path_setup) -> None:
    # path_setup built the cached tiny base, so the trials only load it. maximize is not the plugin's own default
    # (minimize): the study only finds the best run if sweep.direction reaches the sweeper. The exact target mass is
    # continuous, so the four trials do not tie.
    objective, direction = "policy/target_mass", "maximize"
    sweep = tmp_path / "study"
    cmd = [sys.executable, "-m", "sesa_cli", "train", "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=4",
           "hydra.sweeper.n_jobs=2", "hydra.sweeper.sampler.seed=0", f"sweep.objective={objective}",
           f"sweep.direction={direction}", "optim.lr=tag(log, interval(1e-5, 1e-3))",
           "algo.entropy_coef=interval(0.0, 0.01)", *tiny_overrides, *SMALL, f"hydra.sweep.dir={sweep}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted(p for p in sweep.iterdir() if p.is_dir() and (p / "metrics.jsonl").is_file())
    assert [r.name for r in runs] == ["0", "1", "2", "3"]
    values = {r.name: _final(r, objective) for r in runs}
    params = {r.name: _overrides(r, ("optim.lr=", "algo.entropy_coef=")) for r in runs}
    assert len({tuple(p.values()) for p in params.values()}) == 4  # four different trials
    for p in params.values():
        assert 1e-5 <= p["optim.lr"] <= 1e-3
        assert 0.0 <= p["algo.entropy_coef"] <= 0.01
    import yaml

    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    best = max(values, key=values.__getitem__)
    assert max(values.values()) > sorted(values.values())[-2]  # a unique best, so the check below can fail
    assert results["best_value"] == pytest.approx(values[best], rel=1e-12)
    assert results["best_params"] == pytest.approx(params[best], rel=1e-12)


def test_train_returns_its_objective_and_nan_for_a_key_it_never_logged(caplog) -> None:
    from sesa_cli.commands.train import objective

    final = {"step": 3, "eval/success": 0.5, "eval/pass@4": 1, "policy/target_mass": None}
    assert objective(final, "eval/success") == 0.5
    assert objective(final, "eval/pass@4") == 1.0
    assert math.isnan(objective(final, "policy/target_mass"))  # logged as None: not finite
    assert math.isnan(objective(final, "policy/effective_solutions"))
    assert "sweep.objective=policy/effective_solutions is not in this run's final metrics" in caplog.text


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["sweep.objective=eval/nope"], "sweep.objective='eval/nope' is not a metric key"),
        (["sweep.direction=up"], "sweep.direction='up' is not valid; choose one of: maximize, minimize"),
        (["-m", "hydra/sweeper=optuna", "optim.lr=interval(0, 1e-3)"], "optim.lr=0.0 must be > 0"),
    ],
)
def test_bad_sweep_settings_are_one_line_and_exit_2(monkeypatch, capsys, args, expected) -> None:
    assert run_cli(["train", *args, "task=path"], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert expected in err[0]


def test_the_frozenlake_search_recipe_sets_the_study() -> None:
    from hydra import compose, initialize_config_dir

    from sesa_cli.commands.schemas import register_configs
    from sesa_cli.config import conf_dir

    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir()), job_name="train"):
        cfg = compose("train", overrides=["experiment=frozenlake_search"], return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper")
    assert sweeper.direction == "maximize"  # from sweep.direction
    assert cfg.sweep.objective == "eval/success"
    assert set(sweeper.params) == {"optim.lr", "algo.entropy_coef"}
    assert cfg.task.name == "frozenlake"
    assert cfg.optim.lr == 3e-4  # the default the search brackets
    assert cfg.algo.entropy_coef == 0.003


def test_an_unknown_sweeper_names_the_optuna_extra(monkeypatch, capsys) -> None:
    assert run_cli(["train", "-m", "hydra/sweeper=nope", "task=path"], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "hydra/sweeper=nope is not a hydra/sweeper option" in err[0]
    assert "pip install 'sesa[optuna]'" in err[0]
