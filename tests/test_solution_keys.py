"""A solution is what the episode did (issue 66): agent tasks key an episode by the states it went through, so moves
that change nothing, and detours that come back, are not new solutions (``task.solution_key``)."""

from __future__ import annotations

import random

import pytest

from sesa_cli.config import ConfigError, SamplerConfig
from sesa_cli.deprecations import upgrade_config
from sesa_cli.exact import ExactPolicy
from sesa_cli.rollout.samplers import ParallelSampler
from sesa_cli.tasks.agent import NO_MOVE, erase_loops
from sesa_cli.tasks.frozenlake import FrozenLakeInstance, FrozenLakeTask, FrozenLakeTaskConfig
from sesa_cli.tasks.sokoban import SokobanTask, SokobanTaskConfig
from tests.test_episode_tree import _bigram_policy

ONE_ROUTE = ("SFF", "HHF", "FFG")
"""3x3: start top-left, holes below it, goal bottom-right; the one route is Right, Right, Down, Down."""


def _frozenlake(**overrides) -> FrozenLakeTask:
    fields = {"size": 3, "is_slippery": False, "random_start_goal": False, "max_turns": 6,
              "max_actions_per_turn": 2, "max_actions": 8, **overrides}  # fmt: skip
    return FrozenLakeTask(FrozenLakeTaskConfig(name="frozenlake", **fields), seed=0)


def _key(task: FrozenLakeTask, actions: list[str], inst: FrozenLakeInstance | None = None) -> str | None:
    """The solution key of the episode that plays ``actions`` one per turn."""
    inst = inst or FrozenLakeInstance(ONE_ROUTE, seed=1)
    return task.play(inst, [task.response([a]) for a in actions])[1].key


WINS = {
    "the route": ["Right", "Right", "Down", "Down"],
    "a bump into the top wall first": ["Up", "Right", "Right", "Down", "Down"],
    "bumps into the left and right walls": ["Left", "Right", "Right", "Right", "Down", "Down"],
    "a detour back to the start": ["Right", "Left", "Right", "Right", "Down", "Down"],
    "a detour down and back up": ["Right", "Right", "Down", "Up", "Down", "Down"],
}


def test_winning_strings_that_differ_by_wall_moves_or_detours_are_one_route():
    task = _frozenlake()
    keys = {name: _key(task, actions) for name, actions in WINS.items()}
    assert set(keys.values()) == {"Right,Right,Down,Down"}
    assert all(task.play(FrozenLakeInstance(ONE_ROUTE, 1), [task.response([a]) for a in w])[1].success
               for w in WINS.values())  # fmt: skip


def test_states_keep_detours_and_drop_moves_that_change_nothing():
    task = _frozenlake(solution_key="states")
    assert _key(task, WINS["a bump into the top wall first"]) == _key(task, WINS["the route"])
    assert _key(task, WINS["bumps into the left and right walls"]) == _key(task, WINS["the route"])
    assert _key(task, WINS["a detour back to the start"]) == "Right,Left,Right,Right,Down,Down"
    assert _key(task, WINS["a detour down and back up"]) == "Right,Right,Down,Up,Down,Down"


def test_actions_are_the_old_key_every_typed_move():
    task = _frozenlake(solution_key="actions")
    assert len({_key(task, actions) for actions in WINS.values()}) == len(WINS)
    assert _key(task, WINS["a bump into the top wall first"]) == "Up,Right,Right,Down,Down"


def test_an_episode_that_never_moves_has_a_key_and_an_invalid_one_has_none():
    task = _frozenlake(max_actions=2)
    assert _key(task, ["Up", "Left"]) == NO_MOVE  # valid replies, both into walls
    inst = FrozenLakeInstance(ONE_ROUTE, seed=1)
    assert task.play(inst, ["Jump|"])[1].key is None


def test_the_executed_actions_are_kept_beside_the_key():
    task = _frozenlake()
    inst = FrozenLakeInstance(ONE_ROUTE, seed=1)
    score = task.play(inst, [task.response(["Up", "Right"])])[1]
    assert score.actions == ("Up", "Right")
    assert score.key == "Right"


def test_loop_erasure_cuts_back_to_the_first_visit():
    path = [("a", "1"), ("b", "2"), ("a", "3"), ("c", "4"), ("d", "5"), ("c", "6"), ("e", "7")]
    assert erase_loops(path, "s") == [("a", "1"), ("c", "4"), ("e", "7")]
    assert erase_loops([("a", "1"), ("s", "2")], "s") == []  # back at the start: no route
    assert erase_loops([], "s") == []


@pytest.mark.parametrize("how", ["route", "states"])
def test_a_key_replayed_as_moves_visits_the_states_it_names(how: str) -> None:
    """The moves of a key decide its states: replayed on a fresh episode, each move changes the state, and a route
    never visits a state twice."""
    task = FrozenLakeTask(FrozenLakeTaskConfig(name="frozenlake", size=4, is_slippery=False, max_actions=10,
                                               solution_key=how), seed=0)  # fmt: skip
    rng = random.Random(0)
    for index in range(40):
        inst = task.instance("train", index)
        env = task.make_env(inst)
        while not env.done:
            env.step(task.response(task.random_actions(env, rng, rng.randint(1, 3))))
        key = env.solution_key()
        if key == NO_MOVE:
            continue
        replay = task.make_env(inst)
        seen = [replay.state()]
        for move in key.split(","):
            before = replay.state()
            replay.execute(move)
            assert replay.state() != before
            seen.append(replay.state())
        assert seen[-1] == env.state()
        if how == "route":
            assert len(set(seen)) == len(seen)


def test_slippery_ice_names_the_moves_that_happened() -> None:
    task = FrozenLakeTask(FrozenLakeTaskConfig(name="frozenlake", size=4, is_slippery=True, success_rate=0.5,
                                               solution_key="states"), seed=0)  # fmt: skip
    rng = random.Random(1)
    for index in range(20):
        env = task.make_env(task.instance("train", index))
        while not env.done:
            env.step(task.response(task.random_actions(env, rng, 2)))
        for (before, _), (after, move) in zip([(env.start, ""), *env.path], env.path, strict=False):
            (r0, c0), (r1, c1) = divmod(before, 4), divmod(after, 4)
            assert {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}[move] == (r1 - r0, c1 - c0)


def test_sokoban_pushes_that_fail_change_nothing() -> None:
    task = SokobanTask(SokobanTaskConfig(name="sokoban"), seed=0)
    inst = task.instance("train", 0)
    solution = list(inst.solution)
    env = task.make_env(inst)
    for action in ("Up", "Down", "Left", "Right"):  # find a move into a wall or a blocked box from the start
        probe = task.make_env(inst)
        probe.execute(action)
        if probe.state() == env.state():
            bumped = task.play(inst, [task.response([action]), *(task.response([a]) for a in solution)])[1]
            plain = task.play(inst, [task.response([a]) for a in solution])[1]
            assert bumped.key == plain.key
            assert bumped.actions != plain.actions
            return
    pytest.skip("instance 0 has no blocked move from its start")  # pragma: no cover - the generator's room


def test_sketches_that_differ_only_by_moves_into_walls_are_one_sketch():
    task = _frozenlake(max_actions=8)
    inst = FrozenLakeInstance(ONE_ROUTE, seed=1)
    assert task.sketch_key(inst, task.sketch(["Up", "Right"])) == task.sketch_key(inst, task.sketch(["Right"]))
    assert task.sketch_key(inst, task.sketch(["Down"])) != task.sketch_key(inst, task.sketch(["Right"]))


def test_a_policy_whose_winning_strings_differ_by_wall_moves_has_one_effective_solution():
    """Exactly: every winning episode of this map walks the one route, so its exact effective solutions are 1,
    whatever wall bumps and detours its strings hold; keyed by the typed actions the same policy has many."""
    counted = {}
    for how in ("route", "states", "actions"):
        task = _frozenlake(max_turns=3, max_actions=6, solution_key=how)
        policy, _ = _bigram_policy(task, 0)
        sampler = ParallelSampler(SamplerConfig(), task, policy)
        exact = ExactPolicy(sampler, [FrozenLakeInstance(ONE_ROUTE, seed=1)], min_prob=0.0, max_branches=0)
        counted[how] = exact.snapshot().summary(k=4)
    assert counted["route"]["policy/effective_solutions"] == 1.0
    assert counted["states"]["policy/effective_solutions"] > 1.0  # detours that come back count there
    assert counted["actions"]["policy/effective_solutions"] > counted["states"]["policy/effective_solutions"]
    for how in ("states", "actions"):  # merging keys moves no mass
        assert counted[how]["policy/target_mass"] == pytest.approx(counted["route"]["policy/target_mass"], rel=1e-9)
        assert counted[how]["policy/valid_mass"] == pytest.approx(counted["route"]["policy/valid_mass"], rel=1e-9)
    assert counted["route"]["policy/target_mass"] > 1e-3  # wins carry mass (a bigram policy spreads it thin)


def test_an_unknown_key_is_refused_and_old_runs_keep_theirs():
    with pytest.raises(ConfigError, match=r"task\.solution_key='moves'; valid: route, states, actions"):
        FrozenLakeTaskConfig(name="frozenlake", solution_key="moves")
    old = {"task": {"name": "frozenlake", "max_actions_per_turn": 5}, "seed": 0}
    assert upgrade_config(old)["task"]["solution_key"] == "actions"
    assert upgrade_config({"task": {"name": "path"}})["task"] == {"name": "path"}
    new = {"task": {"name": "sokoban", "max_actions_per_turn": 5, "solution_key": "route"}}
    assert upgrade_config(new)["task"]["solution_key"] == "route"


def test_the_warm_start_does_not_depend_on_how_solutions_are_counted():
    assert _frozenlake().warm_start_key() == _frozenlake(solution_key="actions").warm_start_key()
