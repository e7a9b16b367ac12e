"""The registries of RL variants: each maps a config name to a pure function (style habit 4, after verl ``core_algos``).

One name per concept: ``algo.advantage=rloo`` in YAML is the key ``"rloo"`` in :data:`ADVANTAGES`. A variant is
added with the :func:`register` decorator next to its definition; registering a name twice raises, and looking up
an unknown name raises :class:`~sesa_cli.config.ConfigError` listing the valid ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sesa_cli.config import ConfigError

__all__ = ["ADVANTAGES", "AGGREGATIONS", "KL_ESTIMATORS", "POLICY_LOSSES", "get", "register"]

F = TypeVar("F", bound=Callable[..., Any])

ADVANTAGES: dict[str, Callable[..., Any]] = {}
"""``algo.advantage``: ``fn(rewards (n_groups, group), cfg, on_policy=None) -> advantages (n_groups, group)``; the
optional bool ``on_policy`` (n_groups, group) restricts the baseline to on-policy rollouts (see advantages.py)."""
POLICY_LOSSES: dict[str, Callable[..., Any]] = {}
"""``algo.loss``: ``fn(logps, old_logps, advantages, response_mask, cfg, *, generator) -> (pg_losses, metrics)``,
all tensors ``(batch, seq)``; ``pg_losses`` is per token, ``metrics`` maps names to 0-d tensors."""
AGGREGATIONS: dict[str, Callable[..., Any]] = {}
"""``algo.aggregation``: ``fn(values (batch, seq), response_mask (batch, seq), *, norm_constant) -> 0-d tensor``."""
KL_ESTIMATORS: dict[str, Callable[..., Any]] = {}
"""``algo.kl_estimator``: ``fn(logps, ref_logps) -> per-token estimate``, same shape as the inputs."""


def register(registry: dict[str, Callable[..., Any]], name: str) -> Callable[[F], F]:
    """Decorator adding a function to ``registry`` under ``name``; a name already taken raises ``ValueError``."""

    def decorator(fn: F) -> F:
        if name in registry:
            raise ValueError(f"{name!r} registered twice (already {registry[name].__qualname__})")
        registry[name] = fn
        return fn

    return decorator


def get(registry: dict[str, Callable[..., Any]], name: str, kind: str) -> Callable[..., Any]:
    """``registry[name]``; an unknown name raises ``ConfigError`` naming ``kind`` (e.g. ``algo.loss``) and the
    valid names."""
    try:
        return registry[name]
    except KeyError:
        raise ConfigError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(registry))}") from None
