"""Sudoku: unique puzzles, the checker, and replaying the solution through the env."""

from __future__ import annotations

import itertools
import random

import pytest

from sesa_cli.tasks.sudoku import (
    SudokuInstance,
    SudokuTask,
    SudokuTaskConfig,
    count_solutions,
    full_grid,
    is_solved,
    is_valid_solution,
)


def make(**kw) -> SudokuTask:
    return SudokuTask(SudokuTaskConfig(name="sudoku", **kw), 0)


def blanks(inst: SudokuInstance) -> list[tuple[int, int]]:
    n = len(inst.puzzle)
    return [(r, c) for r in range(n) for c in range(n) if not inst.puzzle[r][c]]


def brute_force_solutions(puzzle) -> list[tuple[tuple[int, ...], ...]]:
    """Every completion of a 4x4 puzzle, by trying all values in all blanks (independent of the solver)."""
    n = len(puzzle)
    holes = [(r, c) for r in range(n) for c in range(n) if not puzzle[r][c]]
    found = []
    for values in itertools.product(range(1, n + 1), repeat=len(holes)):
        grid = [list(row) for row in puzzle]
        for (r, c), v in zip(holes, values, strict=True):
            grid[r][c] = v
        if is_solved(grid):
            found.append(tuple(tuple(row) for row in grid))
    return found


def test_4x4_puzzles_have_exactly_one_solution_brute_force() -> None:
    task = make()
    for index in range(25):
        inst = task.instance("train", index)
        assert len(blanks(inst)) == task.cfg.num_blanks
        assert brute_force_solutions(inst.puzzle) == [inst.solution]
        assert count_solutions(inst.puzzle) == 1


@pytest.mark.parametrize(("size", "num_blanks", "count"), [(4, 10, 40), (9, 45, 8)])
def test_generated_puzzles_are_unique(size: int, num_blanks: int, count: int) -> None:
    task = make(size=size, num_blanks=num_blanks, max_actions=num_blanks, max_turns=num_blanks)
    for index in range(count):
        inst = task.instance("val", index)
        assert len(blanks(inst)) == num_blanks
        assert is_valid_solution(inst.puzzle, inst.solution)
        assert count_solutions(inst.puzzle, limit=3) == 1


def test_full_grids_are_valid_and_varied() -> None:
    rng = random.Random(0)
    grids = {full_grid(rng, 4) for _ in range(200)}
    assert all(is_solved(g) for g in grids)
    assert len(grids) > 50  # there are 288 4x4 grids
    assert all(is_solved(full_grid(rng, 9)) for _ in range(20))


def test_checker_accepts_solutions_and_rejects_the_rest() -> None:
    inst = make().instance("train", 0)
    sol = [list(row) for row in inst.solution]
    assert is_solved(sol)
    assert is_valid_solution(inst.puzzle, sol)
    incomplete = [row[:] for row in sol]
    incomplete[0][0] = 0
    swapped = [row[:] for row in sol]
    swapped[0][0], swapped[0][1] = swapped[0][1], swapped[0][0]
    relabelled = [[{1: 2, 2: 1}.get(v, v) for v in row] for row in sol]  # a valid grid, but not this puzzle's
    assert not is_solved(incomplete)
    assert not is_solved(swapped)
    assert is_solved(relabelled)
    assert not is_valid_solution(inst.puzzle, relabelled)
    for bad in ([], [[1, 2], [2, 1]], [[1, 2, 3, 4]] * 4, [["a"] * 4] * 4, [[1, 2, 3], [1, 2, 3, 4]], None):
        assert not is_solved(bad)  # type: ignore[arg-type]
    assert not is_valid_solution(inst.puzzle, incomplete)


@pytest.mark.parametrize("style", ["compact", "chat"])
def test_replaying_the_solution_solves_the_env(style: str) -> None:
    task = make(style=style)
    for index in range(30):
        inst = task.instance("train", index)
        acts = [f"r{r + 1}c{c + 1}={inst.solution[r][c]}" for r, c in blanks(inst)]
        random.Random(index).shuffle(acts)
        k = task.cfg.max_actions_per_turn
        responses = [task.response(acts[i : i + k]) for i in range(0, len(acts), k)]
        text, score = task.transcript(inst, responses)
        assert score.success, text
        assert score.reward == pytest.approx(len(acts) * 1.0 + 10.0)
        assert score.key == ",".join(acts)


def test_placement_rewards() -> None:
    task = make()
    found_wrong_but_valid = False
    for index in range(40):
        inst = task.instance("train", index)
        env = task.make_env(inst)
        given = next((r, c) for r in range(4) for c in range(4) if inst.puzzle[r][c])
        r0, c0 = given
        assert env.apply(f"r{r0 + 1}c{c0 + 1}={inst.puzzle[r0][c0]}") == (pytest.approx(-0.1), False, False)
        r, c = blanks(inst)[0]
        row_value = next(v for v in inst.puzzle[r] if v)
        assert env.apply(f"r{r + 1}c{c + 1}={row_value}")[0] == pytest.approx(-0.1)  # row conflict
        for r, c in blanks(inst):
            for v in env.candidates(r, c):
                if v != inst.solution[r][c]:
                    assert env.apply(f"r{r + 1}c{c + 1}={v}") == (pytest.approx(0.5), False, False)
                    assert env.apply(f"r{r + 1}c{c + 1}={v}")[0] == pytest.approx(-0.1)  # the same value again
                    # Overwriting with the right value earns the +1.
                    assert env.apply(f"r{r + 1}c{c + 1}={inst.solution[r][c]}")[0] == pytest.approx(1.0)
                    found_wrong_but_valid = True
                    break
            if found_wrong_but_valid:
                break
        if found_wrong_but_valid:
            break
    assert found_wrong_but_valid


def test_unknown_placements_are_format_errors() -> None:
    task = make()
    inst = task.instance("train", 0)
    long_forms = ("r5c1=1|", "r1c1=0|", "r1c1=5|", "r1c1|", "place 1 at row 1 col 1|")
    for text in (*long_forms, "511|", "110|", "115|", "11|", "1111|"):
        turn = task.make_env(inst).step(text)
        assert (turn.actions, turn.valid, turn.reward) == ((), False, pytest.approx(-0.1))


def test_compact_example_from_the_docstring() -> None:
    task = make()
    inst = task.instance("train", 0)
    assert task.prompt(inst) == "3.2.\n21.3\n1...\n4312\n:"
    turn = task.make_env(inst).step("124 141|")
    assert (turn.feedback, turn.reward) == ("\n3421\n21.3\n1...\n4312\n:", 2.0)
    assert turn.actions == ("r1c2=4", "r1c4=1")
    # A valid compact reply is the three-digit form and nothing else (what the warm start writes); the canonical
    # name form, or two spaces, make an invalid reply there.
    assert not task.make_env(inst).step("r1c2=4 r1c4=1|").valid
    assert not task.make_env(inst).step("124  141|").valid
    assert task.response(["r1c2=4", "r1c4=1"]) == "124 141|"


def test_chat_render_marks_givens() -> None:
    task = make(style="chat")
    env = task.make_env(task.instance("train", 0))
    env.step("x</think><answer>place 4 at row 1 col 2</answer>")
    assert env.render().split("\n")[0] == "[3] 4 [2] ."
    assert "2x2 box contains the numbers 1-4" in task.prompt(task.instance("train", 0))
