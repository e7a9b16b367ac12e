"""Every registry name a command's config holds that only torch's registries know, checked before any model work.

The sampler (``sampler.name``), the aggregation and KL estimator (``algo.*``), the off-policy strategy
(``algo.off_policy``) and the learning-rate schedule (``optim.lr_schedule``) live in registries whose modules import
torch, so they are looked up here, in the command, after torch is imported and before the model is loaded (an unknown
name: one line naming the valid ones, exit 2). The torch-free plug-ins (advantages, policy losses, loss terms, batch
filters, loggers) are checked earlier, with the overrides, and again here (sesa_cli.plugins.settings_problems).
"""

from __future__ import annotations

from typing import Any

from sesa_cli import algos
from sesa_cli.config import raise_if
from sesa_cli.plugins import settings_problems
from sesa_cli.rollout.samplers import SAMPLERS


def check_registered(config: Any) -> None:
    """A ConfigError naming every registry name of ``config`` (a typed command config) that is not registered."""
    names: list[tuple[Any, str]] = [(SAMPLERS, config.sampler.name)]
    if hasattr(config, "algo"):
        a = config.algo
        names += [(algos.AGGREGATIONS, a.aggregation), (algos.KL_ESTIMATORS, a.kl_estimator),
                  (algos.OFF_POLICY, a.off_policy), (algos.LR_SCHEDULES, config.optim.lr_schedule)]  # fmt: skip
    problems = settings_problems(config)
    for registry, name in names:
        if name not in registry:
            problems.append(f"unknown {registry.kind} {name!r}; valid: {', '.join(sorted(registry))}")
    raise_if(problems)
