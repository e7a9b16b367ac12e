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

Per-turn semantics follow RAGEN's ``es_manager``: the response's actions are truncated to
``max_actions_per_turn``; unknown actions are dropped; any drop, or no action at all, adds ``format_penalty`` once
to the turn; the remaining actions run one by one until the episode ends or the budget is spent. The episode reward
is the sum of the turn rewards (RAGEN's ``use_turn_scores=False``).

Two renderings (``task.style``):

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
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from sesa_cli.config import ConfigError, TaskConfig
from sesa_cli.tasks import ragen
from sesa_cli.tasks.base import Score, Turn, check_split, draw_distinct
from sesa_cli.tasks.ragen import RagenTask

COMPACT_LAYOUT = "\n:?!|"
"""The characters of the compact layout: line breaks, ``:`` (a turn follows), ``?`` (plans follow), ``!`` (the
episode that carries out this plan follows), the stop."""


@dataclass
class AgentTaskConfig(TaskConfig):
    """Horizon and format rules shared by the multi-turn tasks (RAGEN's ``agent_proxy`` / ``es_manager`` keys)."""

    max_turns: int = 5
    """Turns per episode (RAGEN ``agent_proxy.max_turn`` = 5)."""
    max_actions_per_turn: int = 5
    """Actions read from one response; extra ones are ignored (RAGEN Sept-2025: 5; RAGEN-2: 2)."""
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
    """Added once to a turn whose answer is unparseable, empty or names an unknown action (RAGEN: -0.1)."""

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
        """Every executed action, in order (the episode's solution key)."""
        self.total_reward = 0.0
        """Sum of the turn rewards so far (format penalties included)."""

    # ---------------------------------------------------------------- the task-specific part
    @abstractmethod
    def apply(self, action: str) -> tuple[float, bool, bool]:
        """Execute one canonical action: (reward, episode over, solved)."""

    @abstractmethod
    def render(self) -> str:
        """The current state as text in the task's style."""

    # ---------------------------------------------------------------- the shared part
    @property
    def actions_left(self) -> int:
        return self.cfg.max_actions - self.actions_used

    def step(self, response: str) -> Turn:
        """Parse ``response`` (untrusted, never raises) and play its actions within the budgets."""
        if self.done:
            return Turn("", 0.0, True, self.success, (), True)
        self.turns += 1
        tokens = self.task.parse_response(response)
        parsed = tokens is not None
        tokens = (tokens or [])[: self.cfg.max_actions_per_turn]
        known = [a for a in (self.task.canonical(t) for t in tokens) if a is not None]
        valid = parsed and bool(known) and len(known) == len(tokens)
        env_reward = 0.0
        executed: list[str] = []
        for action in known[: self.actions_left]:
            reward, over, solved = self.apply(action)
            executed.append(action)
            env_reward += reward
            if over:
                self.done, self.success = True, solved
                break
        self.actions_used += len(executed)
        self.history.extend(executed)
        if self.actions_left <= 0 or self.turns >= self.cfg.max_turns:
            self.done = True  # truncated: out of actions or turns, not solved
        reward = env_reward + (0.0 if valid else self.cfg.format_penalty)
        # RAGEN shows the penalty in the Reward line only when no action could be executed.
        shown = env_reward + (self.cfg.format_penalty if not known else 0.0)
        feedback = "" if self.done else self.task.feedback(self, shown)
        self.total_reward += reward
        return Turn(feedback, reward, self.done, self.success, tuple(executed), valid)

    def score(self) -> Score:
        """The episode's verdict: reward = sum of turn rewards (RAGEN's ``use_turn_scores=False``, credited to the
        whole trajectory), success = solved, key = the executed actions joined by ","."""
        return Score(reward=self.total_reward, success=self.success, key=",".join(self.history) or None)


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

    def __init__(self, cfg: TaskConfig, seed: int = 0) -> None:
        super().__init__(cfg, seed)
        self._cache: dict[tuple[str, int], Any] = {}

    # ---------------------------------------------------------------- the task-specific part
    @abstractmethod
    def make_env(self, inst: Any) -> Env:
        """A fresh episode of ``inst``."""

    @abstractmethod
    def generate(self, split: str, index: int) -> Any:
        """Build instance ``index`` of ``split`` (uncached; see ``instance``)."""

    @abstractmethod
    def canonical(self, token: str) -> str | None:
        """The canonical action a raw answer token names, or None if it names none. Never raises."""

    @abstractmethod
    def random_actions(self, env: Env, rng: random.Random, k: int) -> list[str]:
        """``k`` well-formed (not necessarily good) canonical actions for the warm start."""

    @abstractmethod
    def compact_tokens(self, body: str) -> list[str]:
        """Split a compact answer into raw action tokens (for ``canonical``). Never raises."""

    @abstractmethod
    def encode(self, actions: Sequence[str]) -> str:
        """The answer text naming canonical ``actions`` (chat: separated by `` || ``)."""

    @abstractmethod
    def longest_plan(self) -> list[str]:
        """A plan as long as the warm start's longest (the compact sketch budget)."""

    def turn_responses(self) -> list[str] | None:
        """Every well-formed response of one turn (stop included, each once) when the environment is deterministic
        and the list is short enough to walk turn by turn: the exact plain-prompt policy over whole episodes
        (sesa_cli.rollout.episode_tree, ``policy/*`` metrics). None otherwise (the default)."""
        return None

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
        text += f'\nYou can make up to {self.cfg.max_actions} actions, separated by the action separator " || "\n'
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
        # The corpus is played on seed 0's training instances whatever the run's seed, so every seed of a sweep
        # starts from the same cached base (as runs of a pretrained model do).
        return {"name": self.name, "cfg": fields, "v": 4}

    # ---------------------------------------------------------------- layouts
    def prompt(self, inst: Any) -> str:
        state = self.make_env(inst).render()
        if self.chat:
            return self.chat_header() + ragen.turn_text(1, state, self.cfg.max_actions, self.chat_max_words)
        return f"{state}\n:"

    def feedback(self, env: Env, shown_reward: float) -> str:
        """Text after a turn that did not end the episode: the next state (chat: RAGEN's Reward line first)."""
        state = env.render()
        if self.chat:
            reward_line = f"\nReward:\n{round(shown_reward, 6)}\n"
            return reward_line + ragen.turn_text(env.turns + 1, state, env.actions_left, self.chat_max_words)
        return f"\n{state}\n:"

    def parse_response(self, response: str) -> list[str] | None:
        """Raw action tokens of a response, or None if it does not parse (no actions run). Never raises."""
        if not isinstance(response, str):
            return None
        if self.chat:
            return ragen.answer_actions(response)
        if self.stop not in response:
            return None  # cut at max_new_tokens before the stop: like RAGEN's missing </answer>
        return self.compact_tokens(response.split(self.stop, 1)[0])

    def response(self, actions: Sequence[str]) -> str:
        """A well-formed response naming ``actions`` (what the warm start teaches)."""
        if self.chat:
            return f"I will try {', '.join(actions)}.</think>" + ragen.answer_block(self.encode(actions))
        return self.encode(actions) + self.stop

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

        Score: reward = sum of turn rewards, success = solved, key = executed actions joined by ",".
        """
        text, score = self.play(inst, responses)
        return self.prompt(inst) + text, score

    def score(self, inst: Any, completion: str) -> Score:
        """Open loop: ``completion`` is the first-turn response of a fresh episode. Never raises."""
        return self.play(inst, [completion])[1]

    # ---------------------------------------------------------------- sketches (SESA stage I): plans
    def sketch_head(self, inst: Any) -> str:
        state = self.make_env(inst).render()
        if self.chat:
            request = (
                "Propose a plan: the sequence of actions you would take, different from every plan listed so far."
            )
            return ragen.sketch_request(self.chat_header(), state, request)
        return f"{state}\n?"

    def sketch(self, actions: Sequence[str]) -> str:
        """A well-formed sketch naming ``actions``."""
        if self.chat:
            return ragen.answer_block(self.encode(actions))
        return self.encode(actions) + self.stop

    def plan_actions(self, sketch: str) -> list[str] | None:
        """The canonical actions of a sketch's plan: None unless it names 1..sketch_max_actions actions, all known."""
        if not isinstance(sketch, str):
            return None
        plan = self.sketch_content(sketch[:10_000])
        tokens = ragen.split_actions(plan) if self.chat else self.compact_tokens(plan)
        actions = [self.canonical(t) for t in tokens]
        if not 1 <= len(actions) <= self.sketch_max_actions or any(a is None for a in actions):
            return None
        return [a for a in actions if a is not None]

    def sketch_key(self, inst: Any, sketch: str) -> str | None:
        actions = self.plan_actions(sketch)
        return None if actions is None else ",".join(actions)

    def sketch_response(self, inst: Any, sketch: str) -> str | None:
        """The first turn that plays the plan (its first ``max_actions_per_turn`` actions)."""
        plan = self.plan_actions(sketch)
        return None if plan is None else self.response(plan[: self.cfg.max_actions_per_turn])

    def follows_sketch(self, inst: Any, sketch: str, completion: str, score: Score) -> bool:
        """The episode executed the plan: its first actions are the plan's (all of them, or as many as were played
        before the episode ended)."""
        plan = self.plan_actions(sketch)
        played = score.key.split(",") if score.key else []
        n = min(len(plan or []), len(played))
        return plan is not None and n > 0 and played[:n] == plan[:n]

    def sketch_max_tokens(self) -> int:
        return self.cfg.max_new_tokens if self.chat else len(self.sketch(self.longest_plan()))

    def solve_prompt(self, inst: Any, sketch: str) -> str:
        """The first-turn context with the plan in it; the episode then unrolls as usual."""
        plan = self.sketch_content(sketch)
        state = self.make_env(inst).render()
        if self.chat:
            turn = ragen.turn_text(1, state, self.cfg.max_actions, self.chat_max_words, plan=f"Plan: {plan}\n")
            return self.chat_header() + turn
        return f"{state}\n{self.solve_prompt_plan(plan)}"

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
