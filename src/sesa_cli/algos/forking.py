"""``algo.loss=forking_tokens``: the policy gradient on the high-entropy "forking" tokens only.

Wang et al. 2025, "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement Learning for
LLM Reasoning" (arXiv 2506.01939): the PPO-clip loss of :func:`sesa_cli.algos.losses.ppo_clip`, kept on the tokens
whose policy entropy is among the top ρ = ``algo.top_entropy_quantile`` of the batch's valid tokens (the paper's
ρ = 0.2) and 0 on the others. Written as TRL's ``GRPOConfig.top_entropy_quantile`` computes it
(``get_high_entropy_mask``): the threshold is the (1 − ρ) quantile (linear interpolation, ``torch.quantile``) of the
entropies of the valid tokens of the (mini-)batch the loss sees, a token is kept when its entropy is >= the
threshold, and the masked tokens still count in the aggregation's denominator (their loss is 0, as TRL multiplies
the per-token loss by the mask). ρ = 1 keeps every token: exactly ``ppo_clip``.

The choice where the paper is silent, kept here: the quantile is over the mini-batch the loss is computed on (TRL's
unit, and with ``algo.minibatches=1`` the whole batch, the paper's). The entropies are the learner's, of the
tempered distribution the rollouts were drawn from, detached (sesa_cli.algos.NEEDS_ENTROPIES).
"""

from __future__ import annotations

import torch
from torch import Tensor

from sesa_cli.algos.aggregations import masked_mean
from sesa_cli.algos.losses import ppo_clip
from sesa_cli.algos.registry import POLICY_LOSSES, register
from sesa_cli.config import AlgoConfig

__all__ = ["forking_tokens", "high_entropy_mask"]


def high_entropy_mask(entropies: Tensor, response_mask: Tensor, rho: float) -> Tensor:
    """bool (batch, seq): the valid tokens whose entropy is >= the (1 − ρ) quantile of the valid tokens' entropies
    (TRL's ``get_high_entropy_mask``); none when there is no valid token. entropies, response_mask: (batch, seq)."""
    valid = response_mask.bool()
    values = entropies[valid].float()
    if values.numel() == 0:
        return torch.zeros_like(valid)
    threshold = torch.quantile(values, 1.0 - rho)
    return valid & (entropies >= threshold.to(entropies.dtype))


@register(POLICY_LOSSES, "forking_tokens", needs_entropies=True)
def forking_tokens(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    cfg: AlgoConfig,
    *,
    entropies: Tensor,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO-clip on the top-ρ entropy tokens, ρ = ``algo.top_entropy_quantile`` (arXiv 2506.01939; module docstring).

    All tensors (batch, seq) -> per-token loss (batch, seq), metrics ``clip_frac`` and ``forking_frac`` (kept
    tokens / valid tokens). ``generator`` is unused. Not ``zero_at_zero_advantage``: every row's entropies set the
    threshold of the others."""
    pg_losses, metrics = ppo_clip(logps, old_logps, advantages, response_mask, cfg)
    kept = high_entropy_mask(entropies, response_mask, cfg.top_entropy_quantile)
    metrics["forking_frac"] = masked_mean(kept.to(pg_losses.dtype), response_mask)
    return pg_losses.masked_fill(~kept, 0.0), metrics
