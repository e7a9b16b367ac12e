"""``algo.advantage=w_reinforce``: W-REINFORCE, negative-sample reinforcement with the positive samples down-weighted.

Zhu et al. 2025, "The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning" (arXiv 2506.01347). RLVR's
REINFORCE objective with rewards ±1 splits into positive-sample reinforcement (PSR: push up the correct samples) and
negative-sample reinforcement (NSR: push down the wrong ones). NSR alone keeps pass@k up to k = 256 where PSR alone
narrows the policy; the paper's Weighted-REINFORCE keeps NSR whole and down-weights PSR by λ:

L = λ · L_PSR + L_NSR,   as an advantage: A_i = λ for a correct rollout, −1 for a wrong one,

with no group baseline (REINFORCE on the verifier's ±1; every rollout of an all-wrong group is pushed down). λ = 0.1
is the paper's recommendation (``positive_weight``); λ = 0 is NSR alone, λ = 1 REINFORCE on ±1 rewards. The authors'
code (TianHongZXY/RLVR-Decomposed, a verl fork: ``compute_psr_nsr_outcome_advantage``, ``advantage=weighted``) gives
a 0/1-scored correct sample λ · 1 and a wrong one 0 − 1.

The choices where the paper is silent, kept here: "correct" is the task's own verdict, ``Score.success``; a task's
graded reward (Countdown's 0.1 for a well-formed wrong answer, Sokoban's shaping, a format penalty) and the loss
terms' bonuses are not read, so an invalid reply is pushed down as any wrong one (−1), and a bonus term has no effect
under this advantage. There is no baseline to take from on-policy rows: ``algo.off_policy=on_policy_baseline`` is
refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sesa_cli.advantages.base import Advantage, Outcomes, register_advantage
from sesa_cli.config import ConfigError

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["WReinforce", "WReinforceSettings"]


@dataclass
class WReinforceSettings:
    """``algo.advantage`` of ``w_reinforce``."""

    positive_weight: float = 0.1
    """λ, the weight of a correct rollout's push against a wrong one's 1, in [0, 1]: the paper's 0.1; 0 = negative
    samples only (NSR), 1 = REINFORCE on ±1 rewards."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.positive_weight) and 0 <= self.positive_weight <= 1):
            raise ConfigError(f"positive_weight={self.positive_weight} must be in [0, 1]")


@register_advantage("w_reinforce")
class WReinforce(Advantage):
    """W-REINFORCE (arXiv 2506.01347): A_i = λ for a successful rollout, −1 for any other (λ =
    ``algo.advantage.positive_weight``, the paper's 0.1; 0 = negative samples only), no group baseline."""

    Settings = WReinforceSettings
    on_policy_baseline = False

    def compute(self, rewards: Tensor, outcomes: Outcomes, on_policy: Tensor | None) -> Tensor:
        import torch

        if outcomes.success is None or outcomes.success.shape != rewards.shape:
            raise ValueError("w_reinforce reads each rollout's success: pass Outcomes.success, shaped as the rewards")
        dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
        positive = torch.full(rewards.shape, float(self.settings.positive_weight), dtype=dtype, device=rewards.device)
        return torch.where(outcomes.success.bool(), positive, torch.full_like(positive, -1.0))
