"""The decorator of the release before the plug-in classes, kept for plug-ins written against it (a deprecation: it
goes in the next release). ``register(ADVANTAGES, "name")`` on a function estimator ``fn(rewards, cfg,
on_policy=None)``, ``register(POLICY_LOSSES, "name")`` on a function loss ``fn(logps, old_logps, advantages,
response_mask, cfg, *, generator)``: each is wrapped into a class of its kind with no settings, its flags its
properties. Write a class with ``@register_advantage`` / ``@register_loss`` instead (docs/extending.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from sesa_cli.advantages import ADVANTAGES, Advantage
from sesa_cli.losses import POLICY_LOSSES, PolicyLoss
from sesa_cli.registry import Registry

__all__ = ["register"]

F = TypeVar("F", bound=Callable[..., Any])


def register(
    registry: Registry[Any],
    name: str,
    *,
    zero_at_zero_advantage: bool = False,
    needs_entropies: bool = False,
    penalty_apart: bool = False,
) -> Callable[[F], F]:
    """Deprecated: ``fn`` registered as the release before the plug-in classes did (module docstring); any other
    registry: ``registry.register(name)``."""
    warnings.warn(
        "sesa_cli.algos.register is deprecated: register a class with sesa_cli.advantages.register_advantage or "
        "sesa_cli.losses.register_loss (docs/extending.md)",
        DeprecationWarning,
        stacklevel=2,
    )

    def decorator(fn: F) -> F:
        if registry is ADVANTAGES:

            class FunctionAdvantage(Advantage):
                __doc__ = fn.__doc__

                def compute(self, rewards: Any, outcomes: Any, on_policy: Any) -> Any:
                    extra = {"penalties": outcomes.penalties} if penalty_apart else {}
                    return fn(rewards, self.algo, on_policy=on_policy, **extra)

            FunctionAdvantage.penalty_apart = penalty_apart
            ADVANTAGES.register(name)(FunctionAdvantage)
        elif registry is POLICY_LOSSES:

            class FunctionLoss(PolicyLoss):
                __doc__ = fn.__doc__

                def compute(self, x: Any) -> Any:
                    extra = {"entropies": x.entropies} if needs_entropies else {}
                    return fn(x.logps, x.old_logps, x.advantages, x.response_mask, self.algo, generator=x.generator,
                              **extra)  # fmt: skip

            FunctionLoss.zero_at_zero_advantage = zero_at_zero_advantage
            FunctionLoss.needs_entropies = needs_entropies
            POLICY_LOSSES.register(name)(FunctionLoss)
        else:
            registry.register(name)(fn)
        return fn

    return decorator
