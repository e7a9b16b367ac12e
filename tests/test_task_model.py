"""Settings a task needs on a given model (conf/task_model/): task=frozenlake on model=tiny gets the FrozenLake the
tiny model learns (issue 16 item 5), a real model keeps RAGEN's, and the command line always wins."""

from __future__ import annotations

import pytest

from sesa_cli.config import ConfigError
from tests.conftest import compose_train


def test_tiny_frozenlake_gets_the_settings_it_learns_with() -> None:
    cfg = compose_train([])  # sesa train with no overrides: frozenlake, tiny, sequential
    assert (cfg.task.name, cfg.model.name, cfg.sampler.name) == ("frozenlake", "tiny", "sequential")
    assert (cfg.task.is_slippery, cfg.task.random_start_goal, cfg.task.max_actions_per_turn) == (False, False, 2)
    assert (cfg.task.sketch_max_actions, cfg.sampler.stage1, cfg.algo.off_policy) == (2, "auto", "weight_negatives")
    assert cfg.sampler.parallel_rows == 4
    assert (cfg.algo.terms, cfg.algo.train_sketches, cfg.task.warm_start_plan_lines) == ({"follow": {"coef": 0.1}},
                                                                                          True, 0.5)  # fmt: skip
    assert (cfg.algo.minibatches, cfg.optim.lr, cfg.optim.lr_schedule) == (4, 3e-4, "linear")
    assert (cfg.eval.instances, cfg.eval.samples) == (64, 16)


def test_the_agent_tasks_share_one_optimizer_recipe_and_the_path_task_its_loss() -> None:
    """Sokoban and Countdown on model=tiny train with FrozenLake's recipe (conf/task_model/train/agent_tiny.yaml),
    its sampling included, Sokoban with its own aggregation, entropy bonus, lr and steps; the path task's sequential
    loss is distinct_solutions."""
    recipe = ("minibatches", "terms", "off_policy")
    default = compose_train([])
    for task in ("sokoban", "countdown"):
        cfg = compose_train([f"task={task}"])
        assert [getattr(cfg.algo, k) for k in recipe] == [getattr(default.algo, k) for k in recipe]
        assert cfg.optim.lr_schedule == "linear"
        assert (cfg.sampler.stage1, cfg.algo.loss_context) == ("auto", "prompt")
        assert (cfg.sampler.parallel_rows, cfg.algo.train_sketches) == (4, True)
        assert (cfg.eval.instances, cfg.eval.samples) == (64, 16)
    countdown = compose_train(["task=countdown"])
    assert (countdown.algo.aggregation, countdown.algo.entropy_coef) == (default.algo.aggregation, 0.003)
    assert (countdown.optim.lr, countdown.train.steps) == (3e-4, 150)
    # the settings under which GRPO learns Sokoban on the tiny model (docs/sokoban-search.md)
    sokoban = compose_train(["task=sokoban"])
    assert (sokoban.algo.aggregation, sokoban.algo.entropy_coef) == ("seq_mean_token_mean", 0.0)
    assert (sokoban.optim.lr, sokoban.train.steps) == (6e-4, 300)
    assert compose_train(["task=path"]).algo.off_policy == "distinct_solutions"


def test_the_agent_tasks_build_one_two_layer_base_for_train_and_eval() -> None:
    """FrozenLake, Sokoban and Countdown on model=tiny take 2 of the model's 4 layers (task_model/eval/agent_tiny), the
    same in `sesa train` and `sesa eval` (one cached base); the path task keeps the model's 4."""
    from hydra import compose, initialize_config_dir

    from sesa_cli.commands.schemas import register_configs
    from sesa_cli.config import conf_dir, to_object
    from sesa_cli.models.tiny import cache_key
    from sesa_cli.tasks.base import make_task

    register_configs()
    for name, layers in (("frozenlake", 2), ("sokoban", 2), ("countdown", 2), ("path", 4)):
        with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
            evaluated = to_object(compose("eval", overrides=[f"task={name}"]))
        trained = compose_train([f"task={name}"])
        task = make_task(trained.task, 0)
        assert cache_key(trained.model, task) == cache_key(evaluated.model, task)
        assert (trained.model.num_layers, evaluated.model.num_layers) == (layers, layers)


def test_a_real_model_keeps_ragen_settings_and_the_command_line_wins() -> None:
    real = compose_train(["model=smollm2-135m"])
    assert (real.task.is_slippery, real.task.random_start_goal, real.task.sketch_max_actions) == (True, True, 0)
    assert (real.algo.minibatches, real.sampler.stage1) == (1, "auto")
    tiny = compose_train(["task.is_slippery=true", "train.steps=7", "sampler.stage1=auto"])
    assert (tiny.task.is_slippery, tiny.train.steps, tiny.sampler.stage1) == (True, 7, "auto")
    other = compose_train(["task=path"])  # the path task's file sets its tokenizer and loss, not the optimizer
    assert other.algo.minibatches == 1


def test_sketch_max_actions_bounds_the_plans() -> None:
    from sesa_cli.tasks.base import make_task

    task = make_task(compose_train([]).task, 0)
    assert task.plan_actions(task.sketch(["Left", "Down"])) == ["Left", "Down"]
    assert task.plan_actions(task.sketch(["Left", "Down", "Down"])) is None  # longer than the first turn
    assert task.sketch_max_tokens() == 3  # two actions and the stop
    # the episode marker differs from the plan-list marker, so the model knows which follows a plan
    inst = task.instance("train", 0)
    assert task.solve_prompt(inst, "LD|").startswith(task.sketch_head(inst)[:-1])
    assert task.sketch_head(inst)[-1] != task.solve_prompt(inst, "LD|")[len(task.sketch_head(inst)) - 1]
    with pytest.raises(ConfigError, match=r"task\.sketch_max_actions=11"):
        compose_train(["task.sketch_max_actions=11"])


def test_tiny_sokoban_gets_first_turn_plans_in_train_and_eval() -> None:
    from hydra import compose, initialize_config_dir

    from sesa_cli.commands.schemas import register_configs
    from sesa_cli.config import conf_dir, to_object
    from sesa_cli.tasks.base import make_task

    trained = compose_train(["task=sokoban"])
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        evaluated = to_object(compose("eval", overrides=["task=sokoban"]))
    for cfg in (trained, evaluated):
        task = cfg.task
        # one action a turn over RAGEN's 10-action budget, a sketch the first turn's move (docs/sokoban-search.md)
        assert (task.max_actions_per_turn, task.max_turns, task.max_actions) == (1, 10, 10)
        assert (task.sketch_max_actions, task.warm_start_plan_lines, task.format_penalty) == (1, 0.5, -2.0)
        assert (task.dim_room, task.num_boxes) == ([6, 6], 1)  # RAGEN's SimpleSokoban rooms
        assert (cfg.eval.instances, cfg.eval.samples) == (64, 16)
    assert trained.task == evaluated.task  # one cached base for both commands
    # a plan of one turn is quoted as one token of the word vocabulary: its first response follows it as a bigram
    sokoban = make_task(trained.task, 0)
    assert "!U:" in sokoban.vocabulary([])
    real = compose_train(["task=sokoban", "model=smollm2-135m"])
    assert (real.task.max_actions_per_turn, real.task.sketch_max_actions, real.task.warm_start_plan_lines) == (5, 0, 0)
    assert (real.task.max_turns, real.task.format_penalty) == (5, -0.1)  # RAGEN's
