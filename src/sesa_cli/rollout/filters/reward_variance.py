"""``sampler.filters.reward_variance``: RAGEN-2's SNR-adaptive filter, the groups of highest reward variance kept.

Wang et al. 2026, "RAGEN-2: Reasoning Collapse in Agentic RL" (github.com/mll-lab-nu/RAGEN, "SNR-Adaptive
Filtering", its recommended ``rollout_filter_strategy=top_p`` with ``top_p_prob_mode=linear``): a group whose
rollouts all score alike gives a noisy, low signal-to-noise gradient, so the update trains on the groups of largest
in-group reward spread that together hold a share ``top_p`` of the batch's spread. As RAGEN's
``RolloutFilter._select_top_groups`` computes it:

1. every group's score is the std of its rewards (RAGEN's ``reward_variance`` metric is ``rm_scores.std``, the
   unbiased std); with ``include_zero`` false the groups of score 0 are dropped first;
2. the others are sorted by score, largest first, and kept from the top while their running sum is below
   ``top_p`` · (sum of the scores) − ``eps``: the group that reaches it is kept, the rest dropped.

``top_p`` = 1 keeps every group (but the zero-score ones, unless ``include_zero``); a batch in which no group is
kept (every group's rewards equal) trains on all of them instead, where RAGEN skips the step: their advantages are
all 0 under a group baseline, so the update moves nothing but its KL and entropy terms (the choice kept here). The
step's rollout metrics cover the whole batch; ``train/kept_groups`` counts the kept groups. RAGEN-2's diagnostic of
template collapse is ``rollout/answer_mi`` (sesa_cli.collapse.input_dependence), logged for every run.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from sesa_cli.config import ConfigError
from sesa_cli.rollout.filters.base import BatchFilter, register_filter, rewards
from sesa_cli.rollout.rollouts import Rollout


@dataclass
class RewardVarianceSettings:
    """``sampler.filters.reward_variance``."""

    top_p: float = 0.9
    """Share of the batch's total in-group reward std the kept groups hold, in (0, 1] (RAGEN-2's recommended 0.9)."""
    include_zero: bool = False
    """Whether groups whose rewards are all equal may be kept (RAGEN-2's recommended false)."""
    eps: float = 0.01
    """Subtracted from the target share (RAGEN's ``rollout_filter_selection_eps``), >= 0."""

    def __post_init__(self) -> None:
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p={self.top_p} must be in (0, 1]")
        if not self.eps >= 0:
            raise ConfigError(f"eps={self.eps} must be >= 0")


def top_p_groups(groups: Sequence[Sequence[float]], top_p: float, include_zero: bool, eps: float) -> list[bool]:
    """Per group of rewards, whether RAGEN-2's linear top-p rule keeps it (module docstring); a rule that keeps
    none keeps them all. Ties in std keep the earlier group first."""
    std = [statistics.stdev(g) if len(g) > 1 else 0.0 for g in groups]
    candidates = [i for i in range(len(groups)) if include_zero or std[i] > 1e-10]
    kept: set[int] = set(candidates)
    if top_p < 1:
        threshold = top_p * sum(std[i] for i in candidates) - eps
        kept, total = set(), 0.0
        for i in sorted(candidates, key=lambda i: -std[i]):  # sorted() is stable: ties keep the earlier
            if total >= threshold or std[i] <= 0:
                break
            kept.add(i)
            total += std[i]
        if total < threshold:
            kept = set()
    if not kept:
        return [True] * len(groups)
    return [i in kept for i in range(len(groups))]


@register_filter("reward_variance")
class RewardVariance(BatchFilter):
    """RAGEN-2's SNR-adaptive filter: the update trains on the groups of largest reward std holding a share top_p
    of the batch's (the rollout metrics cover them all); ``train/kept_groups``."""

    Settings = RewardVarianceSettings

    @property
    def active(self) -> bool:
        return float(self.settings.top_p) < 1 or not self.settings.include_zero

    def keep(self, groups: Sequence[Sequence[Rollout]]) -> list[bool]:
        s = self.settings
        return top_p_groups(rewards(groups), float(s.top_p), bool(s.include_zero), float(s.eps))
