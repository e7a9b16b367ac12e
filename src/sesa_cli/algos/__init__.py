"""Advantages and losses as pure functions in registries (style habit 4, after verl's ``core_algos``).

``algo.advantage``, ``algo.loss`` and ``algo.aggregation`` name keys of :data:`ADVANTAGES`, :data:`POLICY_LOSSES`
and :data:`AGGREGATIONS`; :func:`compute_advantages` and :func:`compute_loss` look them up. Each variant's
docstring cites the paper it comes from. To add one, decorate a function with
``@register(POLICY_LOSSES, "my_loss")`` (same signature as its neighbours) and add ``conf/algo/my_algo.yaml``.
Learning-rate schedules (:data:`LR_SCHEDULES`, :func:`lr_scale`) and the off-policy strategies (:data:`OFF_POLICY`,
``algo.off_policy``, :func:`off_policy_strategy`) are registries of the same kind.
"""

from sesa_cli.algos.advantages import (
    compute_advantages,
    no_on_policy_groups,
    scale_off_policy_negatives,
)
from sesa_cli.algos.aggregations import masked_mean
from sesa_cli.algos.losses import kl_penalty
from sesa_cli.algos.objective import compute_loss
from sesa_cli.algos.off_policy import OffPolicy, off_policy_strategy
from sesa_cli.algos.registry import (
    ADVANTAGES,
    AGGREGATIONS,
    KL_ESTIMATORS,
    LR_SCHEDULES,
    NEEDS_ENTROPIES,
    OFF_POLICY,
    POLICY_LOSSES,
    ZERO_AT_ZERO_ADVANTAGE,
    get,
    needs_entropies,
    register,
    zero_at_zero_advantage,
)
from sesa_cli.algos.schedules import lr_scale

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "LR_SCHEDULES",
    "NEEDS_ENTROPIES",
    "OFF_POLICY",
    "POLICY_LOSSES",
    "ZERO_AT_ZERO_ADVANTAGE",
    "OffPolicy",
    "compute_advantages",
    "compute_loss",
    "get",
    "kl_penalty",
    "lr_scale",
    "masked_mean",
    "needs_entropies",
    "no_on_policy_groups",
    "off_policy_strategy",
    "register",
    "scale_off_policy_negatives",
    "zero_at_zero_advantage",
]
