"""``algo.terms.outcome_batch``: outcome-based batch exploration, a penalty on final answers repeated within a group.

Song, Kempe and Munos 2025, "Outcome-based Exploration for LLM Reasoning" (arXiv 2509.06941), "batch exploration":
the rollouts of one prompt are rewarded for differing from each other in their final answer (what test-time
sampling of several answers needs), by a penalty on each rollout for the others of its group that gave the same
answer:

bonus_i = −coef · |{j ≠ i in i's group: a_j = a_i}| / G,

with a_i rollout i's solution key (``Score.key``) and G the rollouts of the group in the update. The choice where
the paper is not explicit, kept here: a reply without a solution key (invalid) is no answer, so it is neither
penalised nor counted against others. Memoryless: no state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sesa_cli.rollout.rollouts import Rollout
from sesa_cli.terms.base import Term, TermSettings, register_term


@register_term("outcome_batch")
class OutcomeBatch(Term):
    """Outcome-based batch exploration (arXiv 2509.06941): each rollout's reward − coef × (the other rollouts of its
    group with the same answer) / G; coef is the penalty's weight."""

    Settings = TermSettings

    def rewards(self, rows: Sequence[Rollout]) -> list[float]:
        size = Counter(r.group for r in rows)
        same = Counter((r.group, r.score.key) for r in rows if r.score.key is not None)
        c = self.settings.coef
        return [0.0 if r.score.key is None else -c * (same[r.group, r.score.key] - 1) / size[r.group] for r in rows]
