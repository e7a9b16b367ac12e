"""Every config option of every group composes and validates into the typed schema."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from sesa_cli import config
from sesa_cli.config import ConfigError, TrainConfig, conf_dir
from sesa_cli.rollout.samplers import resolve_stage1
from sesa_cli.tasks.base import make_task
from tests.conftest import compose_train

GROUPS = ["model", "task", "sampler", "algo"]
OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((conf_dir() / g).glob("*.yaml"))]


def test_every_group_has_options():
    assert {g for g, _ in OPTIONS} == set(GROUPS)


@pytest.mark.parametrize(("group", "option"), OPTIONS)
def test_option_composes(group, option):
    # reasoning-gym is chat-only: open text has no vocabulary in the tiny default model
    extra = ["model=smollm2-135m"] if (group, option) == ("task", "reasoning_gym") else []
    cfg = compose_train([f"{group}={option}", *extra])
    assert isinstance(cfg, TrainConfig)
    assert getattr(cfg, group).name == option


def test_defaults_are_the_documented_ones():
    cfg = compose_train([])
    names = (cfg.model.name, cfg.task.name, cfg.sampler.name, cfg.algo.name)
    assert names == ("tiny", "frozenlake", "sequential", "grpo")
    assert compose_train(["task=path"]).sampler.stage1 == "auto"  # = sketch for the path task (its base follows them)
    # tiny FrozenLake drafts first-turn plans: auto resolves to sketches, which its base follows (conf/task_model/)
    assert cfg.sampler.stage1 == "auto"
    assert resolve_stage1(cfg.sampler, make_task(cfg.task, cfg.seed)) == "sketch"
    assert compose_train(["task=path"]).task.target_seed == cfg.seed


def test_targets_follow_the_seed():
    assert compose_train(["task=path", "seed=3"]).task.target_seed == 3


def test_cross_field_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"model\.hidden_size=130 must be divisible by model\.num_heads=4"):
        compose_train(["model.hidden_size=130"])


def test_config_imports_nothing_of_the_tasks():
    """The config package sits below every task (each task's schema extends TaskConfig): importing it loads no
    module of sesa_cli.tasks, and no import in any of its modules, at any depth, names one (a lazy import would close
    the circle again)."""
    code = "import sys, sesa_cli.config; print(sorted(m for m in sys.modules if m.startswith('sesa_cli.tasks')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    imported = []
    for module in sorted(Path(config.__file__).parent.glob("*.py")):
        tree = ast.parse(module.read_text())
        imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert "omegaconf" in imported  # the walk sees the modules' imports
    assert [name for name in imported if name.startswith("sesa_cli.tasks")] == []


def test_train_and_eval_share_one_evaluation_protocol(tmp_path):
    # issue 22: sesa eval and a run's own evaluations read the same numbers by default
    from dataclasses import asdict

    import yaml
    from hydra import compose, initialize_config_dir

    from sesa_cli.commands.reload import reload_config
    from sesa_cli.commands.schemas import register_configs
    from sesa_cli.config import EvalConfig, EvalProtocolConfig, to_object

    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        evaluated = to_object(compose("eval", overrides=["task=path"]))
    trained = compose_train(["task=path"])
    assert isinstance(evaluated, EvalConfig)
    assert evaluated.eval == trained.eval == EvalProtocolConfig()
    # sesa eval of a checkpoint: the run's protocol and sampling settings, drawn i.i.d. unless sampler= is chosen
    run = compose_train(["task=path", "sampler=sequential", "sampler.temperature=0.7", "eval.samples=16"])
    parent = tmp_path / "config.yaml"
    parent.write_text(yaml.safe_dump(asdict(run)))
    plain = reload_config("eval", parent, [])
    assert plain.eval.samples == 16
    assert (plain.sampler.name, plain.sampler.temperature) == ("parallel", 0.7)
    chains = reload_config("eval", parent, ["sampler=sequential"])
    assert (chains.sampler.name, chains.sampler.temperature, chains.eval.samples) == ("sequential", 0.7, 16)


@pytest.mark.parametrize("recipe", sorted(p.stem for p in (conf_dir() / "experiment").glob("*.yaml")))
def test_experiment_recipe_composes(recipe):
    # issue 18 item 11: every recipe composes into a valid TrainConfig, and its header's commands validate as the
    # CLI validates them (sesa_cli.commands.validate, no training)
    cfg = compose_train([f"experiment={recipe}"])
    assert isinstance(cfg, TrainConfig)
    assert cfg.train.steps >= 1


def test_the_configs_register_without_any_hydra_plugin_installed(monkeypatch):
    # README's first command installs sesa alone: no hydra_plugins package, and find_spec of its submodule raises
    import importlib.util

    from sesa_cli.commands import schemas

    real = importlib.util.find_spec

    def find_spec(name, *args):
        if name == "hydra_plugins" or name.startswith("hydra_plugins."):
            if "." in name:
                raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}")
            return None
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    schemas.optuna_follows_sweep_direction(None)  # returns before touching the config store
