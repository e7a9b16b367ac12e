"""The Task protocol: instances, prompts, tolerant parsing and scoring, sketches, and the warm-start corpus.

Model output is untrusted input: ``score`` and every parser must accept *any* string, never raise, and never
evaluate code.

Text layout (what the rollout engine relies on). A group for prompt x is built from these strings:

* parallel:            ``prompt(x)`` -> y_k, each y_k ends with ``stop`` (or is cut at max_new_tokens)
* sequential/solution: ``prompt(x) + y_1 + between + y_2 + between + ... + y_{k-1} + between`` -> y_k.
  The context of sample k is the context of sample k-1 plus its output, so the engine continues one KV cache.
* sequential/sketch:   ``sketch_head(x) + s_1 + between + ... + s_{k-1} + between`` -> s_k (stage I), then
  ``solve_prompt(x, s_k)`` -> y_k, in parallel (stage II).

A multi-turn task (``multi_turn``) answers with whole episodes instead: the rollout runner plays ``make_env(x)``
turn by turn (sesa_cli.rollout.samplers.run_episodes), and an answer is the episode's trajectory.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

from sesa_cli.config import ConfigError, TaskConfig

SPLITS = ("train", "val")
"""The instance splits: training instances and validation instances (never the same ones)."""


def check_split(split: str) -> None:
    """A ValueError unless ``split`` is one of ``SPLITS`` (a caller's mistake: users never name splits)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use 'train' or 'val'")


@dataclass(frozen=True)
class Score:
    """The verdict on one completion."""

    reward: float
    """Scalar reward used for advantages."""
    success: bool
    """Whether the completion solves the instance (success rate, pass@k)."""
    key: str | None
    """Solution key: equal keys mean "the same solution" (distinct@k, the exact policy metrics, every bonus that
    counts solutions). None if unparseable / invalid. A multi-turn task keys an episode by what it did, the states
    it went through (``task.solution_key``, sesa_cli.tasks.agent), not by what its replies typed."""
    grader_timeout: bool = False
    """The grader gave up on this completion within its work budget (math-verify, sesa_cli/tasks/math.py): it is
    scored as wrong, and counted (``rollout/grader_timeouts``, ``eval/grader_timeouts``) rather than hidden."""
    actions: tuple[str, ...] = ()
    """Multi-turn tasks: the actions the episode executed, in order, whether or not they changed its state (what a
    stage-II episode is checked against its sketch with); () elsewhere."""
    penalty: float = 0.0
    """The part of ``reward`` that penalises the reply's form (the task's ``format_penalty`` when the reply is
    invalid or unreadable, else 0): a transform over a group's rewards that would hide it (a subset's best member,
    sesa_cli.advantages.passk) keeps it per sample."""


@dataclass(frozen=True)
class Turn:
    """What one ``Episode.step`` did."""

    feedback: str
    """Text appended to the context after the response (reward line, next state); "" when done."""
    reward: float
    """This turn's reward, format penalty included."""
    done: bool
    """The episode is over (solved, failed, out of actions or out of turns)."""
    success: bool
    """The episode is solved (meaningful when done)."""
    actions: tuple[str, ...]
    """Canonical names of the actions executed this turn."""
    valid: bool
    """The reply was valid (agent tasks: sesa_cli.tasks.layouts's rule); an invalid one pays the format penalty and
    ends the episode."""


class Episode(Protocol):
    """One episode of one instance of a multi-turn task, as the rollout runner plays it (sesa_cli.tasks.agent.Env)."""

    done: bool
    """The episode is over: the runner samples no more responses for it."""

    def step(self, response: str) -> Turn:
        """Play one response (untrusted text; never raises)."""
        ...

    def score(self) -> Score:
        """The episode's verdict so far."""
        ...


class Task(ABC):
    """One task family. Instances are deterministic functions of (seed, split, index)."""

    name: ClassVar[str]
    schema: ClassVar[type[TaskConfig]] = TaskConfig
    """The config schema ``register_task`` names: an instance is built from a config of this type only."""
    stop: str = "|"
    """The string that ends one answer (the engine stops a row on it); may depend on the style."""
    between: str = ""
    """Text the engine appends after an answer before drawing the next one in sequential sampling."""
    multi_turn: ClassVar[bool] = False
    """Whether an answer is a whole episode played on ``make_env`` (agent tasks) rather than one scored response."""
    eval_instances: ClassVar[int] = 16
    """Validation instances of the evaluation protocol when ``eval.instances`` is null."""

    def __init__(self, cfg: TaskConfig, seed: int = 0) -> None:
        if not isinstance(cfg, self.schema):
            raise ConfigError(f"task={self.name} needs a {self.schema.__name__}")
        self.cfg = cfg
        self.seed = seed

    @property
    def chat(self) -> bool:
        """Chat style (instruction-tuned models) rather than compact (the character-level tiny model)."""
        return self.cfg.style == "chat"

    # ---------------------------------------------------------------- tokenizer
    @abstractmethod
    def alphabet(self) -> str:
        """Every character compact-style text of this task can contain (the tiny model's vocabulary)."""

    def vocabulary(self, corpus: Sequence[str]) -> list[str]:
        """The tiny model's tokens with ``model.tokenizer=words``, given its warm-start ``corpus``: the words of the
        task's compact language (one token each) and the characters of the rest. Text is cut greedily into the
        longest token that matches (sesa_cli.models.tiny.build_tokenizer); every corpus line must be spelled without
        <unk>. A text may have several spellings (an action pair as one token or as two): the model can sample
        any of them, so the exact ``policy/*`` metrics sum over all (``Policy.spellings``). Default: the characters
        of ``alphabet``."""
        return sorted(set(self.alphabet()))

    def warm_start_key(self) -> dict[str, Any]:
        """What the warm-start corpus depends on (cache key). Must exclude anything secret, e.g. targets."""
        return {"name": self.name}

    # ---------------------------------------------------------------- instances
    @abstractmethod
    def instance(self, split: str, index: int) -> Any:
        """Instance ``index`` of ``split`` ("train" or "val"); the two splits never share a seed."""

    # ---------------------------------------------------------------- prompts and scoring
    @abstractmethod
    def prompt(self, inst: Any) -> str:
        """The plain prompt x (what evaluation and loss_context=prompt use)."""

    @abstractmethod
    def score(self, inst: Any, completion: str) -> Score:
        """Score any string; never raises."""

    def target_keys(self, inst: Any) -> frozenset[str] | None:
        """All correct solution keys when the task knows them (coverage@k); None otherwise."""
        return None

    def solution_space(self, inst: Any) -> list[str] | None:
        """Every valid answer to ``inst`` exactly as the policy writes it (stop included), each once, when the set is
        small enough to score whole (exact ``policy/*`` metrics, sesa_cli.exact.ExactPolicy); None otherwise."""
        return None

    def make_env(self, inst: Any) -> Episode:
        """A fresh episode of ``inst`` (multi-turn tasks; see ``multi_turn``)."""
        raise NotImplementedError(f"task {self.name!r} answers in one response; it has no episodes")

    # ---------------------------------------------------------------- sketches (SESA stage I)
    def sketch_head(self, inst: Any) -> str:
        """Context for the first sketch; later sketches continue it (see the module docstring)."""
        raise ConfigError(f"task {self.name!r} defines no sketch; use sampler.stage1=solution")

    def solve_prompt(self, inst: Any, sketch: str) -> str:
        """Context that expands ``sketch`` into a full solution."""
        raise ConfigError(f"task {self.name!r} defines no sketch; use sampler.stage1=solution")

    def has_sketch(self) -> bool:
        return type(self).sketch_head is not Task.sketch_head

    def sketch_followed(self) -> bool:
        """Whether ``sampler.stage1=auto`` drafts sketches for this task as configured: True only where stage II was
        measured to follow its sketch in at least 80% of solutions at the tiny base (the table is in docs/samplers.md). A sketch that the solutions ignore makes two-stage sampling a parallel sampler with noise
        in the prompt."""
        return False

    def sketch_content(self, sketch: str) -> str:
        """What a drafted sketch says, as ``solve_prompt`` quotes it and ``sketch_key`` reads it: by default the text
        before ``stop``. Never raises (any input type)."""
        return sketch.split(self.stop, 1)[0] if isinstance(sketch, str) else ""

    def sketch_max_tokens(self) -> int:
        """The sketch budget ``sampler.sketch_max_tokens=0`` stands for. Compact tasks return the characters of their
        longest well-formed sketch plus the stop (one token each in the tiny model's vocabulary), so a sketch is cut
        only when it has already run past every valid one; the default is the answer budget."""
        return self.cfg.max_new_tokens

    def sketch_key(self, inst: Any, sketch: str) -> str | None:
        """Chain health: the identity of a drafted sketch (equal keys = the same sketch), or None if it is not a
        well-formed sketch of ``inst``. Every task that defines a sketch implements it. Never raises."""
        raise NotImplementedError(f"task {self.name!r} does not say which sketches are valid")

    def sketch_response(self, inst: Any, sketch: str) -> str | None:
        """The text a solution that carries out ``sketch`` starts with (an agent task's first turn, the path task's
        first hop), or None where the sketch does not fix it (the default) or is not valid. ``algo.terms.follow``
        trains its first token after the solve prompt. Never raises."""
        return None

    def follows_sketch(self, inst: Any, sketch: str, completion: str, score: Score) -> bool | None:
        """Chain health: whether a stage-II solution (its text and Score) carries out ``sketch`` (False when the
        sketch is not valid); None where the task cannot tell (e.g. a free-text method). Never raises."""
        raise NotImplementedError(f"task {self.name!r} does not say when a solution follows its sketch")

    # ---------------------------------------------------------------- warm start (model=tiny)
    @abstractmethod
    def warm_start_corpus(self, rng: random.Random, n: int) -> list[str]:
        """``n`` complete training strings (prompt + answer(s)) in exactly the layout rollouts use."""


T = TypeVar("T")


def draw_distinct(draw: Callable[[], T], key: Callable[[T], Hashable], k: int, tries: int) -> list[T]:
    """Up to ``k`` results of ``draw()`` with pairwise different ``key``, from at most ``tries * k`` draws (the warm
    start's lists of distinct answers, steps and plans)."""
    seen: set[Hashable] = set()
    out: list[T] = []
    for _ in range(tries * k):
        item = draw()
        item_key = key(item)
        if item_key not in seen:
            seen.add(item_key)
            out.append(item)
            if len(out) == k:
                break
    return out


TASKS: dict[str, type[Task]] = {}
"""Task option name -> class."""
TASK_SCHEMAS: dict[str, type[TaskConfig]] = {}
"""Task option name -> config schema, stored in ConfigStore as ``schema/task/<name>``."""


def register_task(name: str, schema: type[TaskConfig]) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: make a task available as ``task=<name>`` with config schema ``schema``.

    Task modules must stay cheap to import (no torch, gymnasium or math-verify at module level): the CLI imports
    them to validate configs before any work starts.
    """

    def wrap(cls: type[Task]) -> type[Task]:
        if name in TASKS:
            raise ValueError(f"task {name!r} registered twice")
        cls.name = name
        cls.schema = schema
        TASKS[name] = cls
        TASK_SCHEMAS[name] = schema
        return cls

    return wrap


def make_task(cfg: TaskConfig, seed: int = 0) -> Task:
    """Instantiate the task named by ``cfg.name``.

    TASKS holds every task: Python imported this module's package first (sesa_cli/tasks/__init__.py), and the
    package imports each task module, which registers its class."""
    try:
        cls = TASKS[cfg.name]
    except KeyError:
        raise ConfigError(f"unknown task {cfg.name!r}; valid: {', '.join(sorted(TASKS))}") from None
    return cls(cfg, seed)
