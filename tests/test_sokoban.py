"""Sokoban: every generated room is solvable inside the budget, and the solver's plan solves the env."""

from __future__ import annotations

import pytest

from sesa_cli.tasks.sokoban import ACTIONS, SokobanInstance, SokobanTask, SokobanTaskConfig, solve


def make(**kw) -> SokobanTask:
    return SokobanTask(SokobanTaskConfig(name="sokoban", **kw), 0)


def room(text: str) -> SokobanInstance:
    """An instance from a RAGEN grid (solution left empty)."""
    rows = text.strip().split("\n")
    cells = {(r, c): ch for r, row in enumerate(rows) for c, ch in enumerate(row)}
    floor = frozenset(x for x, ch in cells.items() if ch != "#")
    targets = tuple(sorted(x for x, ch in cells.items() if ch in "O√S"))
    boxes = tuple(sorted(x for x, ch in cells.items() if ch in "X√"))
    player = next(x for x, ch in cells.items() if ch in "PS")
    return SokobanInstance(len(rows), len(rows[0]), floor, targets, boxes, player, ())


def chunks(actions: tuple[str, ...], k: int) -> list[str]:
    return ["".join(a[0] for a in actions[i : i + k]) + "|" for i in range(0, len(actions), k)]


@pytest.mark.parametrize(("dim", "boxes", "count"), [([6, 6], 1, 200), ([8, 8], 2, 100)])
@pytest.mark.parametrize("split", ["train", "val"])
def test_every_room_is_solvable_and_the_plan_solves_the_env(dim, boxes, count, split) -> None:
    task = make(dim_room=dim, num_boxes=boxes)
    for index in range(count):
        inst = task.instance(split, index)
        assert len(inst.boxes) == len(inst.targets) == boxes
        assert not set(inst.boxes) <= set(inst.targets)  # not already solved
        assert task.cfg.min_solution_steps <= len(inst.solution) <= task.cfg.max_actions
        assert inst.player in inst.floor
        assert set(inst.boxes) <= inst.floor
        assert len(set(inst.boxes) | {inst.player}) == boxes + 1
        text, score = task.transcript(inst, chunks(inst.solution, task.cfg.max_actions_per_turn))
        assert score.success, text
        assert score.key == ",".join(inst.solution)
        assert score.reward >= 10.0 - 0.1 * len(inst.solution) + 1.0 - 1e-9  # the +10 and at least one +1
        assert text.startswith(task.prompt(inst))
        # The solver finds nothing shorter from the initial state (breadth-first = shortest).
        shorter = solve(
            inst.floor, frozenset(inst.targets), frozenset(inst.boxes), inst.player, len(inst.solution) - 1
        )
        assert shorter is None


def test_push_rules_and_rewards() -> None:
    task = make()
    inst = room(
        """
######
#__###
#_O_##
#_X__#
#__P_#
######"""
    )
    env = task.make_env(inst)
    assert env.render() == "######\n#__###\n#_O_##\n#_X__#\n#__P_#\n######"
    turn = env.step("D|")  # into the wall: nothing moves, still -0.1
    assert (turn.reward, env.player) == (pytest.approx(-0.1), (4, 3))
    turn = env.step("L|")
    assert turn.feedback == "\n######\n#__###\n#_O_##\n#_X__#\n#_P__#\n######\n:"
    turn = env.step("U|")  # push the box onto the target: -0.1 + 1 + 10
    assert (turn.reward, turn.done, turn.success) == (pytest.approx(10.9), True, True)
    assert env.render() == "######\n#__###\n#_√_##\n#_P__#\n#____#\n######"


def test_pushing_off_a_target_and_blocked_pushes() -> None:
    task = make(num_boxes=2)
    inst = room(
        """
######
#_P__#
#_√__#
#_X__#
#_O__#
######"""
    )
    env = task.make_env(inst)
    r, over, _ = env.apply("Down")  # two boxes in a row cannot be pushed
    assert (r, over, env.player) == (pytest.approx(-0.1), False, (1, 2))
    env = task.make_env(
        room(
            """
######
#_P__#
#_√__#
#____#
#_O__#
######"""
        )
    )
    r, _, _ = env.apply("Down")  # box leaves its target: -0.1 - 1
    assert r == pytest.approx(-1.1)
    assert env.render() == "######\n#____#\n#_S__#\n#_X__#\n#_O__#\n######"
    r, over, solved = env.apply("Down")
    assert (r, over, solved) == (pytest.approx(10.9), True, True)


def test_truncation_at_the_action_budget() -> None:
    task = make()
    inst = task.instance("train", 0)
    env = task.make_env(inst)
    away = {"Up": "D", "Down": "U", "Left": "R", "Right": "L"}[inst.solution[0]]
    turns = [env.step(away * 5 + "|"), env.step(away * 5 + "|")]
    assert turns[-1].done
    assert not turns[-1].success
    assert len(env.history) == 10
    assert [a for a in ACTIONS if a[0] == away]


def test_generation_is_deterministic() -> None:
    assert make().instance("train", 5) == make().generate("train", 5)
    assert make().instance("train", 5) != make().instance("train", 6)
