"""The training objective: policy loss + KL penalty − entropy bonus, aggregated over tokens, with its metrics."""

from __future__ import annotations

import torch
from torch import Tensor

from sesa_cli.algos.aggregations import masked_mean
from sesa_cli.algos.kl import kl_penalty
from sesa_cli.algos.registry import AGGREGATIONS
from sesa_cli.config import AlgoConfig
from sesa_cli.losses import PolicyLoss, build_loss

__all__ = ["compute_loss"]


def _check_shapes(logps: Tensor, advantages: Tensor, response_mask: Tensor, **others: Tensor | None) -> None:
    if logps.ndim != 2:
        raise ValueError(f"logps must be (batch, seq), got shape {tuple(logps.shape)}")
    batch = logps.shape[0]
    if response_mask.shape != logps.shape:
        raise ValueError(f"response_mask {tuple(response_mask.shape)} must match logps {tuple(logps.shape)}")
    if advantages.shape != (batch,):
        raise ValueError(f"advantages must be (batch,) = ({batch},), got {tuple(advantages.shape)}")
    for name, tensor in others.items():
        expected = (batch,) if name == "seq_weights" else logps.shape
        if tensor is not None and tensor.shape != expected:
            raise ValueError(f"{name} must have shape {tuple(expected)}, got {tuple(tensor.shape)}")


def compute_loss(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: AlgoConfig,
    *,
    ref_logps: Tensor | None = None,
    entropies: Tensor | None = None,
    seq_weights: Tensor | None = None,
    norm_constant: int = 1,
    generator: torch.Generator | None = None,
    loss: PolicyLoss | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The scalar loss of ``cfg`` on one (mini-)batch, and its metrics.

    loss = agg(w · pg) + kl_coef · agg(kl_penalty(logps, ref_logps)) − entropy_coef · agg(entropies),

    with pg the per-token loss ``cfg.loss`` (sesa_cli.losses), agg the aggregation ``cfg.aggregation`` over ``response_mask``, and w
    the per-sequence weight ``seq_weights`` (the truncated importance weight min(c, pi(y|x)/pi(y|ctx)) of
    ``algo.loss_context=is``; it scales the policy-gradient term only).

    Args:
        logps: (batch, seq) log-probs of the response tokens under the policy being trained; carries the gradient.
        old_logps: (batch, seq) log-probs under the policy that drew them (constant).
        advantages: (batch,) one advantage per sequence, broadcast over its tokens (constant).
        response_mask: (batch, seq) 1/True for the tokens that get a loss; all-zero rows are allowed.
        cfg: the algorithm.
        ref_logps: (batch, seq) log-probs under the reference policy (constant). Needed when ``cfg.kl_coef > 0``;
            when given, the ``kl`` metric is reported even if ``kl_coef == 0``.
        entropies: (batch, seq) entropy of the policy at each position; carries the gradient. Needed when
            ``cfg.entropy_coef > 0`` or the loss reads them (``PolicyLoss.needs_entropies``: it gets them
            detached); when given, the ``entropy`` metric is reported.
        seq_weights: (batch,) per-sequence weights of the policy-gradient term (constant).
        norm_constant: the divisor of ``seq_sum_norm`` (``algo.norm_constant`` with 0 already resolved to the
            task's max_new_tokens); ignored by the other aggregations.
        generator: RNG of the random token choice of ``clip_cov``; None seeds one from the batch.
        loss: the policy loss, built once by the caller; None builds ``cfg.loss``.

    Returns:
        The 0-d loss to backprop and float metrics: ``pg`` (aggregated, weighted policy term), ``clip_frac``,
        ``approx_kl`` (k3 estimate of KL(old‖pi), token mean), ``ratio_mean`` (token mean of pi/old), ``kl``
        (token mean of the ``cfg.kl_estimator`` estimate of KL(pi‖ref), if ``ref_logps``), ``entropy`` (token
        mean, if ``entropies``) and the loss's own (its ``metrics``: ``clip_cov_frac``, ...). The statistics of
        ``seq_weights`` are the update's (``loss/is_weight_mean``, over the solution rows of the whole batch).
    """
    _check_shapes(
        logps,
        advantages,
        response_mask,
        old_logps=old_logps,
        ref_logps=ref_logps,
        entropies=entropies,
        seq_weights=seq_weights,
    )
    if cfg.kl_coef > 0 and ref_logps is None:
        raise ValueError("algo.kl_coef > 0 needs ref_logps (the reference policy's log-probs)")
    if cfg.entropy_coef > 0 and entropies is None:
        raise ValueError("algo.entropy_coef > 0 needs entropies")
    policy_loss = loss if loss is not None else build_loss(cfg)
    reads_entropies = policy_loss.needs_entropies
    if reads_entropies and entropies is None:
        raise ValueError(f"algo.loss={policy_loss.name} reads the entropies: pass entropies")
    aggregate = AGGREGATIONS.lookup(cfg.aggregation)

    # Half-precision log-probs lose the small differences the ratio is made of; compute in at least float32.
    dtype = torch.promote_types(logps.dtype, torch.float32)
    logps = logps.to(dtype)
    old_logps = old_logps.detach().to(dtype)
    token_advantages = advantages.detach().to(dtype)[:, None].expand_as(logps)  # (batch, seq)
    mask = response_mask.bool()

    extra = {"entropies": entropies.detach().to(dtype)} if reads_entropies and entropies is not None else {}
    pg_losses, loss_metrics = policy_loss(logps, old_logps, token_advantages, mask, generator=generator, **extra)
    metrics: dict[str, Tensor] = {}
    if seq_weights is not None:
        weights = seq_weights.detach().to(dtype)  # (batch,)
        pg_losses = pg_losses * weights[:, None]
    total = pg_loss = aggregate(pg_losses, mask, norm_constant=norm_constant)

    if ref_logps is not None:
        kl_tokens = kl_penalty(logps, ref_logps.detach().to(dtype), cfg.kl_estimator)  # (batch, seq)
        metrics["kl"] = masked_mean(kl_tokens.detach(), mask)
        if cfg.kl_coef > 0:
            total = total + cfg.kl_coef * aggregate(kl_tokens, mask, norm_constant=norm_constant)
    if entropies is not None:
        metrics["entropy"] = masked_mean(entropies.detach().to(dtype), mask)
        if cfg.entropy_coef > 0:
            total = total - cfg.entropy_coef * aggregate(entropies.to(dtype), mask, norm_constant=norm_constant)

    with torch.no_grad():
        log_ratio = logps.detach() - old_logps
        metrics["pg"] = pg_loss.detach()
        metrics["approx_kl"] = masked_mean(kl_penalty(old_logps, logps.detach(), "k3"), mask)
        metrics["ratio_mean"] = masked_mean(torch.exp(log_ratio.clamp(-20.0, 20.0)), mask)
    metrics.update(loss_metrics)
    return total, {name: float(value) for name, value in metrics.items()}
