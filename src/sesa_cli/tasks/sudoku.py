"""Sudoku (RAGEN-2 ``sudoku``): fill the grid by placements until it is solved.

Puzzles: a full grid from a seeded shuffle of the base pattern (bands, rows within bands, stacks, columns within
stacks, digit relabelling, transpose), then cells are removed in random order as long as a backtracking solver still
finds exactly one solution, until ``num_blanks`` cells are empty (else the next attempt seed is used). Unlike
RAGEN-2, uniqueness is checked, so "the solution" is well defined.

Actions place a value in a cell, canonical name ``r{row}c{col}={value}`` (1-indexed). The compact style writes a
placement as three digits, row, column and value (``124`` is ``r1c2=4``: a turn of five placements is 20 characters
with the stop, not 35), separated by single spaces: a valid compact reply is exactly that (sesa_cli.tasks.layouts). Reward per placement (RAGEN-2): +1 for the solution's
value, +0.5 for a value that breaks no rule but is not the solution's, -0.1 for an invalid placement (a given cell,
a row/column/box conflict, or the value the cell already holds), which changes nothing but uses an action; +10 more
when the grid is complete (then it is the unique solution). Placements may overwrite earlier placements. Cell or
value out of range counts as an unknown action (format penalty).

Budget: the episode allows ``max_actions`` placements, so ``max_actions >= num_blanks`` (checked) makes success
reachable. RAGEN-2's 9x9 SimpleSudoku leaves 32 blanks with 20 actions, so it can never be solved in one episode;
here 4x4 with 6 blanks and 10 actions is the default and a 9x9 option must raise the budget.

Compact example (4x4): prompt ``3.2.\\n21.3\\n1...\\n4312\\n:``, response ``124 141|`` (reward 2), feedback
``\\n3421\\n21.3\\n1...\\n4312\\n:``. Chat style accepts RAGEN-2's forms: ``place N at row R col C``,
``place N at (R,C)``, ``N at R,C``, ``(R,C,N)``, ``R,C,N``, and ``rRcC=N``.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sesa_cli.config import ConfigError
from sesa_cli.tasks.agent import COMPACT_LAYOUT, AgentTask, AgentTaskConfig, Env, split_seed
from sesa_cli.tasks.base import register_task

Grid = tuple[tuple[int, ...], ...]
"""Rows of values, 0 = empty."""

_MAX_ATTEMPTS = 200
_NUM = "([0-9]{1,2})"  # bounded: int() of a huge digit string is slow and may raise
_COMPACT = re.compile(rf"r{_NUM}c{_NUM}={_NUM}", re.IGNORECASE)
_DIGITS = re.compile(r"([1-9])([1-9])([1-9])")  # compact style: row, column, value
# (pattern, order of the captured numbers as (row, col, value))
_CHAT_FORMS = (
    # Each whitespace run is matched one way only, so a long token cannot make the match quadratic.
    (re.compile(rf"place\s+{_NUM}\s+at\s+row\s+{_NUM}(?:\s*,\s*|\s+)col(?:umn)?\s+{_NUM}", re.IGNORECASE), (1, 2, 0)),
    (re.compile(rf"place\s+{_NUM}\s+at\s+\(\s*{_NUM}\s*,\s*{_NUM}\s*\)", re.IGNORECASE), (1, 2, 0)),
    (re.compile(rf"{_NUM}\s+at\s+(?:\(\s*)?{_NUM}\s*,\s*{_NUM}(?:\s*\))?", re.IGNORECASE), (1, 2, 0)),
    (re.compile(rf"\(\s*{_NUM}\s*,\s*{_NUM}\s*,\s*{_NUM}\s*\)"), (0, 1, 2)),
    (re.compile(rf"{_NUM}\s*,\s*{_NUM}\s*,\s*{_NUM}"), (0, 1, 2)),
    (_COMPACT, (0, 1, 2)),
)
_RULE_AWARE = 0.25  # warm start: share of random placements that pick a value breaking no rule
_PLAN_PLACEMENTS = 3  # warm start: the most placements a sketch (plan) names
CORRECT_REWARD = 1.0
VALID_REWARD = 0.5
INVALID_REWARD = -0.1
SOLVED_BONUS = 10.0


@dataclass
class SudokuTaskConfig(AgentTaskConfig):
    """Sudoku with a unique solution and a budget that allows solving it (RAGEN-2's rewards)."""

    size: int = 4
    """Side of the grid: 4 (2x2 boxes) or 9 (3x3 boxes) (RAGEN-2 default: 9; its config class: 4)."""
    num_blanks: int = 6
    """Empty cells of a puzzle (RAGEN-2 "easy" removes 40%: 6 of 16, 32 of 81). At most 10 (4x4) or 55 (9x9)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.size not in (4, 9):
            raise ConfigError(f"task.size={self.size} is not supported; choose 4 or 9")
        most = 10 if self.size == 4 else 55
        if not 1 <= self.num_blanks <= most:
            raise ConfigError(f"task.num_blanks={self.num_blanks} must be between 1 and {most} for size {self.size}")
        if self.max_actions < self.num_blanks:
            raise ConfigError(
                f"task.max_actions={self.max_actions} < task.num_blanks={self.num_blanks}: the puzzle could never be "
                "solved within an episode; raise task.max_actions"
            )
        if self.max_turns * self.max_actions_per_turn < self.num_blanks:
            raise ConfigError(
                f"task.max_turns={self.max_turns} x task.max_actions_per_turn={self.max_actions_per_turn} < "
                f"task.num_blanks={self.num_blanks}: the puzzle could never be solved; raise either"
            )


@dataclass(frozen=True)
class SudokuInstance:
    puzzle: Grid
    """The givens (0 = blank)."""
    solution: Grid
    """The unique solution."""


# --------------------------------------------------------------------------------------------------- checkers
def _box(n: int) -> int:
    b = math.isqrt(n)
    if b * b != n:
        raise ValueError(f"grid side {n} is not a square")
    return b


def is_solved(grid: Sequence[Sequence[int]]) -> bool:
    """True iff ``grid`` is a complete, valid Sudoku: every row, column and box holds 1..n once. Never raises."""
    try:
        n = len(grid)
        b = math.isqrt(n)
        if n == 0 or b * b != n or any(len(row) != n for row in grid):
            return False
        want = set(range(1, n + 1))
        rows = [set(row) for row in grid]
        cols = [{grid[r][c] for r in range(n)} for c in range(n)]
        boxes = [
            {grid[r][c] for r in range(br, br + b) for c in range(bc, bc + b)}
            for br in range(0, n, b)
            for bc in range(0, n, b)
        ]
        return all(group == want for group in rows + cols + boxes)
    except TypeError:
        return False


def is_valid_solution(puzzle: Sequence[Sequence[int]], grid: Sequence[Sequence[int]]) -> bool:
    """True iff ``grid`` is solved and keeps every given of ``puzzle``."""
    if not is_solved(grid) or len(puzzle) != len(grid):
        return False
    return all(p in (0, g) for prow, grow in zip(puzzle, grid, strict=False) for p, g in zip(prow, grow, strict=False))


def conflicts(grid: Sequence[Sequence[int]], r: int, c: int, v: int) -> bool:
    """Whether value ``v`` at (r, c) repeats a value of its row, column or box (the cell itself excluded)."""
    n = len(grid)
    b = _box(n)
    if any(grid[r][j] == v for j in range(n) if j != c) or any(grid[i][c] == v for i in range(n) if i != r):
        return True
    br, bc = r - r % b, c - c % b
    return any(grid[i][j] == v for i in range(br, br + b) for j in range(bc, bc + b) if (i, j) != (r, c))


def count_solutions(puzzle: Sequence[Sequence[int]], limit: int = 2) -> int:
    """Number of solutions of ``puzzle``, counting stops at ``limit`` (backtracking, fewest candidates first)."""
    n = len(puzzle)
    b = _box(n)
    full = (1 << (n + 1)) - 2  # bits 1..n
    grid = [list(row) for row in puzzle]
    rows, cols, boxes = [0] * n, [0] * n, [0] * n
    empty = []
    for r in range(n):
        for c in range(n):
            v = grid[r][c]
            if v:
                bit = 1 << v
                k = (r // b) * b + c // b
                if rows[r] & bit or cols[c] & bit or boxes[k] & bit:
                    return 0
                rows[r] |= bit
                cols[c] |= bit
                boxes[k] |= bit
            else:
                empty.append((r, c, (r // b) * b + c // b))
    count = 0

    def search() -> None:
        nonlocal count
        best, best_free = -1, 0
        for i, (r, c, k) in enumerate(empty):
            if grid[r][c]:
                continue
            free = full & ~(rows[r] | cols[c] | boxes[k])
            if best < 0 or free.bit_count() < best_free.bit_count():
                best, best_free = i, free
                if free.bit_count() <= 1:
                    break
        if best < 0:
            count += 1
            return
        r, c, k = empty[best]
        free = best_free
        while free and count < limit:
            bit = free & -free
            free ^= bit
            grid[r][c] = bit.bit_length() - 1
            rows[r] |= bit
            cols[c] |= bit
            boxes[k] |= bit
            search()
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[k] ^= bit
            grid[r][c] = 0

    search()
    return count


# --------------------------------------------------------------------------------------------------- generator
def full_grid(rng: random.Random, n: int) -> Grid:
    """A random complete grid: the base pattern with shuffled bands, rows, stacks, columns, digits, transpose."""
    b = _box(n)
    bands = rng.sample(range(b), b)
    rows = [band * b + i for band in bands for i in rng.sample(range(b), b)]
    stacks = rng.sample(range(b), b)
    cols = [stack * b + j for stack in stacks for j in rng.sample(range(b), b)]
    digits = rng.sample(range(1, n + 1), n)
    grid = [[digits[(r * b + r // b + c) % n] for c in cols] for r in rows]
    if rng.random() < 0.5:
        grid = [list(col) for col in zip(*grid, strict=True)]
    return tuple(tuple(row) for row in grid)


def make_puzzle(rng: random.Random, solution: Grid, num_blanks: int) -> Grid | None:
    """Blank cells of ``solution`` in random order while the solution stays unique; None if stuck early."""
    n = len(solution)
    puzzle = [list(row) for row in solution]
    blanks = 0
    for r, c in rng.sample([(r, c) for r in range(n) for c in range(n)], n * n):
        if blanks == num_blanks:
            break
        keep, puzzle[r][c] = puzzle[r][c], 0
        if count_solutions(puzzle) == 1:
            blanks += 1
        else:
            puzzle[r][c] = keep
    return tuple(tuple(row) for row in puzzle) if blanks == num_blanks else None


def parse_placement(token: str, n: int, chat: bool) -> tuple[int, int, int] | None:
    """(row, col, value), 1-indexed and in range, named by ``token``; None otherwise. Never raises."""
    token = token.strip()
    forms = _CHAT_FORMS if chat else ((_DIGITS, (0, 1, 2)), (_COMPACT, (0, 1, 2)))
    for pattern, order in forms:
        match = pattern.fullmatch(token)
        if match:
            nums = [int(x) for x in match.groups()]
            r, c, v = (nums[i] for i in order)
            if 1 <= r <= n and 1 <= c <= n and 1 <= v <= n:
                return r, c, v
            return None
    return None


class SudokuEnv(Env):
    inst: SudokuInstance

    def __init__(self, task: AgentTask, inst: SudokuInstance) -> None:
        super().__init__(task, inst)
        self.board = [list(row) for row in inst.puzzle]

    def apply(self, action: str) -> tuple[float, bool, bool]:
        n = len(self.board)
        placed = parse_placement(action, n, chat=False)
        if placed is None:  # not reachable through step(): actions are canonical
            return INVALID_REWARD, False, False
        r, c, v = (x - 1 for x in placed)
        v += 1
        if self.inst.puzzle[r][c] or self.board[r][c] == v or conflicts(self.board, r, c, v):
            return INVALID_REWARD, False, False
        self.board[r][c] = v
        reward = CORRECT_REWARD if v == self.inst.solution[r][c] else VALID_REWARD
        if all(all(row) for row in self.board):
            # No placement ever conflicts, so a full board is a valid grid, hence the unique solution.
            solved = is_valid_solution(self.inst.puzzle, self.board)
            return reward + (SOLVED_BONUS if solved else 0.0), solved, solved
        return reward, False, False

    def candidates(self, r: int, c: int) -> list[int]:
        n = len(self.board)
        return [v for v in range(1, n + 1) if not conflicts(self.board, r, c, v)]

    def state(self) -> tuple[tuple[int, ...], ...]:
        """The board (0 = an empty cell)."""
        return tuple(tuple(row) for row in self.board)

    def render(self) -> str:
        if not self.task.chat:
            return "\n".join("".join(str(v) if v else "." for v in row) for row in self.board)
        lines = []
        for given, row in zip(self.inst.puzzle, self.board, strict=True):
            lines.append(" ".join(f"[{v}]" if g else (str(v) if v else ".") for g, v in zip(given, row, strict=True)))
        return "\n".join(lines)


@register_task("sudoku", SudokuTaskConfig)
class SudokuTask(AgentTask):
    """Sudoku by placements, multi-turn (see the module docstring for rules and layouts)."""

    cfg: SudokuTaskConfig
    chat_max_words = 150  # RAGEN-2 SimpleSudoku's max_tokens

    def instruction(self) -> str:
        # RAGEN-2's SimpleSudoku instruction, sized to the grid (it hard-codes 9x9 and the value 5).
        n, b = self.cfg.size, _box(self.cfg.size)
        return (
            f"You are solving a Sudoku puzzle. Fill in the grid so that every row, column, and {b}x{b} box contains "
            f"the numbers 1-{n} without repetition.\n"
            "Initial cells are shown in [brackets] and cannot be modified. Empty cells are shown as dots (.).\n"
            f"Place numbers one at a time using the format: <answer>place {n} at row 2 col 3</answer> or "
            f"<answer>2,3,{n}</answer>\n"
            "The environment will provide feedback on valid/invalid moves.\n"
        )

    def alphabet(self) -> str:
        return "".join(str(v) for v in range(1, self.cfg.size + 1)) + ". " + COMPACT_LAYOUT

    def generate(self, split: str, index: int) -> SudokuInstance:
        n, blanks = self.cfg.size, self.cfg.num_blanks
        for attempt in range(_MAX_ATTEMPTS):
            rng = random.Random(split_seed("sudoku", split, self.seed, index, attempt))
            solution = full_grid(rng, n)
            puzzle = make_puzzle(rng, solution, blanks)
            if puzzle is not None:
                return SudokuInstance(puzzle, solution)
        raise ConfigError(
            f"no {n}x{n} puzzle with a unique solution and {blanks} blanks after {_MAX_ATTEMPTS} attempts; "
            "lower task.num_blanks"
        )

    def make_env(self, inst: Any) -> SudokuEnv:
        return SudokuEnv(self, inst)

    compact_sep = " "

    def compact_tokens(self, body: str) -> list[str]:
        return body.split(" ")

    def _action(self, token: str, chat: bool) -> str | None:
        placed = parse_placement(token, self.cfg.size, chat)
        return None if placed is None else "r{}c{}={}".format(*placed)

    def compact_action(self, token: str) -> str | None:
        return self._action(token, chat=False)

    def chat_action(self, token: str) -> str | None:
        return self._action(token, chat=True)

    def compact_word(self, action: str) -> str:
        r, c, v = parse_placement(action, self.cfg.size, chat=False) or (0, 0, 0)
        return f"{r}{c}{v}"

    def chat_word(self, action: str) -> str:
        r, c, v = parse_placement(action, self.cfg.size, chat=False) or (0, 0, 0)
        return f"place {v} at row {r} col {c}"

    def random_actions(self, env: Env, rng: random.Random, k: int) -> list[str]:
        """Placements in distinct open cells; values uniform, or (1 in 4) one that breaks no rule at that moment.

        With 6 blanks in 4x4 this solves about 14% of episodes (half rule-aware values: 43%, none: 1.5%).
        """
        if not isinstance(env, SudokuEnv):
            return []
        n = self.cfg.size
        open_cells = [(r, c) for r in range(n) for c in range(n) if not env.inst.puzzle[r][c]]
        empty = [cell for cell in open_cells if not env.board[cell[0]][cell[1]]] or open_cells
        out = []
        for r, c in rng.sample(empty, min(k, len(empty))):
            options = env.candidates(r, c)
            v = rng.choice(options) if options and rng.random() < _RULE_AWARE else rng.randint(1, n)
            out.append(f"r{r + 1}c{c + 1}={v}")
        return out

    def random_plan(self, inst: Any, rng: random.Random) -> list[str]:
        # A sketch is the first few placements (a full list would be as long as a solution).
        return self.random_actions(self.make_env(inst), rng, rng.randint(1, _PLAN_PLACEMENTS))

    def longest_plan(self) -> list[str]:
        return ["r1c1=1"] * _PLAN_PLACEMENTS
