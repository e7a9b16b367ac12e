"""Sokoban (RAGEN ``sokoban``): push every box onto a target.

Pure-Python dynamics with gym-sokoban's push-or-move semantics (RAGEN's actions 1..4): moving into a box pushes it
if the cell behind it is free floor, otherwise nothing moves; moving into a wall does nothing. Reward per action
(gym-sokoban): -0.1, +1 when a box lands on a target, -1 when a box leaves one, +10 when all boxes are on targets
(the episode then ends solved).

Rooms come from a reverse-play generator in the manner of gym-sokoban: a random-walk room topology
(``int(1.7 * (h + w))`` steps over gym-sokoban's five masks), player and targets on random floor cells with the
boxes on their targets, then ``reverse_steps`` random reverse moves in which the player pulls any box behind it.
Every room is then solved by breadth-first search over (player, boxes) states; a room that is already solved or
cannot be solved within ``max_actions`` is discarded and the next attempt seed is used. So every instance is
solvable inside the episode's action budget, and ``SokobanInstance.solution`` is a shortest solution.

State (RAGEN's grid): ``#`` wall, ``_`` empty, ``O`` target, ``√`` box on target, ``X`` box, ``P`` player,
``S`` player on target. Actions ``Up, Down, Left, Right``. Differences from RAGEN: boxes that start on a target
are shown (and counted) as on target (gym-sokoban shows them as plain boxes), and RAGEN's generator does not check
that a room is solvable within its 10-action budget.

Compact example (6x6, one box): prompt ``######\\n#__###\\n#_O_##\\n#_X__#\\n#__P_#\\n######\\n:``, response
``L|``, feedback ``\\n######\\n#__###\\n#_O_##\\n#_X__#\\n#_P__#\\n######\\n:``; then ``U|`` pushes the box home
(reward -0.1 + 1 + 10) and the episode ends (feedback "").
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from sesa_cli.config import ConfigError
from sesa_cli.tasks.agent import AgentTask, AgentTaskConfig, Env, split_seed
from sesa_cli.tasks.base import register_task
from sesa_cli.tasks.grid import GridTask, draw_grid

ACTIONS = ("Up", "Down", "Left", "Right")
"""RAGEN's action names (ids 1..4 = gym-sokoban's push-or-move actions)."""
DELTAS = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
_VOCAB = (
    ("#", "wall"),
    ("_", "empty"),
    ("O", "target"),
    ("√", "box on target"),
    ("X", "box"),
    ("P", "player"),
    ("S", "player on target"),
)
# gym-sokoban's topology masks: the 1s become floor around the walker's position.
_MASKS = (
    ((0, 0, 0), (1, 1, 1), (0, 0, 0)),
    ((0, 1, 0), (0, 1, 0), (0, 1, 0)),
    ((0, 0, 0), (1, 1, 0), (0, 1, 0)),
    ((0, 0, 0), (1, 1, 0), (1, 1, 0)),
    ((0, 0, 0), (0, 1, 1), (0, 1, 0)),
)
_MAX_ATTEMPTS = 10000

Cell = tuple[int, int]


@dataclass
class SokobanTaskConfig(AgentTaskConfig):
    """RAGEN's SimpleSokoban by default (6x6, one box, 10 actions); LargerSokoban is ``dim_room=[8,8] num_boxes=2``."""

    dim_room: list[int] = field(default_factory=lambda: [6, 6])
    """Room size [rows, cols], outer walls included (RAGEN SimpleSokoban: 6x6; LargerSokoban: 8x8)."""
    num_boxes: int = 1
    """Boxes (and targets) per room (RAGEN SimpleSokoban: 1; LargerSokoban: 2)."""
    reverse_steps: int = 40
    """Random reverse moves (pulls) that scatter the boxes from their targets (RAGEN's generator searches 300
    reverse moves deep); larger values give longer solutions, up to max_actions."""
    min_solution_steps: int = 2
    """Discard rooms whose shortest solution is shorter than this (RAGEN-2's ``min_solution_steps``, off by default
    there). With 1, a quarter of 6x6 rooms are one push from solved and random play solves 22%; with 2, 15%."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.dim_room) != 2 or min(self.dim_room) < 4:
            raise ConfigError(f"task.dim_room={list(self.dim_room)} must be [rows, cols] with both >= 4")
        if self.num_boxes < 1:
            raise ConfigError("task.num_boxes must be >= 1")
        if self.num_boxes + 1 > (self.dim_room[0] - 2) * (self.dim_room[1] - 2) // 2:
            raise ConfigError(f"task.num_boxes={self.num_boxes} does not fit in task.dim_room={list(self.dim_room)}")
        if self.reverse_steps < 1:
            raise ConfigError("task.reverse_steps must be >= 1")
        if not 1 <= self.min_solution_steps <= self.max_actions:
            raise ConfigError(
                f"task.min_solution_steps={self.min_solution_steps} must be between 1 and "
                f"task.max_actions={self.max_actions}"
            )


@dataclass(frozen=True)
class SokobanInstance:
    height: int
    width: int
    floor: frozenset[Cell]
    """Every non-wall cell (targets included)."""
    targets: tuple[Cell, ...]
    boxes: tuple[Cell, ...]
    """Initial box cells."""
    player: Cell
    """Initial player cell."""
    solution: tuple[str, ...]
    """A shortest solution (breadth-first search); never shown to the policy."""


def _topology(rng: random.Random, h: int, w: int) -> set[Cell]:
    """gym-sokoban's room topology: a random walk that stamps masks of floor, outer ring kept as walls."""
    directions = ((1, 0), (0, 1), (-1, 0), (0, -1))
    d = rng.choice(directions)
    r, c = rng.randint(1, h - 1), rng.randint(1, w - 1)
    floor: set[Cell] = set()
    for _ in range(int(1.7 * (h + w))):
        if rng.random() < 0.35:
            d = rng.choice(directions)
        r = max(min(r + d[0], h - 2), 1)
        c = max(min(c + d[1], w - 2), 1)
        mask = rng.choice(_MASKS)
        for i in range(3):
            for j in range(3):
                if mask[i][j]:
                    floor.add((r - 1 + i, c - 1 + j))
    return {(i, j) for i, j in floor if 0 < i < h - 1 and 0 < j < w - 1}


def push(floor: frozenset[Cell], boxes: frozenset[Cell], player: Cell, action: str) -> tuple[frozenset[Cell], Cell]:
    """gym-sokoban's push-or-move: the (boxes, player) after ``action`` (unchanged if blocked)."""
    dr, dc = DELTAS[action]
    nxt = (player[0] + dr, player[1] + dc)
    if nxt not in floor:
        return boxes, player
    if nxt in boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if beyond not in floor or beyond in boxes:
            return boxes, player
        return (boxes - {nxt}) | {beyond}, nxt
    return boxes, nxt


def solve(
    floor: frozenset[Cell], targets: frozenset[Cell], boxes: frozenset[Cell], player: Cell, max_depth: int
) -> list[str] | None:
    """A shortest action sequence putting every box on a target, or None if none has <= max_depth actions."""
    if boxes <= targets:
        return []
    start = (boxes, player)
    parent: dict[tuple[frozenset[Cell], Cell], tuple[tuple[frozenset[Cell], Cell], str] | None] = {start: None}
    frontier = [start]
    for _ in range(max_depth):
        nxt_frontier = []
        for state in frontier:
            for action in ACTIONS:
                new = push(floor, state[0], state[1], action)
                if new in parent:
                    continue
                parent[new] = (state, action)
                if new[0] <= targets:
                    plan: list[str] = []
                    node: tuple[frozenset[Cell], Cell] = new
                    while (link := parent[node]) is not None:
                        node, step = link
                        plan.append(step)
                    return plan[::-1]
                nxt_frontier.append(new)
        frontier = nxt_frontier
        if not frontier:
            break
    return None


def _displacement(boxes: set[Cell] | frozenset[Cell], targets: list[Cell]) -> int:
    """Sum over boxes of the Manhattan distance to the nearest target (gym-sokoban's box displacement score)."""
    return sum(min(abs(b[0] - t[0]) + abs(b[1] - t[1]) for t in targets) for b in boxes)


def generate_room(
    rng: random.Random, h: int, w: int, num_boxes: int, reverse_steps: int, min_steps: int, max_steps: int
) -> tuple[frozenset[Cell], tuple[Cell, ...], tuple[Cell, ...], Cell, tuple[str, ...]] | None:
    """One reverse-played room and a shortest solution, or None if this attempt failed.

    The walk keeps its most scattered state (largest box displacement, like gym-sokoban's best-score search), then
    the player wanders up to 3 free steps (RAGEN's ``add_random_player_movement``: otherwise the player always
    starts next to the box it just pulled). The room is kept if its shortest solution has min_steps..max_steps actions.
    """
    floor = _topology(rng, h, w)
    if len(floor) < num_boxes + 2:
        return None
    cells = sorted(floor)
    player = rng.choice(cells)
    targets = rng.sample([x for x in cells if x != player], num_boxes)
    boxes = set(targets)
    best_score, best = 0, (frozenset(boxes), player)
    for _ in range(reverse_steps):
        dr, dc = DELTAS[rng.choice(ACTIONS)]
        nxt = (player[0] + dr, player[1] + dc)
        if nxt not in floor or nxt in boxes:
            continue
        behind = (player[0] - dr, player[1] - dc)
        if behind in boxes:  # the reverse move pulls the box behind the player
            boxes.remove(behind)
            boxes.add(player)
        player = nxt
        score = _displacement(boxes, targets)
        if score >= best_score > 0 or score > best_score:
            best_score, best = score, (frozenset(boxes), player)
    if best_score == 0:
        return None
    room_boxes, player = best
    visited = {player}
    if rng.random() < (0.8 if best_score == 1 else 0.5):
        for _ in range(3):
            moves = [(p[0] + dr, p[1] + dc) for p in (player,) for dr, dc in DELTAS.values()]
            moves = [m for m in moves if m in floor and m not in room_boxes and m not in visited]
            if not moves:
                break
            player = rng.choice(moves)
            visited.add(player)
            if rng.random() > 0.5:
                break
    frozen_floor = frozenset(floor)
    plan = solve(frozen_floor, frozenset(targets), room_boxes, player, max_steps)
    if plan is None or len(plan) < max(min_steps, 1):  # unsolvable within the budget, solved, or too easy
        return None
    return frozen_floor, tuple(sorted(targets)), tuple(sorted(room_boxes)), player, tuple(plan)


class SokobanEnv(Env):
    inst: SokobanInstance

    def __init__(self, task: AgentTask, inst: SokobanInstance) -> None:
        super().__init__(task, inst)
        self.boxes = frozenset(inst.boxes)
        self.player = inst.player
        self._targets = frozenset(inst.targets)

    def on_target(self) -> int:
        return len(self.boxes & self._targets)

    def apply(self, action: str) -> tuple[float, bool, bool]:
        before = self.on_target()
        self.boxes, self.player = push(self.inst.floor, self.boxes, self.player, action)
        after = self.on_target()
        reward = -0.1 + (1.0 if after > before else -1.0 if after < before else 0.0)
        solved = after == len(self.boxes)
        if solved:
            reward += 10.0
        return reward, solved, solved

    def state(self) -> tuple[Cell, frozenset[Cell]]:
        """The player's cell and the boxes' (walls, floor and targets are the instance's)."""
        return self.player, self.boxes

    def render(self) -> str:
        def symbol(r: int, c: int) -> str:
            cell = (r, c)
            target = cell in self._targets
            if cell == self.player:
                return "S" if target else "P"
            if cell in self.boxes:
                return "√" if target else "X"
            if target:
                return "O"
            return "_" if cell in self.inst.floor else "#"

        return draw_grid(self.inst.height, self.inst.width, symbol)


@register_task("sokoban", SokobanTaskConfig)
class SokobanTask(GridTask):
    """RAGEN SimpleSokoban, multi-turn (see the module docstring for rules and layouts)."""

    cfg: SokobanTaskConfig
    action_names = ACTIONS
    chat_vocab = _VOCAB
    # Verbatim from RAGEN's envs.yaml (a YAML block: trailing spaces and newlines included).
    chat_instruction = (
        "You are solving the Sokoban puzzle. \n"
        "You are the player and you need to push all boxes to targets. \n"
        "When you are right next to a box, you can push it by moving in the same direction. \n"
        "You cannot push a box through a wall, and you cannot pull a box. \n"
        "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>\n"
    )

    def generate(self, split: str, index: int) -> SokobanInstance:
        c = self.cfg
        h, w = c.dim_room
        for attempt in range(_MAX_ATTEMPTS):
            rng = random.Random(split_seed("sokoban", split, self.seed, index, attempt))
            room = generate_room(rng, h, w, c.num_boxes, c.reverse_steps, c.min_solution_steps, c.max_actions)
            if room is not None:
                return SokobanInstance(h, w, *room)
        raise ConfigError(
            f"no solvable {h}x{w} room with {c.num_boxes} boxes within task.max_actions={c.max_actions} after "
            f"{_MAX_ATTEMPTS} attempts; raise task.max_actions or lower task.num_boxes"
        )

    def make_env(self, inst: Any) -> SokobanEnv:
        return SokobanEnv(self, inst)
