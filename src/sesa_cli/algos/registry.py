"""The registries of the update's machinery: token aggregations, KL estimators, learning-rate schedules and the
off-policy strategies, each a :class:`sesa_cli.registry.Registry` (``AGGREGATIONS.register("name")`` next to a
definition; ``AGGREGATIONS.lookup(name)``: an unknown name is a ConfigError listing the valid ones).

The methods (advantage estimators, policy losses) are plug-in classes with settings of their own:
sesa_cli.advantages and sesa_cli.losses (the release before them registered functions: sesa_cli.algos.legacy).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sesa_cli.registry import Registry

__all__ = ["AGGREGATIONS", "KL_ESTIMATORS", "LR_SCHEDULES", "OFF_POLICY"]

AGGREGATIONS: Registry[Callable[..., Any]] = Registry("algo.aggregation")
"""``algo.aggregation``: ``fn(values (batch, seq), response_mask (batch, seq), *, norm_constant) -> 0-d tensor``."""
KL_ESTIMATORS: Registry[Callable[..., Any]] = Registry("algo.kl_estimator")
"""``algo.kl_estimator``: ``fn(logps, ref_logps) -> per-token estimate``, same shape as the inputs."""
LR_SCHEDULES: Registry[Callable[..., Any]] = Registry("optim.lr_schedule")
"""``optim.lr_schedule``: ``fn(done) -> multiplier`` of the learning rate after the warm-up, ``done`` in [0, 1] the
fraction of the post-warm-up steps taken (see schedules.py)."""
OFF_POLICY: Registry[Callable[..., Any]] = Registry("algo.off_policy")
"""``algo.off_policy``: a subclass of :class:`sesa_cli.algos.off_policy.OffPolicy`, called with the
:class:`~sesa_cli.config.AlgoConfig`, the advantage estimator and the data-parallel replicas' gather to give the
strategy (its baseline, importance-weight need, per-row treatment and their statistics; see off_policy.py)."""
