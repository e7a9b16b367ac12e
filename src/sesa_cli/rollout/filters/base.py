"""The batch-filter protocol (``sampler.filters``): which drawn groups a training step keeps.

A filter is one registered class (:data:`FILTERS`, ``@register_filter("name")``) in one file, configured under
``sampler.filters.<name>`` by its settings dataclass (documented beside its fields). The trainer asks each filter on,
for a step's groups, which to keep (:meth:`BatchFilter.keep`):

* a filter that :attr:`~BatchFilter.refills` (DAPO's dynamic sampling) drops groups while the batch is drawn: the
  trainer draws more prompts in their place, at most :attr:`~BatchFilter.max_rounds` extra rounds, then fills the
  batch with the last round's dropped groups;
* the others (RAGEN's rollout filter) choose the groups the update trains on from the whole drawn batch, whose
  rollout metrics still cover every group (``train/kept_groups`` counts the kept ones).

Filters read what a group's rollouts say (rewards, texts, origins) and are torch-free, so ``--help`` and the config
checks list them without torch. A filter from outside sesa registers the same way (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from sesa_cli.registry import Plugin, Registry, settings_from
from sesa_cli.rollout.rollouts import Rollout

__all__ = ["FILTERS", "BatchFilter", "Filters", "build_filters", "register_filter"]


class BatchFilter(Plugin):
    """Keeps some of a step's groups. Subclass it in a file of its own with ``@register_filter("name")`` and a
    settings dataclass as ``Settings`` (``sampler.filters.<name>.*``)."""

    refills: ClassVar[bool] = False
    """Whether the trainer draws more prompts in place of the groups it drops (else the update trains on fewer)."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings

    @property
    def active(self) -> bool:
        """Whether these settings filter anything (a filter that keeps every group is not built)."""
        return True

    @property
    def max_rounds(self) -> int:
        """A refilling filter's cap on extra sampling rounds per step."""
        return 0

    def keep(self, groups: Sequence[Sequence[Rollout]]) -> list[bool]:
        """One flag per group of ``groups``: True to keep it."""
        raise NotImplementedError


FILTERS: Registry[type[BatchFilter]] = Registry("sampler.filters")
"""``sampler.filters`` names -> filter classes."""


def register_filter(name: str) -> Callable[[type[BatchFilter]], type[BatchFilter]]:
    """Class decorator: make a batch filter available as ``sampler.filters.<name>``."""
    return FILTERS.register(name)


def build_filters(filters: dict[str, Any]) -> list[BatchFilter]:
    """The filters ``sampler.filters`` turns on, in name order; a ConfigError names an unknown filter or setting."""
    out = []
    for name in sorted(filters):
        cls = FILTERS.lookup(name)
        settings = settings_from(cls.Settings, filters[name], f"sampler.filters.{name}")
        if settings is not None and cls(settings).active:
            out.append(cls(settings))
    return out


class Filters:
    """The batch filters of a run, as the trainer applies them: those that refill while the batch is drawn, then
    those that choose the groups the update trains on."""

    def __init__(self, filters: Sequence[BatchFilter]) -> None:
        self.refilling = [f for f in filters if f.refills]
        self.choosing = [f for f in filters if not f.refills]

    @property
    def max_rounds(self) -> int:
        """Extra sampling rounds a step may take for the refilling filters (the smallest cap of theirs)."""
        return min(f.max_rounds for f in self.refilling)

    def draw(self, draw: Callable[[int], list[list[Rollout]]], size: int) -> tuple[list[list[Rollout]], int]:
        """A batch of ``size`` groups, and the extra sampling rounds the refilling filters took: ``draw(n)`` draws the
        groups of n new prompts. The groups a refilling filter (DAPO's dynamic sampling) drops are replaced by new
        prompts' until the batch is full or :attr:`max_rounds` are spent, then the batch is filled with the last
        round's dropped groups (their size, and so the step's token budget, is the config's)."""
        rounds = 0
        kept: list[list[Rollout]] = []
        while True:
            groups = draw(size - len(kept))
            if not self.refilling:
                return groups, 0
            flags = self.keep(groups)
            kept.extend(g for g, k in zip(groups, flags, strict=True) if k)
            if len(kept) >= size or rounds >= self.max_rounds:
                dropped = [g for g, k in zip(groups, flags, strict=True) if not k]
                kept.extend(dropped[: max(0, size - len(kept))])
                return kept[:size], rounds
            rounds += 1

    def keep(self, groups: Sequence[Sequence[Rollout]]) -> list[bool]:
        """Per group, whether every refilling filter keeps it."""
        return [all(flags) for flags in zip(*(f.keep(groups) for f in self.refilling), strict=True)]

    def trained(self, groups: list[list[Rollout]]) -> list[list[Rollout]]:
        """The groups every choosing filter keeps (in order)."""
        for f in self.choosing:
            groups = [g for g, k in zip(groups, f.keep(groups), strict=True) if k]
        return groups


def rewards(groups: Sequence[Sequence[Rollout]]) -> list[list[float]]:
    """The rewards of each group's rollouts."""
    return [[r.score.reward for r in g] for g in groups]
