"""``algo.terms.unlikeliness``: the unlikeliness reward, correct answers the policy finds likely rewarded less.

He, Fried and Welleck 2025, "Rewarding the Unlikely: Lifting GRPO Beyond Distribution Sharpening" (arXiv
2506.02355): GRPO pushes up the correct rollouts the policy already draws most (its "rank bias"), so the reward of a
rollout is scaled down by its likelihood rank in its group,

r_i' = r_i · (1 − β · rank_i / G),

rank_i in {0, ..., G − 1} its place when the G rollouts of its group are sorted by likelihood, least likely first
(the least likely keeps its whole reward, the likeliest loses β (G − 1) / G of it), β = ``beta`` (the authors' 0.25).
Given to the learner as the bonus r_i' − r_i = −β · r_i · rank_i / G.

Written as the authors' released code computes it (``ray_lean_trainer._compute_advantages``,
github.com/AndreHe02/rewarding-unlikely-release), the choices kept here: the likelihood is the rollout's mean
per-token log-prob (its sampled tokens only, an episode's observations left out), here the log-probs recorded when
it was drawn (the policy of this update, in the context that drew it); the ranks are over the whole group, and a
rollout with reward 0 is unchanged whatever its rank (a negative reward, a format penalty, shrinks toward 0
by the same factor); ties in likelihood rank in row order. Where most rewards are negative (Sokoban's step penalty)
that shrink pays the likeliest failing rollout most and sharpens the policy (docs/findings.md, claim XII), so the
paper's 0/1 rewards leave a choice open, kept in :attr:`UnlikelinessSettings.negatives`: ``scale`` (the default, the
authors' code as written) or ``keep`` (a reward below 0 is left as it is: only rewards above 0, the "correct" side,
are ranked down; the same as ``scale`` wherever no reward is negative).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sesa_cli.config import ConfigError
from sesa_cli.rollout.rollouts import Completion, Rollout
from sesa_cli.terms.base import Term, TermContext, non_negative, register_term


def mean_logp(completion: Completion) -> float:
    """Mean log-prob of a completion's sampled tokens (every token when it has no mask); 0 for an empty one."""
    mask = completion.mask or [True] * len(completion.logps)
    picked = [lp for lp, m in zip(completion.logps, mask, strict=True) if m]
    return sum(picked) / len(picked) if picked else 0.0


@dataclass
class UnlikelinessSettings:
    """``algo.terms.unlikeliness``: ``beta`` and ``negatives`` (a reward term: no loss, so no ``coef``; the old
    ``algo.terms.unlikeliness.coef`` is ``beta`` for one release)."""

    beta: float = 0.0
    """β, the paper's beta_rank: the share of its reward the likeliest correct rollout of a group of G loses,
    times (G − 1)/G (0.25 in ``algo=unlikeliness``, the authors'); >= 0, 0 = off."""
    negatives: str = "scale"
    """What the rank does to a reward below 0: ``scale`` (shrinks it toward 0 like any other, the authors' code;
    on rewards that are mostly negative this pays the likeliest failure most) or ``keep`` (left as it is)."""

    def __post_init__(self) -> None:
        non_negative("beta", self.beta)
        if self.negatives not in ("scale", "keep"):
            raise ConfigError(f"negatives={self.negatives!r} is not valid; choose one of: scale, keep")

    def on(self) -> bool:
        """Whether the term acts (``beta`` > 0)."""
        return self.beta > 0


@register_term("unlikeliness")
class Unlikeliness(Term):
    """The unlikeliness reward (arXiv 2506.02355): each rollout's reward × (1 − beta · rank / G), rank its place in
    its group by mean token log-prob, least likely first; beta is the paper's beta_rank (0.25 in its recipe)."""

    Settings = UnlikelinessSettings

    def __init__(self, settings: UnlikelinessSettings, context: TermContext) -> None:
        super().__init__(settings, context)
        self.keep = settings.negatives == "keep"

    def rewards(self, rows: Sequence[Rollout]) -> list[float]:
        groups: dict[int, list[int]] = defaultdict(list)
        for i, r in enumerate(rows):
            groups[r.group].append(i)
        out = [0.0] * len(rows)
        beta = self.settings.beta
        for members in groups.values():
            order = sorted(members, key=lambda i: mean_logp(rows[i].completion))  # stable: ties in row order
            for rank, i in enumerate(order):
                reward = rows[i].score.reward
                out[i] = 0.0 if self.keep and reward < 0 else -beta * reward * rank / len(members)
        return out
