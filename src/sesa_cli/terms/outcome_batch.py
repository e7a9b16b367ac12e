"""``algo.terms.outcome_batch``: outcome-based batch exploration, a penalty on final answers repeated within a group.

Song, Kempe and Munos 2025, "Outcome-based Exploration for LLM Reasoning" (arXiv 2509.06941), "batch exploration":
the rollouts of one prompt are rewarded for differing from each other in their final answer (what test-time
sampling of several answers needs), by a penalty on each rollout for the others of its group that gave the same
answer:

bonus_i = −penalty · |{j ≠ i in i's group: a_j = a_i}| / G,

with a_i rollout i's solution key (``Score.key``), G the rollouts of the group in the update, and ``penalty`` the
term's setting (a reward term: no loss, so no ``coef``; the old ``algo.terms.outcome_batch.coef`` is ``penalty`` for
one release). The choice where
the paper is not explicit, kept here: a reply without a solution key (invalid) is no answer, so it is neither
penalised nor counted against others. Memoryless: no state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sesa_cli.rollout.rollouts import Rollout
from sesa_cli.terms.base import Term, non_negative, register_term


@dataclass
class OutcomeBatchSettings:
    """``algo.terms.outcome_batch``."""

    penalty: float = 0.0
    """The reward taken from a rollout for all the others of its group that gave its answer, as the share of the
    group they are; >= 0, 0 = off (0.5 in ``algo=outcome_bonus``, a choice: the paper tunes it per model)."""

    def __post_init__(self) -> None:
        non_negative("penalty", self.penalty)

    def on(self) -> bool:
        """Whether the term acts (``penalty`` > 0)."""
        return self.penalty > 0


@register_term("outcome_batch")
class OutcomeBatch(Term):
    """Outcome-based batch exploration (arXiv 2509.06941): each rollout's reward − penalty × (the other rollouts of
    its group with the same answer) / G."""

    Settings = OutcomeBatchSettings

    def rewards(self, rows: Sequence[Rollout]) -> list[float]:
        size = Counter(r.group for r in rows)
        same = Counter((r.group, r.score.key) for r in rows if r.score.key is not None)
        c = self.settings.penalty
        return [0.0 if r.score.key is None else -c * (same[r.group, r.score.key] - 1) / size[r.group] for r in rows]
