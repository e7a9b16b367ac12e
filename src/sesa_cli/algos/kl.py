"""KL estimators (``algo.kl_estimator``): per-token estimates of KL(pi‖ref) from tokens drawn from pi.

The policy losses are sesa_cli.losses.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sesa_cli.algos.registry import KL_ESTIMATORS
from sesa_cli.losses.base import MAX_LOG_RATIO

__all__ = ["k1", "k2", "k3", "kl_penalty"]


# Schulman, "Approximating KL Divergence" (2020, http://joschu.net/blog/kl-approx.html): with tokens drawn from
# pi and log r = ref_logps − logps, k1 = −log r, k2 = (log r)²/2 and k3 = (r − 1) − log r all estimate KL(pi‖ref);
# k1 is unbiased but can be negative, k3 is unbiased and never negative (GRPO's choice), k2 is biased, low variance.
@KL_ESTIMATORS.register("k1")
def k1(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """logps − ref_logps, per token (any shape)."""
    return logps - ref_logps


@KL_ESTIMATORS.register("k2")
def k2(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """½ (logps − ref_logps)², per token (any shape)."""
    return 0.5 * (logps - ref_logps).square()


@KL_ESTIMATORS.register("k3")
def k3(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """exp(ref − logp) − (ref − logp) − 1 ≥ 0, per token (any shape); the log ratio is clamped to ±20."""
    log_r = (ref_logps - logps).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    return torch.exp(log_r) - log_r - 1


def kl_penalty(logps: Tensor, ref_logps: Tensor, estimator: str) -> Tensor:
    """Per-token estimate of KL(pi‖ref) from tokens drawn from pi with the estimator ``k1``, ``k2`` or ``k3``.

    logps, ref_logps: (batch, seq) -> (batch, seq). Gradients flow into both arguments; detach ``ref_logps``
    yourself if it is a constant (:func:`~sesa_cli.algos.compute_loss` does).
    """
    kl: Tensor = KL_ESTIMATORS.lookup(estimator)(logps, ref_logps)
    return kl
