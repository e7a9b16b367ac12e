"""What a sampler draws: a :class:`Completion` per row, and a :class:`Rollout` that says where it came from.

Every rollout carries its :data:`Origin`: drawn i.i.d. from the plain prompt (:class:`Plain`), an item of a
sequential chain with its position (:class:`ChainItem`), or a stage-II solution expanding a sketch
(:class:`Expansion`, which holds the :class:`Sketch`). The loss inputs, the chain health, the follow term and the
sample dumps read the origin; nothing infers it from a missing field or a row's index. A sampler of a new kind (a
plug-in) may define an origin of its own: any frozen dataclass with ``position`` and ``conditioned_on``.

Torch-free: the loss terms (sesa_cli.terms) read rollouts without importing the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from sesa_cli.tasks.base import Score

__all__ = ["ChainItem", "Completion", "Expansion", "Hinted", "Origin", "Plain", "PolicyRows", "Rollout", "Sketch"]


@dataclass
class Completion:
    """One sampled continuation of one row."""

    ids: list[int]
    """Sampled token ids, up to and including the stop token (if one was sampled)."""
    logps: list[float]
    """log pi(token | context) of each sampled token under the temperature-scaled distribution (banned ids masked)."""
    entropies: list[float]
    """Entropy (nats) of the temperature-scaled distribution (banned ids masked) at each sampled position."""
    stopped: bool
    """True if the row ended on a stop token, False if it hit its length limit."""
    mask: list[bool] | None = None
    """Multi-turn episodes: True on tokens the policy sampled, False on teacher-forced environment feedback (whose
    ``logps``/``entropies`` entries are 0). None: every token was sampled."""

    @property
    def policy_entropies(self) -> list[float]:
        """Entropies at the sampled positions only."""
        if self.mask is None:
            return self.entropies
        return [e for e, m in zip(self.entropies, self.mask, strict=True) if m]

    @property
    def n_sampled(self) -> int:
        """Number of tokens the policy sampled."""
        return len(self.ids) if self.mask is None else sum(self.mask)


class Origin(Protocol):
    """Where a rollout came from: its place in its group's draw and what it was conditioned on beyond the plain
    prompt (the exact context is :attr:`Rollout.context_ids`)."""

    @property
    def position(self) -> int:
        """Its place in the sequence that drew it (0 for an i.i.d. row)."""
        ...

    @property
    def conditioned_on(self) -> tuple[str, ...]:
        """The texts it was conditioned on beyond the plain prompt, in order (empty for an i.i.d. row)."""
        ...


@dataclass(frozen=True)
class Plain:
    """Drawn i.i.d. from the plain prompt x: every row of parallel sampling, the ``sampler.parallel_rows`` rows of a
    sequential group."""

    position: int = 0
    conditioned_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChainItem:
    """Item ``position`` of a sequential chain of whole solutions (``sampler.stage1=solution``): drawn after the
    chain's earlier items (``conditioned_on``, their texts), which its context holds."""

    position: int
    conditioned_on: tuple[str, ...] = ()
    stop_forced: bool = False
    """The item hit its length limit without its stop, so the sampler teacher-forced the task's stop after it: the
    next item's context holds it and starts clean."""


@dataclass(frozen=True)
class Hinted:
    """Drawn after ``position`` i.i.d. rows of its group, from the plain prompt followed by the distinct wrong answers
    among them (``conditioned_on``, their texts), which its context holds (``sampler=lte``, arXiv 2510.26109)."""

    position: int
    conditioned_on: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Sketch:
    """A stage-I sketch: item ``position`` of the chain of sketches, shared by the stage-II solutions expanding it
    (compared by identity: two sketches of equal text in one chain are two items)."""

    text: str
    context_ids: list[int]
    """The context that drew it: the sketch head and the chain's earlier sketches."""
    completion: Completion
    position: int
    stop_forced: bool = False
    """Cut at its length limit, so the sampler closed it with the task's stop before the next sketch."""


@dataclass(frozen=True)
class Expansion:
    """A stage-II solution: drawn from the solve prompt of its :class:`Sketch` (``sampler.stage1=sketch``)."""

    sketch: Sketch
    followed: bool | None = None
    """Whether it carries out its sketch (``Task.follows_sketch``); None where the task cannot tell."""
    conditioned_on: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "conditioned_on", (self.sketch.text,))

    @property
    def position(self) -> int:
        """Its sketch's position in the chain of sketches."""
        return self.sketch.position


@dataclass
class Rollout:
    """One solution of one group, with everything the loss and the metrics need."""

    group: int
    """Index of its prompt in the batch."""
    inst: Any
    prompt_ids: list[int]
    """The plain prompt x (with BOS)."""
    context_ids: list[int]
    """The context the solution was drawn from (= prompt_ids for a :class:`Plain` row)."""
    completion: Completion
    text: str
    score: Score
    origin: Origin = field(default_factory=Plain)
    """Where it came from: :class:`Plain`, :class:`ChainItem`, :class:`Expansion` or :class:`Hinted` (or a plug-in
    sampler's own)."""

    @property
    def stop_forced(self) -> bool:
        """The chain item that drew it (its sketch, for an expansion) was cut and closed with the task's stop."""
        if isinstance(self.origin, Expansion):
            return self.origin.sketch.stop_forced
        return isinstance(self.origin, ChainItem) and self.origin.stop_forced


@dataclass(frozen=True)
class PolicyRows:
    """Rows a sampler adds to an update's policy-gradient batch beside the solution rows (two-stage sampling's
    sketches, sesa_cli.rollout.samplers.SequentialSampler.policy_rows), one entry per row in every list. Each is
    scored in the context that drew it, so it is never off-policy; the update's statistics of solution rows leave
    it out by its ``kind``, not by its place."""

    kind: str
    """What the rows are (``sketch``): ``LossInputs.kinds``."""
    contexts: list[list[int]]
    """Token ids of the context that drew each row (it is scored under it)."""
    completions: list[list[int]]
    """Token ids of each row's completion."""
    behaviour_logps: list[list[float]]
    """Per completion token, the log-prob recorded while sampling."""
    advantages: list[float]
    """One advantage per row."""
