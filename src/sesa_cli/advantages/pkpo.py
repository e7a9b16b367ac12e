"""``algo.advantage=pkpo``: Pass-at-k Policy Optimization, the unbiased pass@k / max@k reward transform for any k ≤ n.

Walder and Karkhanis 2025, "Pass@K Policy Optimization: Solving Harder Reinforcement Learning Problems" (arXiv
2505.15201). The objective is the expected best reward of k samples, max@k (pass@k for 0/1 rewards). Averaged over
all k-subsets S of a group's n rollouts, its gradient estimator is unbiased, and with each subset's own baseline, the
best reward of S without i (which does not depend on rollout i), it has the lowest variance of the paper's estimators
(its s^(loo-1), Eq. 33):

s_i = (1 / C(n, k)) Σ_{|S| = k, S ∋ i} [max_{j ∈ S} r_j − max_{j ∈ S \\ i} r_j],

each rollout credited with what it adds to the best of the subsets it is in. With the rewards sorted ascending,
r_(1) <= ... <= r_(n) (ties in any order), the sum is exact in closed form: the rollout at place i is the best of
C(i − 1, k − 1) of the subsets holding it, and the (k − 1)-subsets of the others whose best is r_(j), j < i, number
C(j − 1, k − 2), while those whose best lies above i cancel between the two maxima:

Σ_{S ∋ i} [...] = r_(i) C(i − 1, k − 1) − Σ_{j < i} r_(j) C(j − 1, k − 2)   (1-based places).

For binary rewards only a correct rollout adds anything, and only to subsets with no other correct one. At k = 1 there
is no baseline (the subset without i is empty): s_i = r_i / n, REINFORCE.

The choices where the paper is silent, kept here:

* The advantage is n · s_i: the estimator Σ_i s_i ∇log pi as a mean over the group's rollouts, the form the loss
  aggregates (for k = 1, A_i = r_i). No std normalisation: the paper's transform is the whole advantage.
* k is fixed (``algo.advantage.k``, 4 of a group of 8 as shipped, as Pass@k Training's); the paper also anneals k
  over training, which a schedule of this setting would do.
* Graded rewards enter as themselves (max@k, the paper's continuous case). The format penalty stays per sample, as
  Pass@k Training's here (sesa_cli.advantages.passk): a subset's reward is the best member's reward without its
  penalty plus the mean of its members' penalties, and the same baseline (the subset without i, its own mean) gives
  each rollout its penalty less the mean penalty of the others, f_i − mean_{j ≠ i} f_j (f_i alone at k = 1): an
  invalid reply among valid failures is pushed down whatever k.
* There is no group mean to take from on-policy rows: ``algo.off_policy=on_policy_baseline`` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import TYPE_CHECKING

from sesa_cli.advantages.base import Advantage, Outcomes, register_advantage, subset_size_problem
from sesa_cli.advantages.passk import checked_rewards
from sesa_cli.config import ConfigError

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["PKPO", "PKPOSettings", "marginal_max_credit"]


def marginal_max_credit(rewards: list[float], k: int) -> list[float]:
    """n · s_i of the module docstring for one group's rewards (a list, any order) -> one value per rollout, exact
    (Python floats and integer binomials)."""
    n = len(rewards)
    if not 1 <= k <= n:
        raise ValueError(f"algo.advantage.k={k} must be in [1, {n}]: the rollouts of a group")
    order = sorted(range(n), key=lambda i: rewards[i])  # stable: ties keep row order
    v = [rewards[i] for i in order]
    holding = comb(n - 1, k - 1)  # the k-subsets that hold a given rollout
    out = [0.0] * n
    below = 0.0  # Σ_{j < i} r_(j) C(j, k - 2), 0-based places
    for place, row in enumerate(order):
        credit = v[place] * comb(place, k - 1) - below
        out[row] = k * credit / holding
        if k >= 2:
            below += v[place] * comb(place, k - 2)
    return out


@dataclass
class PKPOSettings:
    """``algo.advantage`` of ``pkpo``."""

    k: int = 4
    """k of the max@k (pass@k) objective, in [1, the rollouts of a group]: 1 is REINFORCE without a baseline, n
    credits only the group's best rollout (by its lead over the second best)."""

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigError(f"k={self.k} must be >= 1")


@register_advantage("pkpo")
class PKPO(Advantage):
    """PKPO (arXiv 2505.15201): each rollout credited with what it adds to the best reward of the k-subsets of its
    group that hold it, against the subset without it (the paper's s^(loo-1)), times n; format penalties per sample
    (module docstring)."""

    Settings = PKPOSettings
    penalty_apart = True
    on_policy_baseline = False

    def check_group(self, rows: int) -> str | None:
        return subset_size_problem(self.settings.k, rows)

    def compute(self, rewards: Tensor, outcomes: Outcomes, on_policy: Tensor | None) -> Tensor:
        import torch

        r = checked_rewards(rewards, "pkpo")
        k, n = self.settings.k, r.shape[1]
        rows = [marginal_max_credit(group, k) for group in r.tolist()]
        if outcomes.penalties is not None:
            for out, f in zip(rows, outcomes.penalties.detach().to(torch.float64).tolist(), strict=True):
                total = sum(f)
                for i, fi in enumerate(f):
                    out[i] += fi - ((total - fi) / (n - 1) if k >= 2 else 0.0)
        dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
        return torch.tensor(rows, dtype=torch.float64).to(dtype)
