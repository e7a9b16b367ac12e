"""FrozenLake (RAGEN ``frozen_lake``): walk from the start to the goal without falling in.

Dynamics are gymnasium's own ``FrozenLakeEnv`` (slippery moves included), reset with the instance seed, so an
episode is a deterministic function of the instance and the actions. Maps follow RAGEN's generator: each cell is
frozen with probability ``p``, start and goal are distinct random cells, and maps without a start-goal path are
drawn again (``random_start_goal=false`` uses gymnasium's ``generate_random_map`` instead: start top-left, goal
bottom-right). Reward (gymnasium): +1 on reaching the goal, else 0; the episode ends in a hole or on the goal.

State (RAGEN's grid, one row per line): ``P`` player, ``_`` frozen (the start too), ``O`` hole, ``G`` goal,
``X`` player in a hole, ``√`` player on the goal. Actions ``Left, Down, Right, Up`` (gymnasium 0..3).

``task.observation_format`` is RAGEN's: ``grid`` (above, the default), ``coord`` (chat: RAGEN's "Board size: ...",
``Start: (r, c)``, ``Goal:``, ``Player:`` / ``Player on goal:`` / ``Player in hole:``, ``Holes:`` lines; compact: the
same entities as letter + row + column, ``S01G30P01O13O22``) or ``grid_coord`` (the coordinates, then the grid).

``task.warm_start_captions`` (the ``frozenlake_tiny`` recipe: 0.25) replaces that fraction of the tiny model's
warm-start lines by map captions, ``P___\\n_O__\\n____\\n___G\\n=S00G33P00O11``: the grid, then its compact
coordinates, so the base learns to read where the holes are before RL asks it to avoid them.

Compact example (``size=4``, not slippery): prompt ``_P__\\n___O\\n_O_O\\nO__G\\n:``, response ``DR|``, feedback
``\\n____\\n__PO\\n_O_O\\nO__G\\n:``.
"""

from __future__ import annotations

import copy
import random
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from sesa_cli.config import ConfigError, TaskConfig
from sesa_cli.tasks.agent import AgentTask, AgentTaskConfig, Env, split_seed
from sesa_cli.tasks.base import register_task
from sesa_cli.tasks.grid import GridTask, draw_grid

ACTIONS = ("Left", "Down", "Right", "Up")
"""Action names in gymnasium's order (0 = Left, 1 = Down, 2 = Right, 3 = Up); RAGEN ids 1..4."""
_FORMATS = ("grid", "coord", "grid_coord")
_VOCAB = (
    ("P", "player"),
    ("_", "empty"),
    ("O", "hole"),
    ("G", "goal"),
    ("X", "player in hole"),
    ("√", "player on goal"),
)


@dataclass
class FrozenLakeTaskConfig(AgentTaskConfig):
    """RAGEN's FrozenLake. Defaults are RAGEN-2's (mll-lab-nu/RAGEN, 2026): p 0.9, slippery with success_rate 0.8.

    The Sept-2025 RAGEN (RAGEN-AI/RAGEN) used p 0.8 and gymnasium's default success_rate 1/3. The SESA acceptance
    experiment uses ``is_slippery=false`` (deterministic moves), as does RAGEN-2's own frozen-lake recipe
    (``success_rate: 1``).
    """

    size: int = 4
    """Side of the square map (RAGEN: 4)."""
    p: float = 0.9
    """Probability that a cell is frozen rather than a hole, in (0, 1] (RAGEN-2: 0.9; Sept-2025 RAGEN: 0.8)."""
    is_slippery: bool = True
    """Slippery ice: a move may go perpendicular to the intended direction (RAGEN: true)."""
    success_rate: float = 0.8
    """Slippery only: probability of the intended move; each perpendicular one gets half the rest (RAGEN-2: 0.8;
    gymnasium and Sept-2025 RAGEN: 1/3)."""
    random_start_goal: bool = True
    """RAGEN's maps (random distinct start and goal); false = gymnasium's generate_random_map (corners)."""
    observation_format: str = "grid"
    """What a state shows (RAGEN's ``observation_format``): grid, coord (zero-indexed coordinates of start, goal,
    player and holes) or grid_coord (both)."""
    warm_start_captions: float = 0.0
    """Fraction of the tiny model's warm-start lines that caption a map instead of playing it: the grid, ``=``, then
    the same state in the compact coordinate form (``S00G33P00O13O22``). Reading practice, not play: the base learns
    where the holes are, not how to avoid them. 0 = play lines only."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.size < 2:
            raise ConfigError("task.size must be >= 2")
        if not 0 < self.p <= 1:
            raise ConfigError(f"task.p={self.p} must be in (0, 1]")
        if not 0 <= self.success_rate <= 1:
            raise ConfigError(f"task.success_rate={self.success_rate} must be in [0, 1]")
        if self.observation_format not in _FORMATS:
            raise ConfigError(f"task.observation_format={self.observation_format!r}; valid: {', '.join(_FORMATS)}")
        if not 0 <= self.warm_start_captions < 1:
            raise ConfigError(f"task.warm_start_captions={self.warm_start_captions} must be in [0, 1)")
        # compact coordinates (observations or warm-start captions) write one digit per row and column
        digits = "task.warm_start_captions" if self.warm_start_captions > 0 else None
        if self.observation_format != "grid":
            digits = f"task.observation_format={self.observation_format}"
        if digits and self.style == "compact" and self.size > 10:
            raise ConfigError(
                f"{digits} writes one digit per row and column in the compact style, so task.size={self.size} must "
                "be <= 10"
            )


@dataclass(frozen=True)
class FrozenLakeInstance:
    desc: tuple[str, ...]
    """gymnasium map rows: S start, F frozen, H hole, G goal."""
    seed: int
    """Reset seed of gymnasium's env (drives the slips)."""


RENDER_CACHE = 65536
"""Most drawn states a FrozenLake task keeps (FrozenLakeEnv.render); the cache is emptied when full."""
MOVES_CACHE = 4096
"""Most maps whose transition table a FrozenLake task keeps (FrozenLakeTask.moves); emptied when full."""
Moves = list[list[tuple[int, float, bool]]]
"""A map's deterministic transitions: ``moves[state][action] = (next state, reward, terminated)``."""

_MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
_NAMES = {delta: name for name, delta in _MOVES.items()}


def shortest_path(board: Sequence[Sequence[str]], start: tuple[int, int]) -> list[str] | None:
    """Action names of a breadth-first shortest walk from ``start`` to the goal ``G`` avoiding holes ``H`` on a
    gymnasium map (rows of S/F/H/G), or None if the goal cannot be reached."""
    n = len(board)
    prev: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if board[cell[0]][cell[1]] == "G":
            path = []
            while (step := prev[cell]) is not None:
                cell, action = step
                path.append(action)
            return path[::-1]
        for action in ACTIONS:
            r, c = cell[0] + _MOVES[action][0], cell[1] + _MOVES[action][1]
            if 0 <= r < n and 0 <= c < n and (r, c) not in prev and board[r][c] != "H":
                prev[(r, c)] = (cell, action)
                queue.append((r, c))
    return None


def start_cell(board: Sequence[Sequence[str]]) -> tuple[int, int]:
    """(row, col) of the start ``S`` of a gymnasium map."""
    return next((r, c) for r, row in enumerate(board) for c, tile in enumerate(row) if tile == "S")


def _has_path(board: Sequence[Sequence[str]]) -> bool:
    return shortest_path(board, start_cell(board)) is not None


def generate_map(size: int, p: float, seed: int, random_start_goal: bool = True) -> list[str]:
    """A map with a path from S to G (RAGEN's generator, or gymnasium's with ``random_start_goal=False``)."""
    from gymnasium.envs.toy_text.frozen_lake import generate_random_map
    from gymnasium.utils import seeding

    if not random_start_goal:
        return generate_random_map(size=size, p=p, seed=seed)
    np_random, _ = seeding.np_random(seed)
    while True:
        board = np_random.choice(["F", "H"], (size, size), p=[p, 1 - p]).tolist()
        start = tuple(int(x) for x in np_random.integers(size, size=2))
        goal = tuple(int(x) for x in np_random.integers(size, size=2))
        if start != goal:
            board[start[0]][start[1]] = "S"
            board[goal[0]][goal[1]] = "G"
            if _has_path(board):
                return ["".join(row) for row in board]


class FrozenLakeEnv(Env):
    """One FrozenLake episode on gymnasium's ``FrozenLakeEnv``."""

    task: FrozenLakeTask
    inst: FrozenLakeInstance
    cfg: FrozenLakeTaskConfig

    def __init__(self, task: AgentTask, inst: FrozenLakeInstance) -> None:
        super().__init__(task, inst)
        self._gym: Any = None  # built on the first slippery action: prompts and plans only need the start
        row, col = start_cell(inst.desc)
        self._s = row * len(inst.desc[0]) + col
        """The player's state (gymnasium's ``row * ncol + col``), after every move."""

    @property
    def gym(self) -> Any:
        """gymnasium's ``FrozenLakeEnv`` for this episode, reset with the instance seed."""
        if self._gym is None:
            # A shallow copy of a per-map prototype shares its read-only transition table P; reset() gives the
            # copy its own random generator and state.
            self._gym = copy.copy(self.task.prototype(self.inst.desc))
            self._gym.reset(seed=self.inst.seed)
        return self._gym

    @property
    def position(self) -> tuple[int, int]:
        """(row, col) of the player."""
        return divmod(self._s, len(self.inst.desc[0]))

    def apply(self, action: str) -> tuple[float, bool, bool]:
        # deterministic ice plays from gymnasium's transition table (FrozenLakeTask.moves): no env, no generator
        moves = self.task.moves(self.inst.desc)
        if moves is not None:
            self._s, reward, terminated = moves[self._s][ACTIONS.index(action)]
        else:
            state, reward, terminated, _, _ = self.gym.step(ACTIONS.index(action))
            self._s = int(state)
        r, c = self.position
        return float(reward), bool(terminated), self.inst.desc[r][c] == "G"

    def state(self) -> int:
        """The player's cell (gymnasium's ``row * ncol + col``): the map is the instance's."""
        return self._s

    def move_name(self, action: str, before: Hashable, after: Hashable) -> str:
        """The direction the player moved (on slippery ice, not always the one intended)."""
        ncol = len(self.inst.desc[0])
        (r0, c0), (r1, c1) = divmod(int(before), ncol), divmod(int(after), ncol)  # type: ignore[call-overload]
        return _NAMES.get((r1 - r0, c1 - c0), action)

    def render(self) -> str:
        """The state as text; a function of the map and the player's cell, so drawn once per task (a bounded cache:
        the same few states recur in every group)."""
        cache = self.task.renders
        key = (self.inst.desc, self.position)
        if (text := cache.get(key)) is None:
            if len(cache) >= RENDER_CACHE:
                cache.clear()
            text = cache[key] = self._render()
        return text

    def _render(self) -> str:
        fmt = self.cfg.observation_format
        if fmt == "grid":
            return self._grid()
        coords = self._coords()
        if fmt == "coord":
            return coords
        if self.task.chat:  # RAGEN's grid_coord layout
            return "Coordinates: \n" + coords + "\n" + "Grid Map: \n" + self._grid()
        return coords + "\n" + self._grid()

    def _coords(self) -> str:
        """RAGEN's coordinate description (chat) or its compact form: letter, row, column per entity."""
        pr, pc = self.position
        desc = self.inst.desc
        cells = [(r, c) for r in range(len(desc)) for c in range(len(desc[r]))]
        tile = desc[pr][pc]
        player = {"G": ("Player on goal", "√"), "H": ("Player in hole", "X")}.get(tile, ("Player", "P"))
        entities = [
            ("Start", "S", [rc for rc in cells if desc[rc[0]][rc[1]] == "S"]),
            ("Goal", "G", [rc for rc in cells if desc[rc[0]][rc[1]] == "G"]),
            (*player, [(pr, pc)]),
            ("Holes", "O", [rc for rc in cells if desc[rc[0]][rc[1]] == "H"]),
        ]
        if not self.task.chat:
            return "".join(f"{letter}{r}{c}" for _, letter, where in entities for r, c in where)
        n_rows, n_cols = len(desc), len(desc[0])
        lines = [f"Board size: {n_rows} rows x {n_cols} cols (zero-indexed)."]
        lines += [f"{label}: " + ", ".join(f"({r}, {c})" for r, c in where) for label, _, where in entities if where]
        return "\n".join(lines)

    def _grid(self) -> str:
        desc, player = self.inst.desc, tuple(self.position)

        def symbol(r: int, c: int) -> str:
            if (r, c) == player:
                return {"H": "X", "G": "√"}.get(desc[r][c], "P")
            return {"H": "O", "G": "G"}.get(desc[r][c], "_")

        return draw_grid(len(desc), len(desc[0]), symbol)


@register_task("frozenlake", FrozenLakeTaskConfig)
class FrozenLakeTask(GridTask):
    """RAGEN FrozenLake, multi-turn (see the module docstring for layouts)."""

    cfg: FrozenLakeTaskConfig
    action_names = ACTIONS
    chat_vocab = _VOCAB
    # Verbatim from RAGEN's envs.yaml, typos included.
    chat_instruction = (
        "You are solving the FrozenLake puzzle. Forbid the whole and go to the target. You may move to the "
        "unintended direction due to the slippery ice. Example answer format: <think>To forbid the hole and go to "
        "the target, I should go left then go up.</think><answer>Left || Up</answer>"
    )

    def __init__(self, cfg: TaskConfig, seed: int = 0) -> None:
        super().__init__(cfg, seed)
        self._prototypes: dict[tuple[str, ...], Any] = {}
        self._moves: dict[tuple[str, ...], Moves] = {}
        self.renders: dict[tuple[tuple[str, ...], tuple[int, int]], str] = {}
        """Drawn states by (map, player cell): FrozenLakeEnv.render."""

    def alphabet(self) -> str:
        coords = "S0123456789" if self.cfg.observation_format != "grid" or self.cfg.warm_start_captions else ""
        captions = "=" if self.cfg.warm_start_captions else ""
        return super().alphabet() + coords + captions

    def warm_start_corpus(self, rng: random.Random, n: int) -> list[str]:
        """The agent corpus (play, plan lists, plan -> play), with ``task.warm_start_captions`` of its lines
        replaced by map captions ``grid + "\\n=" + coordinates`` of training maps (compact style)."""
        k = round(self.cfg.warm_start_captions * n) if not self.chat else 0
        if k == 0 or self.seed != 0:  # for seed != 0 the base class asks a seed-0 task, which lands here again
            return super().warm_start_corpus(rng, n)
        lines = super().warm_start_corpus(rng, n - k)
        for _ in range(k):
            env = self.make_env(self.instance("train", rng.randrange(self.warm_pool)))
            lines.append(env._grid() + "\n=" + env._coords())
        rng.shuffle(lines)
        return lines

    def listable_actions(self) -> Sequence[str] | None:
        """The moves on deterministic ice only (not slippery, or ``success_rate=1``): a slippery episode is not a
        function of the replies."""
        if self.cfg.is_slippery and self.cfg.success_rate < 1:
            return None
        return super().listable_actions()

    def generate(self, split: str, index: int) -> FrozenLakeInstance:
        seed = split_seed("frozenlake", split, self.seed, index)
        c = self.cfg
        return FrozenLakeInstance(tuple(generate_map(c.size, c.p, seed, c.random_start_goal)), seed)

    def make_env(self, inst: Any) -> FrozenLakeEnv:
        return FrozenLakeEnv(self, inst)

    def prototype(self, desc: tuple[str, ...]) -> Any:
        """gymnasium's ``FrozenLakeEnv`` for a map, built once (its transition table costs ~0.5 ms)."""
        if desc not in self._prototypes:
            from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake

            if len(self._prototypes) >= 4096:
                self._prototypes.clear()
            slippery, rate = self.cfg.is_slippery, self.cfg.success_rate
            self._prototypes[desc] = GymFrozenLake(desc=list(desc), is_slippery=slippery, success_rate=rate)
        return self._prototypes[desc]

    def moves(self, desc: tuple[str, ...]) -> Moves | None:
        """On deterministic ice (not slippery, or ``success_rate=1``), gymnasium's transition table of the map as
        ``moves[state][action] = (next state, reward, terminated)``: each move's outcome of probability 1, read from
        the env's own ``P``, so the dynamics stay gymnasium's. gymnasium's ``step`` would draw a random number per
        move to pick that same outcome; playing from the table skips the env, its reset and its generator (about a
        third of the task's own time per episode; a training run's time, the model's, barely moves). None on
        slippery ice, which steps gymnasium's env."""
        if self.cfg.is_slippery and self.cfg.success_rate < 1:
            return None
        if desc not in self._moves:
            if len(self._moves) >= MOVES_CACHE:
                self._moves.clear()
            table = self.prototype(desc).P
            sure = [
                [next(o for o in table[s][a] if o[0] == 1) for a in range(len(ACTIONS))] for s in range(len(table))
            ]
            self._moves[desc] = [[(int(s2), float(r), bool(t)) for _, s2, r, t in row] for row in sure]
        return self._moves[desc]
