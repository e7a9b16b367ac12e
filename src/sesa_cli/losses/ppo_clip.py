"""``algo.loss=ppo_clip``: PPO's clipped surrogate with DAPO's decoupled clip range (GRPO's loss)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sesa_cli.losses.base import PolicyLoss, TokenInputs, clipped_surrogate, register_loss

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["PPOClip"]


@register_loss("ppo_clip")
class PPOClip(PolicyLoss):
    """PPO's clipped surrogate (Schulman et al. 2017) with DAPO's decoupled clip range (Yu et al. 2025):
    −min(r·A, clip(r, 1 − clip_low, 1 + clip_high)·A) per token (``algo.clip_low``, ``algo.clip_high``).

    Metrics ``clip_frac`` (valid tokens whose clipped term is taken). A row with A = 0 has a term of exactly 0
    whatever its ratio, independent of the other rows (``zero_at_zero_advantage``)."""

    zero_at_zero_advantage = True

    def compute(self, x: TokenInputs) -> tuple[Tensor, dict[str, Tensor]]:
        from sesa_cli.algos.aggregations import masked_mean

        pg_losses, clipped = clipped_surrogate(x.logps, x.old_logps, x.advantages, self.algo)
        return pg_losses, {"clip_frac": masked_mean(clipped.to(pg_losses.dtype), x.response_mask)}
