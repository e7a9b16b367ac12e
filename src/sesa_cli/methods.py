"""Every kind of method sesa registers, one registry each, and the checks of a config's choice of them.

| kind | registry | configured by |
|---|---|---|
| advantage estimator | sesa_cli.advantages.ADVANTAGES | ``algo.advantage``: ``{name, <settings>}`` |
| policy loss | sesa_cli.losses.POLICY_LOSSES | ``algo.loss``: ``{name, <settings>}`` |
| loss term | sesa_cli.terms.TERMS | ``algo.terms.<name>.*`` |
| batch filter | sesa_cli.rollout.filters.FILTERS | ``sampler.filters.<name>.*`` |

Each is a :class:`sesa_cli.registry.Plugin` (its settings, properties and metrics declared on its class); importing
this module registers sesa's own, and a plug-in module registers its own the same way. The samplers
(sesa_cli.rollout.samplers.SAMPLERS) are a registry of the same kind, configured by the ``sampler`` section, and load
the model's libraries, so they are not imported here. Torch-free: ``--help`` and the config checks read it.
"""

from __future__ import annotations

from typing import Any

from sesa_cli.advantages import ADVANTAGES, build_advantage
from sesa_cli.config import ConfigError
from sesa_cli.losses import POLICY_LOSSES, build_loss
from sesa_cli.registry import Registry
from sesa_cli.rollout.filters import FILTERS
from sesa_cli.terms import TERMS

__all__ = ["KINDS", "check_methods", "group_rows"]

KINDS: dict[str, Registry[Any]] = {
    "algo.advantage": ADVANTAGES,
    "algo.loss": POLICY_LOSSES,
    "algo.terms": TERMS,
    "sampler.filters": FILTERS,
}
"""The config key of each kind of method -> its registry."""


def group_rows(config: Any) -> int:
    """The most rollouts a group of ``config`` (a typed train config) can have: G, times ``solutions_per_sketch``
    with sketches."""
    return int(config.sampler.group_size * config.sampler.solutions_per_sketch)


def check_methods(config: Any) -> None:
    """A ConfigError for the advantage and policy loss a typed train config chooses: an unknown name or setting
    (naming the valid ones), or settings that cannot work on its groups (``algo.advantage.k`` above the group)."""
    advantage = build_advantage(config.algo)
    build_loss(config.algo)
    problem = advantage.check_group(group_rows(config))
    if problem:
        raise ConfigError(problem)
