"""Multi-turn agent tasks (RAGEN's text environments): the shared episode logic, layouts and warm start.

An episode is a conversation with an environment. The rollout runner builds it as plain text:

    context = prompt(inst)
    for each turn:   response_t ~ policy(context)        (ends with ``stop`` or is cut at max_new_tokens)
                     turn_t = env.step(response_t)
                     context += response_t + turn_t.feedback   (feedback is teacher-forced, not trained)
                     stop when turn_t.done

so ``prompt`` ends exactly where the first response begins and every ``feedback`` ends exactly where the next one
begins. ``Env`` is the single source of truth for the horizon: it reports ``done`` when the goal is reached, the
episode fails, the per-episode action budget (``max_actions``) is used up, or ``max_turns`` turns were played.

Per turn: a valid reply (1..``max_actions_per_turn`` known actions in the style's format and nothing else; the
rule and its reasons: sesa_cli.tasks.layouts) runs its actions one by one until the episode ends or the budget is
spent; an invalid one runs none, pays ``format_penalty`` and ends the episode unsolved (RAGEN drops unknown actions
and plays on; sesa does not, so that no reply the exact walker counts invalid can win). The episode reward is the
sum of the turn rewards (RAGEN's ``use_turn_scores=False``).

Two renderings (``task.style``), one object each (sesa_cli.tasks.layouts):

* ``compact`` (the character-level tiny model): the state, then ``:`` and the actions, ending with ``stop`` = ``|``::

      <state>\\n:<actions>|\\n<state>\\n:<actions>|...

  A sketch (SESA stage I) is a plan in the same action syntax: sketches are drafted as
  ``<state>\\n?<plan>|<plan>|...`` (``between`` = "") and a sketch is followed from ``<state>\\n!<plan>:``. The
  two marks differ so that after a plan the model knows whether another plan (``?``) or the episode (``!``) follows.
* ``chat`` (instruction-tuned models): RAGEN's format (sesa_cli.tasks.ragen): its system text with the symbol
  legend and action list, ``Turn i:`` / ``State:`` blocks and ``Reward:`` lines as plain text; a response reads
  ``...</think><answer>Right || Up</answer>``.

The grid worlds moved in by direction (FrozenLake, Sokoban) share sesa_cli.tasks.grid; Sudoku places values.
"""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from sesa_cli.config import ConfigError, TaskConfig
from sesa_cli.tasks.base import Score, Turn, check_split, draw_distinct
from sesa_cli.tasks.layouts import LAYOUTS, Layout
from sesa_cli.tasks.ragen import RagenTask

COMPACT_LAYOUT = "\n:?!|"
"""The characters of the compact layout: line breaks, ``:`` (a turn follows), ``?`` (plans follow), ``!`` (the
episode that carries out this plan follows), the stop."""


SOLUTION_KEYS = ("route", "states", "actions")
"""The values of ``task.solution_key`` (:class:`AgentTaskConfig`)."""
NO_MOVE = "stay"
"""The solution key of a valid episode that never changed its state (every move into a wall, say)."""


def erase_loops(path: Sequence[tuple[Hashable, str]], start: Hashable) -> list[tuple[Hashable, str]]:
    """The loop-erased ``path``: (state, move into it) steps from ``start``, cut back to a state's first visit
    whenever the walk returns to it (chronological loop erasure, as in Lawler's loop-erased random walk). Every step
    kept is one the episode took (the last visit of a state is followed by a real move), so the route is a walk of
    the environment's own transitions."""
    route: list[tuple[Hashable, str]] = []
    place: dict[Hashable, int] = {start: 0}  # state -> its index in [start, *route's states]
    for state, move in path:
        at = place.get(state)
        if at is None:
            route.append((state, move))
            place[state] = len(route)
            continue
        for gone, _ in route[at:]:
            del place[gone]
        del route[at:]
    return route


@dataclass
class AgentTaskConfig(TaskConfig):
    """Horizon and format rules shared by the multi-turn tasks (RAGEN's ``agent_proxy`` / ``es_manager`` keys)."""

    max_turns: int = 5
    """Turns per episode (RAGEN ``agent_proxy.max_turn`` = 5)."""
    max_actions_per_turn: int = 5
    """The most actions a valid reply names (RAGEN Sept-2025: 5; RAGEN-2: 2); a reply naming more is invalid
    (RAGEN ignores the extra ones; sesa_cli.tasks.layouts says why sesa does not)."""
    max_actions: int = 10
    """Environment actions per episode; when spent the episode ends unsolved (RAGEN ``max_actions_per_traj`` = 10)."""
    sketch_max_actions: int = 0
    """Longest plan a sketch (SESA stage I) names, in actions; 0 = max_actions (a whole episode's plan). Set to
    max_actions_per_turn, a sketch is the first turn, which stage II follows (see ``sketch_followed``)."""
    warm_start_plan_lines: float = 0.0
    """Fraction of the tiny model's warm-start lines that hold a plan and only the turns that carry it out
    (``solve_prompt`` + the plan's actions, ``max_actions_per_turn`` per response, no random tail): short lines that
    are mostly the copy stage II needs. Without them the copy is a couple of tokens in a hundred-token episode and the
    base ignores its plan. FrozenLake tiny, 600 warm-start steps, ``sesa eval sampler=sequential
    sampler.stage1=sketch seed=0``: chain/followed 0.17 at 0 (about chance); at 0.3 the base still puts
    ~0.25 on every first move whatever the plan; at 0.7 followed 0.44 (sketches valid 0.97, cut 0.02, 5.8 distinct
    per chain of 8): the base has learned which letters the plan holds, not yet their order. 0 = none (the default
    everywhere: no recipe sets it until a setting is measured to be followed)."""
    format_penalty: float = -0.1
    """The reward of an invalid reply (unparseable, empty, an unknown action, too many actions, extra text), which
    also ends the episode (RAGEN: -0.1, and RAGEN plays on)."""
    solution_key: str = "route"
    """What makes two episodes "the same solution" (``Score.key``: distinct@k, the exact policy metrics, the bonuses
    and the loss rules that count solutions, a sketch's identity in chain health). ``route``: the states the episode
    went through with every loop erased (a move that changes nothing, and a detour that comes back to a state it
    left, add nothing: two routes differ only where they visit different states); ``states``: the states with
    consecutive repeats removed (a move that changes nothing adds nothing, a detour that returns is a new solution);
    ``actions``: the executed actions as typed (a move into a wall is a new solution: the key before 2026-12-07,
    which a policy rewarded for new keys learned to game; docs/metrics.md, "What a solution is")."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("max_turns", "max_actions_per_turn", "max_actions"):
            if getattr(self, key) < 1:
                raise ConfigError(f"task.{key} must be >= 1")
        if not 0 <= self.sketch_max_actions <= self.max_actions:
            raise ConfigError(
                f"task.sketch_max_actions={self.sketch_max_actions} must be in [0, task.max_actions={self.max_actions}]"
            )
        if not 0 <= self.warm_start_plan_lines < 1:
            raise ConfigError(f"task.warm_start_plan_lines={self.warm_start_plan_lines} must be in [0, 1)")
        if self.format_penalty > 0:
            raise ConfigError(f"task.format_penalty={self.format_penalty} must be <= 0 (it is a penalty)")
        if self.solution_key not in SOLUTION_KEYS:
            raise ConfigError(f"task.solution_key={self.solution_key!r}; valid: {', '.join(SOLUTION_KEYS)}")


def derive_seed(*parts: Any) -> int:
    """A stable non-negative 32-bit seed from ``parts`` (blake2b of their repr; Python's hash() is salted)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def split_seed(task: str, split: str, seed: int, index: int, attempt: int = 0) -> int:
    """Instance seed: train seeds are even and validation seeds odd, so the two splits never share one."""
    check_split(split)
    return (derive_seed(task, split, seed, index, attempt) & 0x7FFFFFFF) * 2 + (split == "val")


class Env(ABC):
    """One episode of one instance; deterministic given the instance. ``step`` accepts any string."""

    def __init__(self, task: AgentTask, inst: Any) -> None:
        self.task = task
        self.inst = inst
        self.cfg: AgentTaskConfig = task.cfg
        self.turns = 0
        self.actions_used = 0
        self.done = False
        self.success = False
        self.history: list[str] = []
        """Every executed action, in order (``Score.actions``)."""
        self.start: Hashable = None
        """The state the episode started in (recorded by its first action)."""
        self.path: list[tuple[Hashable, str]] = []
        """Every change of state: (the state after it, :meth:`move_name` of the action that made it), in order; an
        action that left the state as it was adds nothing (the episode's solution key, :meth:`solution_key`)."""
        self.total_reward = 0.0
        """Sum of the turn rewards so far (format penalties included)."""
        self.invalid = False
        """A reply was invalid (the episode then ended): the episode has no solution key."""

    # ---------------------------------------------------------------- the task-specific part
    @abstractmethod
    def apply(self, action: str) -> tuple[float, bool, bool]:
        """Execute one canonical action: (reward, episode over, solved)."""

    @abstractmethod
    def render(self) -> str:
        """The current state as text in the task's style."""

    @abstractmethod
    def state(self) -> Hashable:
        """Everything that decides what the next action does (a grid world's player and boxes, a board): equal
        states are the same situation, whatever led to it."""

    def move_name(self, action: str, before: Hashable, after: Hashable) -> str:
        """How a solution key writes the change of state ``before`` -> ``after`` that ``action`` made: by default
        the action (a deterministic environment's action and state decide the next state, so the moves of a key
        decide its states). A slippery world names the move that happened instead of the one intended."""
        return action

    # ---------------------------------------------------------------- the shared part
    @property
    def actions_left(self) -> int:
        return self.cfg.max_actions - self.actions_used

    def step(self, response: str) -> Turn:
        """Play one reply (untrusted, never raises): a valid one runs its actions within the episode budget; an
        invalid one runs none, pays ``format_penalty`` and ends the episode unsolved (sesa_cli.tasks.layouts)."""
        if self.done:
            return Turn("", 0.0, True, self.success, (), True)
        self.turns += 1
        actions = self.task.reply_actions(response)
        if actions is None:
            self.done, self.invalid = True, True
            self.total_reward += self.cfg.format_penalty
            return Turn("", self.cfg.format_penalty, True, False, (), False)
        reward = 0.0
        executed: list[str] = []
        for action in actions[: self.actions_left]:
            executed.append(action)
            reward += self.execute(action)
            if self.done:
                break
        self.actions_used += len(executed)
        if self.actions_left <= 0 or self.turns >= self.cfg.max_turns:
            self.done = True  # truncated: out of actions or turns, not solved
        feedback = "" if self.done else self.task.feedback(self, reward)
        self.total_reward += reward
        return Turn(feedback, reward, self.done, self.success, tuple(executed), True)

    def execute(self, action: str) -> float:
        """Run one canonical action (the episode's budget is the caller's): its reward; records it in
        :attr:`history` and, when it changed the state, in :attr:`path`; ends the episode when the action does."""
        before = self.state()
        if not self.history:
            self.start = before
        reward, over, solved = self.apply(action)
        self.history.append(action)
        after = self.state()
        if after != before:
            self.path.append((after, self.move_name(action, before, after)))
        if over:
            self.done, self.success = True, solved
        return reward

    def solution_key(self) -> str:
        """What the episode did, as ``task.solution_key`` reads it (:class:`AgentTaskConfig`): the moves of its
        loop-erased route (``route``), of every change of state (``states``), or every executed action
        (``actions``), joined by ","; :data:`NO_MOVE` for an episode whose state never changed."""
        how = self.cfg.solution_key
        if how == "actions":
            moves = list(self.history)
        else:
            steps = erase_loops(self.path, self.start) if how == "route" else self.path
            moves = [move for _, move in steps]
        return ",".join(moves) or NO_MOVE

    def score(self) -> Score:
        """The episode's verdict: reward = sum of turn rewards (RAGEN's ``use_turn_scores=False``, credited to the
        whole trajectory), success = solved, key = :meth:`solution_key`, None when a reply was invalid
        (``eval/valid``: the share of episodes of valid replies only, as ``policy/valid_mass``), actions = the
        executed actions, penalty = the format penalty an invalid reply paid."""
        key = None if self.invalid else self.solution_key()
        penalty = self.cfg.format_penalty if self.invalid else 0.0
        return Score(self.total_reward, self.success, key, actions=tuple(self.history), penalty=penalty)


class AgentTask(RagenTask):
    """A multi-turn task: ``make_env`` plays episodes; ``transcript`` replays a list of responses."""

    multi_turn: ClassVar[bool] = True
    cfg: AgentTaskConfig

    action_names: ClassVar[tuple[str, ...]] = ()
    """The actions the chat header lists (RAGEN's action names; grid tasks: sesa_cli.tasks.grid); () for none."""
    chat_vocab: ClassVar[tuple[tuple[str, str], ...]] = ()
    """RAGEN's ``grid_vocab``: (symbol, meaning) pairs; () for none."""
    chat_max_words: ClassVar[int] = 100
    """RAGEN's ``max_tokens`` quoted in the turn text ("Max response length: N words (tokens).")."""
    sketch_list_max: ClassVar[int] = 8
    """Longest list of distinct sketches in the warm-start corpus (>= the usual group size)."""
    warm_pool: ClassVar[int] = 2000
    """The warm-start corpus draws its instances from train indices [0, warm_pool)."""

    compact_sep: ClassVar[str] = ""
    """What separates the words of a compact reply's actions (grid tasks: nothing, ``DR``; Sudoku: a space)."""

    def __init__(self, cfg: TaskConfig, seed: int = 0) -> None:
        super().__init__(cfg, seed)
        self._cache: dict[tuple[str, int], Any] = {}
        self.layout: Layout = LAYOUTS[self.cfg.style](self)
        """The style's rendering and its valid-reply rule (sesa_cli.tasks.layouts)."""

    # ---------------------------------------------------------------- the task-specific part
    @abstractmethod
    def make_env(self, inst: Any) -> Env:
        """A fresh episode of ``inst``."""

    @abstractmethod
    def generate(self, split: str, index: int) -> Any:
        """Build instance ``index`` of ``split`` (uncached; see ``instance``)."""

    @abstractmethod
    def random_actions(self, env: Env, rng: random.Random, k: int) -> list[str]:
        """``k`` well-formed (not necessarily good) canonical actions for the warm start."""

    @abstractmethod
    def compact_tokens(self, body: str) -> list[str]:
        """Split a compact answer into raw action tokens (for ``compact_action``). Never raises."""

    @abstractmethod
    def compact_action(self, token: str) -> str | None:
        """The canonical action a compact token names, or None. Never raises."""

    @abstractmethod
    def compact_word(self, action: str) -> str:
        """How the compact style writes a canonical action (its canonical rendering)."""

    @abstractmethod
    def chat_action(self, token: str) -> str | None:
        """The canonical action a chat item (the text between ``||``, stripped) names, or None. Never raises."""

    @abstractmethod
    def chat_word(self, action: str) -> str:
        """How the chat style writes a canonical action."""

    @abstractmethod
    def longest_plan(self) -> list[str]:
        """A plan as long as the warm start's longest (the compact sketch budget)."""

    def listable_actions(self) -> Sequence[str] | None:
        """The canonical actions whose replies the exact walker may list, when the environment is deterministic
        (an episode is a function of its replies); None otherwise (the default)."""
        return None

    def turn_responses(self) -> list[str] | None:
        """Every valid reply of one turn (stop included, each once) when the environment is deterministic and the
        list is short enough to walk turn by turn: the exact plain-prompt policy over whole episodes
        (sesa_cli.rollout.episode_tree, ``policy/*`` metrics); None otherwise (the layout's list,
        :meth:`sesa_cli.tasks.layouts.Layout.turn_responses`)."""
        return self.layout.turn_responses()

    def canonical(self, token: str) -> str | None:
        """The canonical action a raw answer token names in this task's style, or None. Never raises."""
        return self.layout.canonical(token)

    def encode(self, actions: Sequence[str]) -> str:
        """The answer text naming canonical ``actions`` in this task's style (chat: separated by `` || ``)."""
        return self.layout.encode(actions)

    @property
    def sketch_max_actions(self) -> int:
        """Longest plan a sketch names: ``task.sketch_max_actions``, 0 meaning ``task.max_actions``."""
        return self.cfg.sketch_max_actions or self.cfg.max_actions

    def random_plan(self, inst: Any, rng: random.Random) -> list[str]:
        """A random plan (sketch) of 1..sketch_max_actions actions, played blind from the start."""
        env = self.make_env(inst)
        return self.random_actions(env, rng, rng.randint(1, self.sketch_max_actions))

    def chat_header(self) -> str:
        """RAGEN's system text: helper line, instruction, symbol legend, action list and separator rule."""
        text = super().chat_header()
        if self.chat_vocab:
            legend = ", ".join(f"{k}: {v}" for k, v in self.chat_vocab)
            text += "\nThe meaning of each symbol in the state is:\n" + legend
        if self.action_names:
            text += "\nYour available actions are:\n" + ", ".join(self.action_names)
        # RAGEN says "up to {max_actions_per_traj} actions" and silently drops the ones beyond max_actions_per_turn;
        # here a reply naming more is invalid (sesa_cli.tasks.layouts), so the line names the per-turn limit too.
        text += (
            f"\nYou can make up to {self.cfg.max_actions_per_turn} actions per turn ({self.cfg.max_actions} in all), "
            'separated by the action separator " || "\n'
        )
        return text

    # ---------------------------------------------------------------- instances
    def instance(self, split: str, index: int) -> Any:
        key = (split, index)
        if key not in self._cache:
            if len(self._cache) >= 4096:
                self._cache.clear()
            self._cache[key] = self.generate(split, index)
        return self._cache[key]

    def warm_start_key(self) -> dict[str, Any]:
        fields = {k: v for k, v in asdict(self.cfg).items() if k != "max_new_tokens"}
        if not self.cfg.sketch_max_actions:
            del fields["sketch_max_actions"]  # the default: the bases cached before the field existed stay valid
        if not self.cfg.warm_start_plan_lines:
            del fields["warm_start_plan_lines"]  # likewise
        del fields["solution_key"]  # how episodes are counted, not what the corpus holds
        # The corpus is played on seed 0's training instances whatever the run's seed, so every seed of a sweep
        # starts from the same cached base (as runs of a pretrained model do).
        # v5 for the chat style: its header names the per-turn action limit (docs/tasks.md, "What a valid reply is"); compact corpora are unchanged
        return {"name": self.name, "cfg": fields, "v": 5 if self.layout.name == "chat" else 4}

    # ---------------------------------------------------------------- layouts (sesa_cli.tasks.layouts)
    def prompt(self, inst: Any) -> str:
        return self.layout.prompt(self.make_env(inst).render())

    def feedback(self, env: Env, shown_reward: float) -> str:
        """Text after a turn that did not end the episode: the next state (chat: RAGEN's Reward line first)."""
        return self.layout.feedback(env.render(), env.turns + 1, env.actions_left, shown_reward)

    def reply_actions(self, response: object) -> list[str] | None:
        """The canonical actions of a valid reply, None for an invalid one (the one rule: sesa_cli.tasks.layouts).
        Never raises."""
        return self.layout.reply(response)

    def response(self, actions: Sequence[str]) -> str:
        """The valid reply naming ``actions`` (what the warm start teaches)."""
        return self.layout.response(actions)

    # ---------------------------------------------------------------- playing and scoring
    def play(self, inst: Any, responses: Sequence[str]) -> tuple[str, Score]:
        """Play ``responses`` turn by turn from a fresh env: the text after the first context, and the score."""
        env = self.make_env(inst)
        parts: list[str] = []
        for text in responses:
            turn = env.step(text)
            parts += [text, turn.feedback]
            if turn.done:
                break
        return "".join(parts), env.score()

    def transcript(self, inst: Any, responses: Sequence[str]) -> tuple[str, Score]:
        """The runner's exact text ``prompt + sum_t(response_t + feedback_t)`` (stopping when done) and its Score.

        Score: reward = sum of turn rewards, success = solved, key = what the episode did (``Env.solution_key``).
        """
        text, score = self.play(inst, responses)
        return self.prompt(inst) + text, score

    def score(self, inst: Any, completion: str) -> Score:
        """Open loop: ``completion`` is the first-turn response of a fresh episode. Never raises."""
        return self.play(inst, [completion])[1]

    # ---------------------------------------------------------------- sketches (SESA stage I): plans
    def sketch_head(self, inst: Any) -> str:
        return self.layout.sketch_head(self.make_env(inst).render())

    def sketch(self, actions: Sequence[str]) -> str:
        """A valid sketch naming ``actions``."""
        return self.layout.sketch(actions)

    def plan_actions(self, sketch: str) -> list[str] | None:
        """The canonical actions of a valid plan (1..sketch_max_actions known actions, the layout's rule), else
        None."""
        return self.layout.plan(sketch, self.sketch_max_actions)

    def sketch_key(self, inst: Any, sketch: str) -> str | None:
        """What the plan does played blind from the start (its actions until the episode would end or its budget is
        spent), keyed as an episode is (``task.solution_key``): plans that differ only by moves that change nothing
        are one sketch."""
        actions = self.plan_actions(sketch)
        if actions is None:
            return None
        env = self.make_env(inst)
        for action in actions[: self.cfg.max_actions]:
            env.execute(action)
            if env.done:
                break
        return env.solution_key()

    def sketch_response(self, inst: Any, sketch: str) -> str | None:
        """The first turn that plays the plan (its first ``max_actions_per_turn`` actions)."""
        plan = self.plan_actions(sketch)
        return None if plan is None else self.response(plan[: self.cfg.max_actions_per_turn])

    def follows_sketch(self, inst: Any, sketch: str, completion: str, score: Score) -> bool:
        """The episode executed the plan: its first actions are the plan's (all of them, or as many as were played
        before the episode ended)."""
        plan = self.plan_actions(sketch)
        played = list(score.actions)
        n = min(len(plan or []), len(played))
        return plan is not None and n > 0 and played[:n] == plan[:n]

    def sketch_max_tokens(self) -> int:
        return len(self.sketch(self.longest_plan())) if self.layout.name == "compact" else self.cfg.max_new_tokens

    def solve_prompt(self, inst: Any, sketch: str) -> str:
        """The first-turn context with the plan in it; the episode then unrolls as usual."""
        return self.layout.solve_prompt(self.make_env(inst).render(), self.sketch_content(sketch))

    def solve_prompt_plan(self, plan: str) -> str:
        """How the compact ``solve_prompt`` quotes a plan: ``!<plan>:``, the turn's ``:`` right after it, so that the
        first response starts after the plan (with the word vocabulary, a plan of one turn and its marks are one
        token: ``GridTask.vocabulary``)."""
        return f"!{plan}:"

    # ---------------------------------------------------------------- warm start
    def _turn_size(self, rng: random.Random) -> int:
        # Mostly short turns (1-3 actions), as an unskilled player would write them.
        k = rng.choices((1, 2, 3, 4, 5), weights=(35, 30, 20, 10, 5))[0]
        return min(k, self.cfg.max_actions_per_turn)

    def _random_responses(self, inst: Any, rng: random.Random, plan: Sequence[str] = ()) -> list[str]:
        """Responses of an unskilled episode: first the ``plan``, ``max_actions_per_turn`` actions a turn (so a plan
        of one turn is always the first response, which the base then learns to copy), then random actions in
        short turns."""
        env = self.make_env(inst)
        todo = list(plan)
        out: list[str] = []
        while not env.done:
            if todo:
                m = self.cfg.max_actions_per_turn
                acts, todo = todo[:m], todo[m:]
            else:
                acts = self.random_actions(env, rng, self._turn_size(rng))
            out.append(self.response(acts))
            env.step(out[-1])
        return out

    def _plan_line(self, inst: Any, rng: random.Random) -> str:
        """``solve_prompt(inst, plan)`` + the responses that play a random plan (``max_actions_per_turn`` actions
        each) with the feedback between them, ending after the last response (``task.warm_start_plan_lines``)."""
        plan = self.random_plan(inst, rng)
        m = self.cfg.max_actions_per_turn
        env = self.make_env(inst)
        text = self.solve_prompt(inst, self.sketch(plan))
        for start in range(0, len(plan), m):
            response = self.response(plan[start : start + m])
            turn = env.step(response)
            text += response
            if turn.done or start + m >= len(plan):
                break
            text += turn.feedback
        return text

    def _distinct_plans(self, inst: Any, rng: random.Random, k: int) -> list[list[str]]:
        return draw_distinct(lambda: self.random_plan(inst, rng), self.encode, k, tries=20)

    def warm_start_corpus(self, rng: random.Random, n: int) -> list[str]:
        """Three kinds of lines, all unskilled (random but well-formed play) on training instances:

        * 40% full episodes ``transcript(inst, responses)`` with random actions, mostly 1-3 per turn;
        * 20% lists of 1..sketch_list_max distinct random plans ``sketch_head + s1 + between + s2 ...``;
        * 40% sketch -> solution: ``solve_prompt(inst, s)`` + the episode that plays the plan, ``max_actions_per_turn``
          actions a turn, then random moves (as the path task's warm start: with a quarter of the lines, stage II
          did not learn to copy its plan; with the plan played in turns of random size, the first response after a
          plan of one turn was its first action as often as the plan, and the base copied neither);

        with ``task.warm_start_plan_lines`` of the lines first replaced by plan -> its turns only (``_plan_line``).
        """
        if self.seed != 0:
            return type(self)(self.cfg, 0).warm_start_corpus(rng, n)
        out: list[str] = []
        for _ in range(n):
            inst = self.instance("train", rng.randrange(self.warm_pool))
            # (no extra draw when the field is 0: the default corpus, and its cached bases, stay as they were)
            if self.cfg.warm_start_plan_lines and rng.random() < self.cfg.warm_start_plan_lines:
                out.append(self._plan_line(inst, rng))
                continue
            u = rng.random()
            if u < 0.4:
                out.append(self.transcript(inst, self._random_responses(inst, rng))[0])
            elif u < 0.6:
                plans = self._distinct_plans(inst, rng, rng.randint(1, self.sketch_list_max))
                out.append(self.sketch_head(inst) + self.between.join(self.sketch(p) for p in plans))
            else:
                plan = self.random_plan(inst, rng)
                text, _ = self.play(inst, self._random_responses(inst, rng, plan))
                out.append(self.solve_prompt(inst, self.sketch(plan)) + text)
        return out
