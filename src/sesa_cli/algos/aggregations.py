"""Token aggregations: how a ``(batch, seq)`` matrix of per-token losses becomes the scalar to backprop.

The names follow verl's ``loss_agg_mode``. They differ in how a sequence's length weighs its tokens, which is what
Dr. GRPO (Liu et al. 2025) and DAPO (Yu et al. 2025) argue about: a per-sequence mean gives every token of a short
answer more weight than a token of a long one.

Masked positions never reach the result, whatever they hold (``torch.where``, not a multiplication, so an ``inf``
in padding cannot turn into NaN), and a sequence whose mask is all zero adds nothing and never divides by zero.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sesa_cli.algos.registry import AGGREGATIONS

__all__ = ["masked_mean", "seq_mean_token_mean", "seq_sum_norm", "token_mean"]


def _masked_sum(values: Tensor, response_mask: Tensor, dim: int | None = None) -> Tensor:
    """Σ values over the valid positions; ``values``, ``response_mask``: (batch, seq)."""
    masked = torch.where(response_mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))
    return masked.sum() if dim is None else masked.sum(dim)


def masked_mean(values: Tensor, response_mask: Tensor) -> Tensor:
    """Mean of ``values`` (batch, seq) over the valid tokens of the whole batch; 0 when no token is valid."""
    return _masked_sum(values, response_mask) / response_mask.sum().clamp(min=1).to(values.dtype)


@AGGREGATIONS.register("token_mean")
def token_mean(values: Tensor, response_mask: Tensor, *, norm_constant: int = 1) -> Tensor:
    """Σ values·mask / Σ mask over the whole batch: every valid token weighs the same (DAPO, Yu et al. 2025).

    values, response_mask: (batch, seq) -> 0-d. ``norm_constant`` is unused.
    """
    return masked_mean(values, response_mask)


@AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(values: Tensor, response_mask: Tensor, *, norm_constant: int = 1) -> Tensor:
    """(1/B') Σ_i (1/|o_i|) Σ_t values[i, t]: the mean over sequences of per-sequence token means, as in the GRPO
    objective (Shao et al. 2024, DeepSeekMath).

    values, response_mask: (batch, seq) -> 0-d. B' counts only sequences with at least one valid token: an empty
    response has no token mean, and counting it as 0 would shrink the loss of the others. ``norm_constant`` is
    unused.
    """
    lengths = response_mask.sum(-1).to(values.dtype)  # (batch,)
    seq_means = _masked_sum(values, response_mask, dim=-1) / lengths.clamp(min=1)  # (batch,)
    return seq_means.sum() / (lengths > 0).sum().clamp(min=1).to(values.dtype)


@AGGREGATIONS.register("seq_sum_norm")
def seq_sum_norm(values: Tensor, response_mask: Tensor, *, norm_constant: int = 1) -> Tensor:
    """Σ values·mask / (batch · norm_constant): token sums over a constant, so no length bias (Dr. GRPO, Liu et al.
    2025, "Understanding R1-Zero-Like Training"; they use the generation budget, ``algo.norm_constant``).

    values, response_mask: (batch, seq) -> 0-d; ``norm_constant`` >= 1.
    """
    if norm_constant < 1:
        raise ValueError(f"seq_sum_norm needs norm_constant >= 1, got {norm_constant} (resolve algo.norm_constant=0)")
    return _masked_sum(values, response_mask) / (max(values.shape[0], 1) * norm_constant)
