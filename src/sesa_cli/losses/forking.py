"""``algo.loss=forking_tokens``: the policy gradient on the high-entropy "forking" tokens only.

Wang et al. 2025, "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement Learning for
LLM Reasoning" (arXiv 2506.01939): the PPO-clip loss of sesa_cli.losses.ppo_clip, kept on the tokens whose policy
entropy is among the top ρ = ``algo.loss.rho`` of the batch's valid tokens (the paper's ρ = 0.2) and 0 on the others.
Written as TRL's ``GRPOConfig.top_entropy_quantile`` computes it (``get_high_entropy_mask``): the threshold is the
(1 − ρ) quantile (linear interpolation, ``torch.quantile``) of the entropies of the valid tokens of the (mini-)batch
the loss sees, a token is kept when its entropy is >= the threshold, and the masked tokens still count in the
aggregation's denominator (their loss is 0, as TRL multiplies the per-token loss by the mask). ρ = 1 keeps every
token: exactly ``ppo_clip``.

The choice where the paper is silent, kept here: the quantile is over the mini-batch the loss is computed on (TRL's
unit, and with ``algo.minibatches=1`` the whole batch, the paper's). The entropies are the learner's, of the
tempered distribution the rollouts were drawn from, detached (``needs_entropies``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sesa_cli.config import ConfigError
from sesa_cli.losses.base import PolicyLoss, TokenInputs, clipped_surrogate, register_loss
from sesa_cli.metric_keys import MetricKey

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["ForkingSettings", "ForkingTokens", "high_entropy_mask"]


def high_entropy_mask(entropies: Tensor, response_mask: Tensor, rho: float) -> Tensor:
    """bool (batch, seq): the valid tokens whose entropy is >= the (1 − ρ) quantile of the valid tokens' entropies
    (TRL's ``get_high_entropy_mask``); none when there is no valid token. entropies, response_mask: (batch, seq)."""
    import torch

    valid = response_mask.bool()
    values = entropies[valid].float()
    if values.numel() == 0:
        return torch.zeros_like(valid)
    threshold = torch.quantile(values, 1.0 - rho)
    return valid & (entropies >= threshold.to(entropies.dtype))


@dataclass
class ForkingSettings:
    """``algo.loss`` of ``forking_tokens``."""

    rho: float = 0.2
    """ρ, the share of the (mini-)batch's valid tokens, by entropy from the top, that get a policy gradient, in
    (0, 1] (the paper's 0.2; 1 = every token, ``ppo_clip``; TRL's ``top_entropy_quantile``)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rho) and 0 < self.rho <= 1):
            raise ConfigError(f"rho={self.rho} must be in (0, 1]")


@register_loss("forking_tokens")
class ForkingTokens(PolicyLoss):
    """PPO-clip on the top-ρ entropy tokens of the batch only, ρ = ``algo.loss.rho`` (arXiv 2506.01939).

    Metrics ``clip_frac`` and ``forking_frac`` (kept tokens / valid tokens). Not ``zero_at_zero_advantage``: every
    row's entropies set the threshold of the others."""

    Settings = ForkingSettings
    needs_entropies = True
    metrics = (
        MetricKey(
            "loss/forking_frac",
            "forking_tokens: share of the valid tokens in the top algo.loss.rho by entropy (they get the policy "
            "gradient).",
            better="",
        ),
    )

    def compute(self, x: TokenInputs) -> tuple[Tensor, dict[str, Tensor]]:
        from sesa_cli.algos.aggregations import masked_mean

        if x.entropies is None:
            raise ValueError("forking_tokens reads the entropies: pass entropies")
        pg_losses, clipped = clipped_surrogate(x.logps, x.old_logps, x.advantages, self.algo)
        metrics = {"clip_frac": masked_mean(clipped.to(pg_losses.dtype), x.response_mask)}
        kept = high_entropy_mask(x.entropies, x.response_mask, self.settings.rho)
        metrics["forking_frac"] = masked_mean(kept.to(pg_losses.dtype), x.response_mask)
        return pg_losses.masked_fill(~kept, 0.0), metrics
