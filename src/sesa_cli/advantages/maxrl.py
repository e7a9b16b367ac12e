"""``algo.advantage=maxrl``: Maximum Likelihood RL, the centred reward divided by the group mean, not the std.

Tajwar et al. 2026, "Maximum Likelihood Reinforcement Learning" (arXiv 2602.02710). Correctness-based RL maximises
the success probability p(x) of each prompt; the likelihood principle maximises log p(x), whose gradient weighs each
prompt by 1/p(x): hard prompts count more. With N rollouts of a prompt, K of them correct, the paper's unbiased
estimator of the (N-truncated) objective's gradient is the mean of ∇log pi over the K correct rollouts, with the mean
over all N as its control variate; as an advantage,

A_i = (r_i − r̄) / r̄ = N r_i / K − 1   (r in {0, 1}, r̄ = K / N):

N/K − 1 for a correct rollout, −1 for a wrong one, and 0 for every rollout of a group with no success (K = 0: the
estimator has no sample of success to weigh) or with no failure. GRPO's (r_i − r̄)/std weighs a group by
1/sqrt(p(1 − p)) instead. Shipped in prime-rl (``max_rl``) and TRL (``MaxRLTrainer``).

The choices where the paper is silent, kept here: the paper's rewards are 0 or 1, and its divisor r̄ is the mean
reward above a failure's 0. sesa's rewards are graded (Countdown's 0.1 for a well-formed wrong answer), carry a
format penalty (an invalid reply's -0.1) or run below 0 (Sokoban's step penalties), where dividing by the mean
itself would flip or blow up the sign of every advantage. So the group's lowest reward stands for a failure:
A_i = (r_i − r̄) / (r̄ − min_g r + algo.adv_eps), the paper's advantage for 0/1 rewards whenever some rollout of the
group failed (min 0), and 0 for a group whose rewards are all equal. An invalid reply among valid failures is then the
group's floor and the valid failures are lifted above it (the format penalty acts per sample without being taken
apart). ``algo.adv_eps`` keeps the division finite. There is no baseline to take from on-policy rows alone: with
``algo.off_policy=on_policy_baseline`` it is refused. No settings: the truncation level is the group size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sesa_cli.advantages.base import Advantage, Outcomes, register_advantage
from sesa_cli.advantages.group import as_float, need_two

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["MaxRL"]


@register_advantage("maxrl")
class MaxRL(Advantage):
    """MaxRL (arXiv 2602.02710): A_i = (r_i − mean_g r) / (mean_g r − min_g r + adv_eps), the paper's
    (r_i − r̄) / r̄ for 0/1 rewards in a group with a failure (module docstring): hard prompts (few successes) weigh
    1/p."""

    on_policy_baseline = False

    def compute(self, rewards: Tensor, outcomes: Outcomes, on_policy: Tensor | None) -> Tensor:
        r = as_float(rewards)
        need_two(r, "maxrl")
        mean = r.mean(dim=1, keepdim=True)
        floor = r.min(dim=1, keepdim=True).values
        return (r - mean) / (mean - floor + self.algo.adv_eps)
