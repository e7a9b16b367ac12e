"""The loss-term protocol: a term of the update that brings its own rows.

A term is one registered class (:data:`TERMS`, ``@register_term("name")``) in one file, configured under
``algo.terms.<name>`` by its settings dataclass (its fields documented beside them, the first one set by a bare
value, ``algo.terms.found=0.2``) and declaring the metrics it writes (``metrics``, sesa_cli.registry.Plugin).
``coef`` has one meaning: the weight of a term's loss in the objective (:class:`TermSettings`, for a term that scores
rows). A term that changes the rewards instead (an exploration bonus) has no loss and no ``coef``: its scale is a
setting of its own, named for what it scales (the unlikeliness reward's ``beta``, the outcome bonus's ``bonus``).
A term is on when its settings say so (``on()``: ``coef`` > 0, or its scale > 0). In every update the learner
(sesa_cli.learner.Learner), for each term on:

0. :meth:`Term.rewards` may add a bonus to each solution row's reward before the advantages (an exploration
   bonus, by the term's own scale; none by default);
1. :meth:`Term.observe` shows it the update's solution rows (rollouts, which say where they came from) and which of
   them are off-policy: a term with memory updates it here;
2. :meth:`Term.rows` asks for the rows it scores (token ids: a context and a completion each, and which update row
   each belongs to, or none: every mini-batch then scores them all);
3. the scorer scores those rows with the policy, in the mini-batch's own forward pass or in one of their own (the
   scorer's choice, ``model.padding_free``), and :meth:`Term.loss` turns their log-probs into the term's loss and
   metrics; the learner adds ``coef`` times that loss to the mini-batch's objective (KL and entropy stay in the pure
   objective, sesa_cli.algos.objective);
4. :meth:`Term.state_dict` is saved in every checkpoint and restored on resume (bit for bit).

Terms are torch-free at import: they compute with the methods of the tensors they are given, so ``--help`` and the
config checks list them without torch. A term from outside sesa registers the same way (docs/extending.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from sesa_cli.config import ConfigError
from sesa_cli.registry import Plugin, Registry, settings_from
from sesa_cli.rollout.rollouts import Rollout
from sesa_cli.tasks.base import Task

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["TERMS", "Term", "TermContext", "TermRows", "TermSettings", "build_terms", "non_negative", "register_term"]

Gather = Callable[[list[Any]], list[Any]]
"""Every data-parallel replica's list, concatenated in rank order (sesa_cli.distributed); one process: its own."""


def non_negative(name: str, value: float) -> None:
    """A ConfigError unless ``value`` (the setting ``name``) is a finite number >= 0."""
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{name}={value} must be a finite number >= 0")


@dataclass
class TermSettings:
    """Settings of a term that scores rows (``algo.terms.<name>.*``): its loss weight ``coef``; a term's own extend
    them."""

    coef: float = 0.0
    """Weight of the term's loss in the objective (added as ``coef`` times the term's loss to every mini-batch's);
    0 = off."""

    def __post_init__(self) -> None:
        non_negative("coef", self.coef)

    def on(self) -> bool:
        """Whether the term acts (``coef`` > 0)."""
        return self.coef > 0


@dataclass(frozen=True)
class TermRows:
    """The rows a term scores in one update, one entry per row in every list."""

    contexts: list[list[int]]
    """Token ids of the context each row is scored under."""
    completions: list[list[int]]
    """Token ids of each row's completion (log-probs are taken over these)."""
    masks: list[list[bool] | None] | None = None
    """Per completion token, True where it counts (an episode's own tokens, not its observations); None = all."""
    owners: list[int] | None = None
    """The update row (index into the update's solution rows) each row belongs to: a mini-batch scores the rows of
    its own update rows only. None: every mini-batch scores every row."""
    stats: dict[str, float] = field(default_factory=dict)
    """Statistics of the update's rows, logged as ``loss/<name>`` once per update."""


@dataclass(frozen=True)
class TermContext:
    """What a term may read besides the rows: the task, the tokenizer's encoding of text, and the data-parallel
    replicas' gather (a term that counts over the whole batch calls it, on every replica alike)."""

    task: Task
    encode: Callable[[str], list[int]]
    gather: Gather


class Term(Plugin):
    """A loss term that brings its own rows, or changes the rewards. Subclass it in a file of its own, with
    ``@register_term("name")`` and its settings dataclass as ``Settings`` (a :class:`TermSettings` subclass for a term
    that scores rows; any dataclass with an ``on()`` method for one that only changes the rewards)."""

    Settings: ClassVar[type[Any]] = TermSettings
    """Its settings schema (``algo.terms.<name>.*``)."""

    def __init__(self, settings: Any, context: TermContext) -> None:
        self.settings = settings
        self.context = context

    def rewards(self, rows: Sequence[Rollout]) -> list[float] | None:
        """A bonus per solution row, added to its reward before the advantages are computed (an exploration bonus by
        how often an answer was seen, a reward for the unlikely correct answers), or None: none (the default). Called
        once per update, before :meth:`observe`; the step's rollout metrics keep the task's own rewards."""
        return None

    def observe(self, rows: Sequence[Rollout], off_policy: Sequence[bool]) -> None:
        """See the update's solution rows (``off_policy[i]``: row i is scored in a context other than the one that
        drew it). The default remembers nothing."""

    def rows(self, rows: Sequence[Rollout]) -> TermRows | None:
        """The rows this term scores in the update of ``rows`` (the solution rows, as observed), or None (the
        default: a term that only gives :meth:`rewards`)."""
        return None

    def loss(self, logps: Tensor, response_mask: Tensor) -> tuple[Tensor, dict[str, float]]:
        """The term's loss (0-d, to be minimised) and its metrics (logged as ``loss/<metric>``, averaged over the
        mini-batches), from ``logps`` (rows, T): the log-probs of the rows of :meth:`rows` that this mini-batch
        scores, in their order, under the policy being trained (carrying the gradient), and their (rows, T)
        ``response_mask``."""
        raise NotImplementedError

    def state_dict(self) -> Any:
        """What a checkpoint keeps of the term (JSON-ready); None: nothing."""
        return None

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s value."""


TERMS: Registry[type[Term]] = Registry("algo.terms")
"""``algo.terms`` names -> term classes."""


def register_term(name: str) -> Callable[[type[Term]], type[Term]]:
    """Class decorator: make a term available as ``algo.terms.<name>``."""
    return TERMS.register(name)


def term_settings(terms: dict[str, Any]) -> dict[str, Any]:
    """The settings of every term ``algo.terms`` turns on (its settings' ``on()``), in name order (the order their
    losses are added in); a ConfigError names an unknown term or setting."""
    out: dict[str, Any] = {}
    for name in sorted(terms):
        settings = settings_from(TERMS.lookup(name).Settings, terms[name], f"algo.terms.{name}")
        if settings is not None and settings.on():
            out[name] = settings
    return out


def build_terms(terms: dict[str, Any], context: TermContext) -> list[Term]:
    """The terms ``algo.terms`` turns on, built with ``context``, in name order."""
    return [TERMS[name](settings, context) for name, settings in term_settings(terms).items()]
