"""The registries of RL variants: each maps a config name to a pure function (style habit 4, after verl ``core_algos``).

One name per concept: ``algo.advantage=rloo`` in YAML is the key ``"rloo"`` in :data:`ADVANTAGES`. A variant is
added with the :func:`register` decorator next to its definition; registering a name twice raises, and looking up
an unknown name raises :class:`~sesa_cli.config.ConfigError` listing the valid ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sesa_cli.config import ConfigError
from sesa_cli.registry import Registry

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "LR_SCHEDULES",
    "NEEDS_ENTROPIES",
    "OFF_POLICY",
    "PENALTY_APART",
    "POLICY_LOSSES",
    "ZERO_AT_ZERO_ADVANTAGE",
    "get",
    "needs_entropies",
    "register",
    "zero_at_zero_advantage",
]

F = TypeVar("F", bound=Callable[..., Any])

ADVANTAGES: Registry[Callable[..., Any]] = Registry("algo.advantage")
"""``algo.advantage``: ``fn(rewards (n_groups, group), cfg, on_policy=None) -> advantages (n_groups, group)``; the
optional bool ``on_policy`` (n_groups, group) restricts the baseline to on-policy rollouts (see advantages.py)."""
POLICY_LOSSES: Registry[Callable[..., Any]] = Registry("algo.loss")
"""``algo.loss``: ``fn(logps, old_logps, advantages, response_mask, cfg, *, generator) -> (pg_losses, metrics)``,
all tensors ``(batch, seq)``; ``pg_losses`` is per token, ``metrics`` maps names to 0-d tensors."""
ZERO_AT_ZERO_ADVANTAGE: set[str] = set()
"""The names in :data:`POLICY_LOSSES` whose rows with advantage exactly 0 add exactly 0 to the loss and its gradient,
whatever their log-probs, and leave the other rows' terms unchanged (declared with ``register(...,
zero_at_zero_advantage=True)``). The trainer skips the forward pass of such rows when no KL or entropy term needs it
(every row of a zero-std group); they still count in the aggregation."""
PENALTY_APART: set[str] = set()
"""The names in :data:`ADVANTAGES` whose transform of a group's rewards would hide a per-sample format penalty (a
k-subset scored by its best member: an invalid reply among valid failures is never the best): they take the
rewards without it and the penalties apart, ``fn(rewards, cfg, on_policy=None, penalties=None)`` (declared with
``register(..., penalty_apart=True)``; sesa_cli.algos.passk). The others get the rewards, penalties included."""
NEEDS_ENTROPIES: set[str] = set()
"""The names in :data:`POLICY_LOSSES` that read the policy's per-token entropies (a loss that acts on the
high-entropy tokens only, say; declared with ``register(..., needs_entropies=True)``): the update computes them for
every row, and the loss gets them as ``entropies`` (batch, seq), detached."""
AGGREGATIONS: Registry[Callable[..., Any]] = Registry("algo.aggregation")
"""``algo.aggregation``: ``fn(values (batch, seq), response_mask (batch, seq), *, norm_constant) -> 0-d tensor``."""
KL_ESTIMATORS: Registry[Callable[..., Any]] = Registry("algo.kl_estimator")
"""``algo.kl_estimator``: ``fn(logps, ref_logps) -> per-token estimate``, same shape as the inputs."""
LR_SCHEDULES: Registry[Callable[..., Any]] = Registry("optim.lr_schedule")
"""``optim.lr_schedule``: ``fn(done) -> multiplier`` of the learning rate after the warm-up, ``done`` in [0, 1] the
fraction of the post-warm-up steps taken (see schedules.py)."""
OFF_POLICY: Registry[Callable[..., Any]] = Registry("algo.off_policy")
"""``algo.off_policy``: a subclass of :class:`sesa_cli.algos.off_policy.OffPolicy`, called with the
:class:`~sesa_cli.config.AlgoConfig` and the data-parallel replicas' gather to give the strategy (its baseline,
importance-weight need, per-row treatment and their statistics; see off_policy.py)."""


def register(
    registry: dict[str, Callable[..., Any]],
    name: str,
    *,
    zero_at_zero_advantage: bool = False,
    needs_entropies: bool = False,
    penalty_apart: bool = False,
) -> Callable[[F], F]:
    """Decorator adding a function to ``registry`` under ``name``; a name already taken raises ``ValueError``.
    ``zero_at_zero_advantage`` and ``needs_entropies`` (policy losses only) declare the properties of
    :data:`ZERO_AT_ZERO_ADVANTAGE` and :data:`NEEDS_ENTROPIES`, ``penalty_apart`` (advantages only) that of
    :data:`PENALTY_APART`."""
    if (zero_at_zero_advantage or needs_entropies) and registry is not POLICY_LOSSES:
        raise ValueError("zero_at_zero_advantage and needs_entropies describe policy losses only")
    if penalty_apart and registry is not ADVANTAGES:
        raise ValueError("penalty_apart describes advantages only")

    def decorator(fn: F) -> F:
        if name in registry:
            raise ValueError(f"{name!r} registered twice (already {registry[name].__qualname__})")
        registry[name] = fn
        if zero_at_zero_advantage:
            ZERO_AT_ZERO_ADVANTAGE.add(name)
        if needs_entropies:
            NEEDS_ENTROPIES.add(name)
        if penalty_apart:
            PENALTY_APART.add(name)
        return fn

    return decorator


def get(registry: dict[str, Callable[..., Any]], name: str, kind: str) -> Callable[..., Any]:
    """``registry[name]``; an unknown name raises ``ConfigError`` naming ``kind`` (e.g. ``algo.loss``) and the
    valid names."""
    try:
        return registry[name]
    except KeyError:
        raise ConfigError(f"unknown {kind} {name!r}; valid: {', '.join(sorted(registry))}") from None


def needs_entropies(loss: str) -> bool:
    """Whether the policy loss ``loss`` reads the per-token entropies (:data:`NEEDS_ENTROPIES`); an unknown name
    raises ``ConfigError``."""
    get(POLICY_LOSSES, loss, "algo.loss")
    return loss in NEEDS_ENTROPIES


def zero_at_zero_advantage(loss: str) -> bool:
    """Whether the policy loss ``loss`` (``algo.loss``) is exactly zero, with zero gradient, on a row of advantage 0
    (:data:`ZERO_AT_ZERO_ADVANTAGE`); an unknown name raises ``ConfigError``."""
    get(POLICY_LOSSES, loss, "algo.loss")
    return loss in ZERO_AT_ZERO_ADVANTAGE
