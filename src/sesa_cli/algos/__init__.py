"""The update's machinery: the objective, token aggregations, KL estimators, the off-policy strategies and the
learning-rate schedules (style habit 4, after verl's ``core_algos``).

``algo.aggregation``, ``algo.kl_estimator``, ``algo.off_policy`` and ``optim.lr_schedule`` name keys of
:data:`AGGREGATIONS`, :data:`KL_ESTIMATORS`, :data:`OFF_POLICY` and :data:`LR_SCHEDULES`
(:class:`sesa_cli.registry.Registry` each). The methods, advantage estimators and policy losses with settings of
their own, are plug-in classes: sesa_cli.advantages (``algo.advantage``) and sesa_cli.losses (``algo.loss``);
:func:`compute_advantages` and :func:`compute_loss` build them from the config.
"""

from sesa_cli.advantages import ADVANTAGES, compute_advantages
from sesa_cli.algos.aggregations import masked_mean
from sesa_cli.algos.kl import kl_penalty
from sesa_cli.algos.legacy import register
from sesa_cli.algos.objective import compute_loss
from sesa_cli.algos.off_policy import (
    OffPolicy,
    no_on_policy_groups,
    off_policy_strategy,
    scale_off_policy_negatives,
)
from sesa_cli.algos.registry import AGGREGATIONS, KL_ESTIMATORS, LR_SCHEDULES, OFF_POLICY
from sesa_cli.algos.schedules import lr_scale
from sesa_cli.losses import POLICY_LOSSES

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "LR_SCHEDULES",
    "OFF_POLICY",
    "POLICY_LOSSES",
    "OffPolicy",
    "compute_advantages",
    "compute_loss",
    "kl_penalty",
    "lr_scale",
    "masked_mean",
    "no_on_policy_groups",
    "off_policy_strategy",
    "register",
    "scale_off_policy_negatives",
]
