"""``sampler.filters.dynamic_sampling``: DAPO's dynamic sampling (Yu et al. 2025, "DAPO", arXiv 2503.14476).

A group whose rewards are all equal carries no learning signal under a group baseline (every advantage is 0), so it
is dropped and more prompts are drawn until the batch is full, at most ``max_rounds`` extra rounds per step; after
them the batch is filled with the last round's dropped groups, so the batch size, and the step's token budget, stay
what the config says (``train/resample_rounds`` logs the rounds). ``algo=dapo`` turns it on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sesa_cli.config import ConfigError
from sesa_cli.rollout.filters.base import BatchFilter, register_filter, rewards
from sesa_cli.rollout.rollouts import Rollout


@dataclass
class DynamicSamplingSettings:
    """``sampler.filters.dynamic_sampling``."""

    max_rounds: int = 4
    """Extra sampling rounds per step at most (the batch may stay short of informative groups after them)."""

    def __post_init__(self) -> None:
        if self.max_rounds < 0:
            raise ConfigError(f"max_rounds={self.max_rounds} must be >= 0")


def informative(groups: Sequence[Sequence[float]]) -> list[bool]:
    """True for each group of rewards that are not all equal. Equality is exact (no std threshold), so a group whose
    rewards differ only by float noise still counts as informative."""
    return [any(r != g[0] for r in g) for g in groups]


@register_filter("dynamic_sampling")
class DynamicSampling(BatchFilter):
    """DAPO's dynamic sampling: drops the groups whose rewards are all equal (no signal under a group baseline) and
    draws more prompts in their place; ``train/resample_rounds``."""

    Settings = DynamicSamplingSettings
    refills = True

    @property
    def max_rounds(self) -> int:
        return int(self.settings.max_rounds)

    def keep(self, groups: Sequence[Sequence[Rollout]]) -> list[bool]:
        return informative(rewards(groups))
