"""FrozenLake against gymnasium's own FrozenLakeEnv, step for step, slippery included."""

from __future__ import annotations

import random

import gymnasium as gym
import pytest
from gymnasium.envs.toy_text.frozen_lake import generate_random_map

from sesa_cli.config import ConfigError
from sesa_cli.tasks.frozenlake import (
    ACTIONS,
    FrozenLakeInstance,
    FrozenLakeTask,
    FrozenLakeTaskConfig,
    _has_path,
    generate_map,
    shortest_path,
)


def make(**kw) -> FrozenLakeTask:
    return FrozenLakeTask(FrozenLakeTaskConfig(name="frozenlake", **kw), 0)


@pytest.mark.parametrize(
    ("is_slippery", "success_rate"),
    [(True, 1 / 3), (True, 0.8), (False, 1.0), (True, 1)],
    ids=["gym", "ragen2", "still", "sure-footed"],
)
@pytest.mark.parametrize("size", [4, 6])
def test_transitions_match_gymnasium(is_slippery: bool, success_rate: float, size: int) -> None:
    rng = random.Random(size)
    task = make(size=size, is_slippery=is_slippery, success_rate=success_rate, max_actions=50, max_turns=50)
    for trial in range(40):
        desc = generate_random_map(size=size, p=0.8, seed=trial)
        seed = rng.randrange(2**31)
        ours = task.make_env(FrozenLakeInstance(tuple(desc), seed))
        ref = gym.make("FrozenLake-v1", desc=desc, is_slippery=is_slippery, success_rate=success_rate)
        state, _ = ref.reset(seed=seed)
        assert ours.position == divmod(state, size)
        for _ in range(40):
            a = rng.randrange(4)
            state, reward, terminated, _, _ = ref.step(a)
            turn = ours.step(ACTIONS[a][0] + "|")  # one action per turn, through the parser
            assert ours.position == divmod(state, size)
            assert turn.reward == reward
            assert turn.actions == (ACTIONS[a],)
            assert turn.done == terminated
            if terminated:
                assert turn.success == (desc[state // size][state % size] == "G")
                break


def test_apply_matches_gymnasium_without_the_parser() -> None:
    task = make(is_slippery=True)
    for index in range(30):
        inst = task.instance("train", index)
        env = task.make_env(inst)
        ref = gym.make("FrozenLake-v1", desc=list(inst.desc), is_slippery=True, success_rate=0.8)
        ref.reset(seed=inst.seed)
        rng = random.Random(index)
        for _ in range(20):
            a = rng.randrange(4)
            state, reward, terminated, _, _ = ref.step(a)
            r, over, _ = env.apply(ACTIONS[a])
            assert (env.position, r, over) == (divmod(state, 4), reward, terminated)
            if over:
                break


def test_deterministic_ice_plays_from_the_table_and_renders_from_the_cache() -> None:
    """Not slippery: no gymnasium env or generator is built, and every state drawn from the task's cache is the one
    drawn afresh (the equality with gymnasium's moves: test_transitions_match_gymnasium, "still")."""
    task = make(is_slippery=False, max_actions=30, max_turns=30)
    rng = random.Random(0)
    for index in range(20):
        env = task.make_env(task.instance("train", index))
        while not env.done:
            assert env.render() == env._render()
            env.step(rng.choice("LDRU") + "|")
        assert env._gym is None
    assert task.renders  # the drawings came from the cache
    assert make(is_slippery=True).moves(("SF", "FG")) is None


def test_maps_are_solvable_with_random_start_and_goal() -> None:
    starts, goals = set(), set()
    for seed in range(200):
        desc = generate_map(4, 0.9, seed)
        board = [list(row) for row in desc]
        assert sum(row.count("S") for row in desc) == 1
        assert sum(row.count("G") for row in desc) == 1
        assert _has_path(board)
        starts.add(next((r, row.index("S")) for r, row in enumerate(desc) if "S" in row))
        goals.add(next((r, row.index("G")) for r, row in enumerate(desc) if "G" in row))
    assert len(starts) > 8  # RAGEN: start and goal anywhere
    assert len(goals) > 8
    assert generate_map(5, 0.8, 7, random_start_goal=False) == generate_random_map(size=5, p=0.8, seed=7)


def test_shortest_path_reaches_the_goal_in_the_environment() -> None:
    task = make(is_slippery=False, max_actions=12, max_turns=12, max_actions_per_turn=1)
    for seed in range(100):
        inst = FrozenLakeInstance(tuple(generate_map(4, 0.8, seed)), seed)
        env = task.make_env(inst)
        path = shortest_path(inst.desc, env.position)
        assert path is not None
        assert len(path) <= 12
        for action in path:
            env.step(action[0] + "|")
        assert env.success
        assert env.history == path
    assert shortest_path(("SH", "HG"), (0, 0)) is None
    assert shortest_path(("SF", "FG"), (0, 0)) in (["Down", "Right"], ["Right", "Down"])


def test_render_uses_ragen_symbols() -> None:
    task = make(is_slippery=False)
    inst = FrozenLakeInstance(("SFFF", "FHFH", "FFFH", "HFFG"), 0)
    env = task.make_env(inst)
    assert env.render() == "P___\n_O_O\n___O\nO__G"
    turn = env.step("RD|")
    assert env.render() == "____\n_X_O\n___O\nO__G"
    assert (turn.done, turn.success, turn.reward, turn.actions) == (True, False, 0.0, ("Right", "Down"))
    env = task.make_env(inst)
    turns = [env.step(r) for r in ("DDRR|", "DR|")]
    assert turns[0].feedback == "\n____\n_O_O\n__PO\nO__G\n:"
    assert (turns[1].done, turns[1].success, turns[1].reward) == (True, True, 1.0)
    assert env.render() == "____\n_O_O\n___O\nO__√"


def test_compact_example_from_the_docstring() -> None:
    task = make(is_slippery=False)
    inst = FrozenLakeInstance(("FSFF", "FFFH", "FHFH", "HFFG"), 0)
    text, score = task.transcript(inst, ["DR|"])
    assert text == "_P__\n___O\n_O_O\nO__G\n:DR|\n____\n__PO\n_O_O\nO__G\n:"
    assert (score.key, score.reward, score.success) == ("Down,Right", 0.0, False)


def test_coordinate_observations_are_ragens() -> None:
    inst = FrozenLakeInstance(("SFFF", "FHFH", "FFFH", "HFFG"), 0)
    chat = make(is_slippery=False, observation_format="coord", style="chat").make_env(inst)
    chat.step("</think><answer>Right || Down</answer>")
    assert chat.render() == (
        "Board size: 4 rows x 4 cols (zero-indexed).\nStart: (0, 0)\nGoal: (3, 3)\nPlayer in hole: (1, 1)\n"
        "Holes: (1, 1), (1, 3), (2, 3), (3, 0)"
    )
    both = make(is_slippery=False, observation_format="grid_coord", style="chat").make_env(inst)
    assert both.render().startswith("Coordinates: \nBoard size: 4 rows x 4 cols (zero-indexed).\nStart: (0, 0)\n")
    assert both.render().endswith(
        "\nPlayer: (0, 0)\nHoles: (1, 1), (1, 3), (2, 3), (3, 0)\nGrid Map: \nP___\n_O_O\n___O\nO__G"
    )
    task = make(is_slippery=False, observation_format="grid_coord")
    env = task.make_env(inst)
    assert env.render() == "S00G33P00O11O13O23O30\nP___\n_O_O\n___O\nO__G"
    env.step("DDRRD|")
    env.step("R|")
    assert env.render().split("\n")[0] == "S00G33√33O11O13O23O30"
    assert set("S0123456789") <= set(task.alphabet())  # the compact coordinates are in the tiny model's vocabulary


def test_warm_start_captions_describe_the_maps_they_show() -> None:
    task = make(is_slippery=False, random_start_goal=False, warm_start_captions=0.25)
    corpus = task.warm_start_corpus(random.Random(0), 400)
    captions = [line for line in corpus if "\n=" in line]
    assert len(corpus) == 400
    assert len(captions) == 100
    assert set("".join(corpus)) <= set(task.alphabet())
    for line in captions:
        grid, coords = line.split("\n=")
        rows = grid.split("\n")
        assert rows[0][0] == "P"  # the map before the first move
        holes = {(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "O"}
        named = coords[coords.index("P00") + 3 :]
        assert named == "".join(f"O{r}{c}" for r, c in sorted(holes))
        assert coords.startswith("S00G33P00")
    # the same corpus for every seed, a different one (a new cached base) without captions
    assert FrozenLakeTask(task.cfg, 4).warm_start_corpus(random.Random(0), 400) == corpus
    plain = make(is_slippery=False, random_start_goal=False)
    assert not any("=" in line for line in plain.warm_start_corpus(random.Random(0), 400))
    assert "=" not in plain.alphabet()
    assert plain.warm_start_key() != task.warm_start_key()
    with pytest.raises(ConfigError, match=r"warm_start_captions=1.0 must be in \[0, 1\)"):
        make(warm_start_captions=1.0)
    with pytest.raises(ConfigError, match=r"task.size=11 must be <= 10"):
        make(size=11, warm_start_captions=0.1)


def test_unknown_observation_format_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"task.observation_format='xy'; valid: grid, coord, grid_coord"):
        make(observation_format="xy")


def test_compact_coordinates_need_single_digit_rows_and_columns() -> None:
    with pytest.raises(ConfigError, match=r"task.size=11 must be <= 10"):
        make(size=11, observation_format="coord")
    assert make(size=11, observation_format="coord", style="chat").cfg.size == 11  # "(10, 3)" is unambiguous
    assert make(size=10, observation_format="grid_coord").cfg.size == 10
