"""The advantage protocol (``algo.advantage``): a group's outcomes -> one advantage per rollout.

An estimator is one registered class (:data:`ADVANTAGES`, ``@register_advantage("name")``) in one file of this
package, configured under ``algo.advantage``: a mapping of its name and its settings, ``{name: passk, k: 4}``
(``algo.advantage=passk algo.advantage.k=4`` on the command line; a bare ``algo.advantage=passk`` names it at its
defaults). Its settings are its ``Settings`` dataclass, documented beside its fields; what the group-relative
estimators share (``algo.adv_eps``) stays in the algo section, which it gets too.

It reads a batch of groups' :class:`Outcomes`, each (n_groups, group), row g holding the G rollouts of prompt g: the
rewards (the terms' bonuses added), and what some estimators read besides, the format penalties inside the rewards,
success and the solution keys. Its properties, class variables:

* :attr:`Advantage.penalty_apart`: its transform of a group's rewards would hide a per-sample format penalty (a
  k-subset scored by its best member: an invalid reply among valid failures is never the best), so it gets the
  rewards without the penalties and reads them apart (``Outcomes.penalties``);
* :attr:`Advantage.on_policy_baseline`: it has a group baseline that ``algo.off_policy=on_policy_baseline`` can take
  from the group's on-policy rows (``on_policy``, bool (n_groups, group)).

Rewards are constants: nothing here carries a gradient. Torch-free at import: an estimator imports torch where it
computes, so ``--help`` and the config checks list the estimators without loading it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from sesa_cli.config import AlgoConfig, ConfigError
from sesa_cli.registry import Plugin, Registry, named_settings

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "ADVANTAGES",
    "Advantage",
    "Outcomes",
    "build_advantage",
    "compute_advantages",
    "register_advantage",
    "subset_size_problem",
]


@dataclass(frozen=True)
class Outcomes:
    """What the rollouts of a batch of groups scored, as the advantages read it."""

    rewards: Tensor
    """(n_groups, group) float: each rollout's reward, its format penalty included, plus the loss terms' bonuses."""
    penalties: Tensor | None = None
    """(n_groups, group) float: the format penalty inside each reward (``Score.penalty``, <= 0); None = none."""
    success: Tensor | None = None
    """(n_groups, group) bool: the rollout solved its instance (``Score.success``); None where unknown."""
    keys: Sequence[Sequence[str | None]] | None = None
    """Per group, each rollout's solution key (``Score.key``: equal keys, the same solution; None: no answer)."""


class Advantage(Plugin):
    """An advantage estimator. Subclass it in a file of this package (or a plug-in module of your own) with
    ``@register_advantage("name")``, a ``Settings`` dataclass, and :meth:`compute`."""

    penalty_apart: ClassVar[bool] = False
    """Its transform would hide a per-sample format penalty: :meth:`compute` gets the rewards without the penalties,
    which it reads apart (``outcomes.penalties``); the others get the rewards as they are."""
    on_policy_baseline: ClassVar[bool] = True
    """It has a group baseline that ``algo.off_policy=on_policy_baseline`` can take from on-policy rows alone (the
    config checks refuse the pair otherwise)."""

    def __init__(self, settings: Any, algo: AlgoConfig) -> None:
        self.settings = settings
        self.algo = algo

    def __call__(self, outcomes: Outcomes, on_policy: Tensor | None = None) -> Tensor:
        """Advantages (n_groups, group) of ``outcomes``; ``on_policy`` (bool, (n_groups, group)): take the baseline
        from the on-policy rollouts only (None: the estimator as published)."""
        rewards = outcomes.rewards
        if on_policy is not None and not self.on_policy_baseline:
            raise ValueError(no_baseline_problem(self.name))
        if self.penalty_apart and outcomes.penalties is not None:
            if outcomes.penalties.shape != rewards.shape:
                raise ValueError(
                    f"penalties {tuple(outcomes.penalties.shape)} must match rewards {tuple(rewards.shape)}"
                )
            rewards = rewards - outcomes.penalties.to(rewards.dtype)
        return self.compute(rewards, outcomes, on_policy)

    def compute(self, rewards: Tensor, outcomes: Outcomes, on_policy: Tensor | None) -> Tensor:
        """The estimator: ``rewards`` (n_groups, group) (without the penalties when :attr:`penalty_apart`) ->
        advantages (n_groups, group); ``outcomes`` for what it reads besides."""
        raise NotImplementedError

    def check_group(self, rows: int) -> str | None:
        """Why these settings cannot work on groups of ``rows`` rollouts (a one-line problem), or None."""
        return None


def no_baseline_problem(name: str) -> str:
    """Why ``algo.advantage=<name>`` (an estimator without :attr:`Advantage.on_policy_baseline`) cannot take its
    baseline from on-policy rows."""
    return (
        f"algo.advantage={name} has no group mean to take from on-policy rows: choose another algo.off_policy than "
        "on_policy_baseline"
    )


def subset_size_problem(k: int, rows: int) -> str | None:
    """Why an estimator over the k-subsets of a group (``algo.advantage.k``) cannot work on groups of ``rows``
    rollouts, or None."""
    if k <= rows:
        return None
    return f"algo.advantage.k={k} must be <= the rollouts of a group ({rows}, sampler.group_size): its subsets take k"


ADVANTAGES: Registry[type[Advantage]] = Registry("algo.advantage")
"""``algo.advantage`` names -> estimator classes."""


def register_advantage(name: str) -> Callable[[type[Advantage]], type[Advantage]]:
    """Class decorator: make an estimator available as ``algo.advantage=<name>``."""
    return ADVANTAGES.register(name)


def build_advantage(algo: AlgoConfig) -> Advantage:
    """The estimator ``algo.advantage`` names, with its settings; a ConfigError names an unknown estimator or
    setting, and a pairing the estimator refuses (``algo.off_policy=on_policy_baseline`` without a baseline)."""
    cls, settings = named_settings(ADVANTAGES, algo.advantage, "algo.advantage")
    assert issubclass(cls, Advantage)  # the registry holds estimators
    if algo.off_policy == "on_policy_baseline" and not cls.on_policy_baseline:
        raise ConfigError(no_baseline_problem(cls.name))
    return cls(settings, algo)


def compute_advantages(
    rewards: Tensor | Outcomes, algo: AlgoConfig, on_policy: Tensor | None = None, penalties: Tensor | None = None
) -> Tensor:
    """Advantages (n_groups, group) of the estimator ``algo.advantage`` on ``rewards``, (n_groups, group), or on a
    batch's :class:`Outcomes` (``penalties``: the format penalties inside the rewards, when ``rewards`` is a
    tensor)."""
    outcomes = rewards if isinstance(rewards, Outcomes) else Outcomes(rewards, penalties)
    return build_advantage(algo)(outcomes, on_policy)
