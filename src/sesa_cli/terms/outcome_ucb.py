"""``algo.terms.outcome_ucb``: outcome-based historical exploration, a UCB-style bonus on rarely seen final answers.

Song, Kempe and Munos 2025, "Outcome-based Exploration for LLM Reasoning" (arXiv 2509.06941), "historical
exploration": the reward of a rollout gets a bonus that shrinks with how often its final answer has been seen for
its prompt over training, so answers the policy has not yet tried are worth more than the ones it keeps giving. A
rollout's final answer is its solution key (``Score.key``: what sesa counts as "the same solution"); its prompt is
its plain prompt.

bonus(x, a) = c / sqrt(1 + n(x, a)), n(x, a) = the rollouts of prompt x with answer a in earlier updates,

c the term's ``bonus`` (a reward term: no loss, so no ``coef``; the old ``algo.terms.outcome_ucb.coef`` is ``bonus``
for one release).

The choices where the paper is not explicit, kept here: n counts the updates before this one (this update's own
repeats are the within-batch term's, ``algo.terms.outcome_batch``), every rollout with an answer gets the bonus,
correct or not (the bonus is about the answer, not its grade), and a reply without a solution key (invalid) gets
none and is not counted. The counts are remembered across steps and kept in every checkpoint (the term's state, a
[prompt ids, answer, count] triple per pair seen); a term, not an advantage, because an advantage is a pure function
of one batch's rewards and has no place for memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sesa_cli.rollout.rollouts import Rollout
from sesa_cli.terms.base import Term, TermContext, non_negative, register_term


@dataclass
class OutcomeUCBSettings:
    """``algo.terms.outcome_ucb``."""

    bonus: float = 0.0
    """c, the reward bonus of an answer never seen before for its prompt (it falls as c / sqrt(1 + n)); >= 0, 0 =
    off (0.5 in ``algo=outcome_bonus``, a choice: the paper tunes it per model)."""

    def __post_init__(self) -> None:
        non_negative("bonus", self.bonus)

    def on(self) -> bool:
        """Whether the term acts (``bonus`` > 0)."""
        return self.bonus > 0


@register_term("outcome_ucb")
class OutcomeUCB(Term):
    """Outcome-based historical exploration (arXiv 2509.06941): each rollout's reward + bonus / sqrt(1 + n), n the
    times its answer was seen for its prompt in earlier updates."""

    Settings = OutcomeUCBSettings

    def __init__(self, settings: OutcomeUCBSettings, context: TermContext) -> None:
        super().__init__(settings, context)
        self.seen: dict[tuple[int, ...], dict[str, int]] = {}
        """Per plain prompt, how many rollouts of earlier updates gave each answer (solution key)."""

    def rewards(self, rows: Sequence[Rollout]) -> list[float]:
        c = self.settings.bonus
        return [
            0.0 if r.score.key is None else c / (1 + self.seen.get(tuple(r.prompt_ids), {}).get(r.score.key, 0)) ** 0.5
            for r in rows
        ]

    def observe(self, rows: Sequence[Rollout], off_policy: Sequence[bool]) -> None:
        # every replica counts the whole batch's answers, so every replica gives the same bonuses
        for prompt, key in self.context.gather([(tuple(r.prompt_ids), r.score.key) for r in rows]):
            if key is not None:
                counts = self.seen.setdefault(tuple(prompt), {})
                counts[key] = counts.get(key, 0) + 1

    def state_dict(self) -> list[list[Any]]:
        return [[list(p), key, n] for p, counts in self.seen.items() for key, n in counts.items()]

    def load_state_dict(self, state: Any) -> None:
        self.seen = {}
        for prompt, key, n in state:
            self.seen.setdefault(tuple(prompt), {})[key] = int(n)
