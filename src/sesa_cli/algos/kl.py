"""Per-token policy losses and KL estimators.

A policy loss maps ``(logps, old_logps, advantages, response_mask)``, all (batch, seq), to a per-token loss
(batch, seq) plus a few 0-d metric tensors; :func:`sesa_cli.algos.compute_loss` then weights and aggregates it.
``logps`` carries the gradient; ``old_logps`` (the policy that drew the rollouts) and ``advantages`` are constants.
The ratio is r = exp(logps − old_logps); its log is clamped to ±20 so that garbage in padded positions (which the
aggregation drops) cannot overflow into an ``inf`` whose backward would be NaN.
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

from sesa_cli.algos.aggregations import masked_mean
from sesa_cli.algos.registry import KL_ESTIMATORS, POLICY_LOSSES, get, register
from sesa_cli.config import AlgoConfig

__all__ = ["clip_cov", "kl_cov", "kl_penalty", "ppo_clip"]

_MAX_LOG_RATIO = 20.0


# ------------------------------------------------------------------------------------------------- KL estimators
# Schulman, "Approximating KL Divergence" (2020, http://joschu.net/blog/kl-approx.html): with tokens drawn from
# pi and log r = ref_logps − logps, k1 = −log r, k2 = (log r)²/2 and k3 = (r − 1) − log r all estimate KL(pi‖ref);
# k1 is unbiased but can be negative, k3 is unbiased and never negative (GRPO's choice), k2 is biased, low variance.
@register(KL_ESTIMATORS, "k1")
def k1(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """logps − ref_logps, per token (any shape)."""
    return logps - ref_logps


@register(KL_ESTIMATORS, "k2")
def k2(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """½ (logps − ref_logps)², per token (any shape)."""
    return 0.5 * (logps - ref_logps).square()


@register(KL_ESTIMATORS, "k3")
def k3(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """exp(ref − logp) − (ref − logp) − 1 ≥ 0, per token (any shape); the log ratio is clamped to ±20."""
    log_r = (ref_logps - logps).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return torch.exp(log_r) - log_r - 1


def kl_penalty(logps: Tensor, ref_logps: Tensor, estimator: str) -> Tensor:
    """Per-token estimate of KL(pi‖ref) from tokens drawn from pi with the estimator ``k1``, ``k2`` or ``k3``.

    logps, ref_logps: (batch, seq) -> (batch, seq). Gradients flow into both arguments; detach ``ref_logps``
    yourself if it is a constant (:func:`~sesa_cli.algos.compute_loss` does).
    """
    kl: Tensor = get(KL_ESTIMATORS, estimator, "algo.kl_estimator")(logps, ref_logps)
    return kl


# ------------------------------------------------------------------------------------------------------ helpers
def _log_ratio(logps: Tensor, old_logps: Tensor) -> Tensor:
    """log r = logps − old_logps, clamped to ±20; (batch, seq)."""
    return (logps - old_logps).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)


def _clipped_surrogate(logps: Tensor, old_logps: Tensor, advantages: Tensor, cfg: AlgoConfig) -> tuple[Tensor, Tensor]:
    """PPO's −min(r·A, clip(r, 1 − clip_low, 1 + clip_high)·A) per token and the bool mask of tokens where the
    clipped term is the one taken (its gradient is zero there). All (batch, seq)."""
    ratio = torch.exp(_log_ratio(logps, old_logps))
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def _centered_cov(logps: Tensor, advantages: Tensor, response_mask: Tensor) -> Tensor:
    """Per-token covariance term (A − mean A)·(logp − mean logp), means over the valid tokens of the batch.

    All (batch, seq); detached (it only selects tokens). Cui et al. 2025 show that the covariance of log-prob and
    advantage drives the change of the policy entropy: tokens with a large positive term are what collapse it.
    """
    logps = logps.detach()
    return (advantages - masked_mean(advantages, response_mask)) * (logps - masked_mean(logps, response_mask))


def _seeded_generator(*tensors: Tensor) -> torch.Generator:
    """A CPU generator seeded from the bytes of ``tensors``: the same batch picks the same tokens (reruns and
    repeated epochs over one batch agree), different batches pick differently, and the global RNG is untouched."""
    digest = hashlib.blake2b(digest_size=8)
    for tensor in tensors:
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return torch.Generator().manual_seed(int.from_bytes(digest.digest(), "little") & (2**63 - 1))


def _n_selected(ratio: float, n_valid: int) -> int:
    """Tokens a covariance method acts on: ratio·N_valid rounded down, but at least one (as in the reference
    implementation, so that small batches are not a no-op) and never more than exist."""
    return min(max(1, int(ratio * n_valid)), n_valid)


# ------------------------------------------------------------------------------------------------- policy losses
@register(POLICY_LOSSES, "ppo_clip", zero_at_zero_advantage=True)
def ppo_clip(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: AlgoConfig,
    *,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped surrogate (Schulman et al. 2017) with DAPO's decoupled clip range (Yu et al. 2025):
    −min(r·A, clip(r, 1 − clip_low, 1 + clip_high)·A) per token.

    All inputs (batch, seq) -> per-token loss (batch, seq), metrics ``clip_frac`` (valid tokens whose clipped term
    is taken). ``generator`` is unused. A row with A = 0 has a term of exactly 0 whatever its ratio, independent of
    the other rows (registered ``zero_at_zero_advantage``).
    """
    pg_losses, clipped = _clipped_surrogate(logps, old_logps, advantages, cfg)
    return pg_losses, {"clip_frac": masked_mean(clipped.to(pg_losses.dtype), response_mask)}


@register(POLICY_LOSSES, "clip_cov")
def clip_cov(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: AlgoConfig,
    *,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models"):
    the PPO-clip loss, except that a few tokens with a high covariance between log-prob and advantage lose their
    gradient, which keeps the policy entropy from collapsing.

    Candidates are the valid tokens not already clipped by PPO whose centered covariance
    (A − mean A)·(logp − mean logp) lies in [clip_cov_lb, clip_cov_ub]; max(1, ⌊clip_cov_ratio · N_valid⌋) of
    them are drawn uniformly without replacement (``generator``, or one seeded from ``old_logps`` and
    ``advantages``) and their loss term is set to 0.

    All inputs (batch, seq) -> per-token loss (batch, seq), metrics ``clip_frac`` (PPO clipping) and
    ``clip_cov_frac`` (detached tokens / valid tokens). Not ``zero_at_zero_advantage``: a row with A = 0 adds 0, but
    its log-probs enter the batch means of the covariance, and so which tokens of the other rows are detached.
    """
    pg_losses, clipped = _clipped_surrogate(logps, old_logps, advantages, cfg)
    valid = response_mask.bool()
    cov = _centered_cov(logps, advantages, valid)
    window = valid & ~clipped & (cov >= cfg.clip_cov_lb) & (cov <= cfg.clip_cov_ub)
    candidates = window.flatten().nonzero().squeeze(1)  # flat indices into (batch * seq,)
    n_pick = min(_n_selected(cfg.clip_cov_ratio, int(valid.sum())), candidates.numel())
    if generator is None:
        generator = _seeded_generator(old_logps, advantages)
    order = torch.randperm(candidates.numel(), generator=generator, device="cpu").to(candidates.device)
    detach_mask = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
    detach_mask[candidates[order[:n_pick]]] = True
    detach_mask = detach_mask.view_as(valid)
    pg_losses = pg_losses.masked_fill(detach_mask, 0.0)
    dtype = pg_losses.dtype
    return pg_losses, {
        "clip_frac": masked_mean(clipped.to(dtype), valid),
        "clip_cov_frac": masked_mean(detach_mask.to(dtype), valid),
    }


@register(POLICY_LOSSES, "kl_cov")
def kl_cov(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: AlgoConfig,
    *,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """KL-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models"):
    the unclipped policy gradient −A·r, plus kl_cov_coef·|logp − old_logp| on the max(1, ⌊kl_cov_ratio·N_valid⌋)
    valid tokens with the largest centered covariance (A − mean A)·(logp − mean logp).

    As in the paper there is no ratio clipping; the penalty is what keeps the high-covariance tokens near the
    behaviour policy. It is zero, with zero gradient, while logps == old_logps, i.e. on the first update of a
    batch: it acts from the second mini-batch or epoch on (``algo.minibatches``, ``algo.ppo_epochs``).

    All inputs (batch, seq) -> per-token loss (batch, seq), metrics ``clip_frac`` (always 0) and ``kl_cov_frac``
    (penalised tokens / valid tokens). ``generator`` is unused (the selection is a top-k). Not
    ``zero_at_zero_advantage``: the penalty acts on a row whatever its advantage.
    """
    log_ratio = _log_ratio(logps, old_logps)
    pg_losses = -advantages * torch.exp(log_ratio)
    valid = response_mask.bool()
    cov = _centered_cov(logps, advantages, valid).masked_fill(~valid, -torch.inf)
    n_pick = _n_selected(cfg.kl_cov_ratio, int(valid.sum()))
    penalised_mask = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
    penalised_mask[torch.topk(cov.flatten(), n_pick).indices] = True
    penalised_mask = penalised_mask.view_as(valid)
    pg_losses = torch.where(penalised_mask, pg_losses + cfg.kl_cov_coef * log_ratio.abs(), pg_losses)
    dtype = pg_losses.dtype
    return pg_losses, {
        "clip_frac": torch.zeros((), dtype=dtype, device=pg_losses.device),
        "kl_cov_frac": masked_mean(penalised_mask.to(dtype), valid),
    }
