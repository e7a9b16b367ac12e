"""``sampler.filters.rollout_filter``: RAGEN's StarPO-S rollout filter (Wang et al. 2025, "RAGEN", arXiv 2504.20073;
its ``rollout_filter_ratio`` with type ``std``).

The update trains on the ``int(ratio * groups)`` groups (at least one) with the largest in-group reward standard
deviation, so it spends its step on the prompts whose rollouts disagree; the step's rollout metrics still cover the
whole batch, and ``train/kept_groups`` counts the kept ones. RAGEN (Sept 2025) trained with 0.25.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from sesa_cli.config import ConfigError
from sesa_cli.rollout.filters.base import BatchFilter, register_filter, rewards
from sesa_cli.rollout.rollouts import Rollout


@dataclass
class RolloutFilterSettings:
    """``sampler.filters.rollout_filter``."""

    ratio: float = 0.25
    """Share of each batch's groups kept, in (0, 1]; 1 keeps them all (the filter is then off)."""

    def __post_init__(self) -> None:
        if not 0 < self.ratio <= 1:
            raise ConfigError(f"ratio={self.ratio} must be in (0, 1]")


def top_std_groups(groups: Sequence[Sequence[float]], ratio: float) -> list[bool]:
    """True for the ``int(ratio * len(groups))`` groups of rewards (at least one) with the largest population std;
    ties keep the earlier group. The std is computed exactly (``statistics.pstdev`` sums in rationals), so two groups
    holding the same rewards in another order tie."""
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    std = [statistics.pstdev(g) for g in groups]
    k = max(1, int(ratio * len(groups)))
    kept = set(sorted(range(len(groups)), key=lambda i: -std[i])[:k])  # sorted() is stable: ties keep the earlier
    return [i in kept for i in range(len(groups))]


@register_filter("rollout_filter")
class RolloutFilter(BatchFilter):
    """RAGEN's StarPO-S rollout filter: the update trains on the share ``ratio`` of the groups with the largest
    reward std (the rollout metrics cover them all); ``train/kept_groups``."""

    Settings = RolloutFilterSettings

    @property
    def active(self) -> bool:
        return float(self.settings.ratio) < 1

    def keep(self, groups: Sequence[Sequence[Rollout]]) -> list[bool]:
        return top_std_groups(rewards(groups), float(self.settings.ratio))
