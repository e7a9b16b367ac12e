"""``algo.loss=clip_cov`` and ``algo.loss=kl_cov``: the covariance methods of Cui et al. 2025, "The Entropy Mechanism of
Reinforcement Learning for Reasoning Language Models" (arXiv 2505.22617).

The covariance of log-prob and advantage drives the change of the policy entropy: the few tokens with a large positive
centered covariance (A − mean A)·(logp − mean logp) are what collapse it. Clip-Cov detaches a random handful of them
from the gradient; KL-Cov puts a KL penalty on the top ones. Both count tokens as the reference implementation does:
max(1, ⌊ratio · N_valid⌋), never more than exist.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sesa_cli.config import ConfigError
from sesa_cli.losses.base import PolicyLoss, TokenInputs, clipped_surrogate, log_ratio, register_loss
from sesa_cli.metric_keys import MetricKey

if TYPE_CHECKING:
    import torch
    from torch import Tensor

__all__ = ["ClipCov", "ClipCovSettings", "KLCov", "KLCovSettings"]


def _centered_cov(logps: Tensor, advantages: Tensor, response_mask: Tensor) -> Tensor:
    """Per-token covariance term (A − mean A)·(logp − mean logp), means over the valid tokens of the batch.

    All (batch, seq); detached (it only selects tokens)."""
    from sesa_cli.algos.aggregations import masked_mean

    logps = logps.detach()
    return (advantages - masked_mean(advantages, response_mask)) * (logps - masked_mean(logps, response_mask))


def _seeded_generator(*tensors: Tensor) -> torch.Generator:
    """A CPU generator seeded from the bytes of ``tensors``: the same batch picks the same tokens (reruns and
    repeated epochs over one batch agree), different batches pick differently, and the global RNG is untouched."""
    import torch

    digest = hashlib.blake2b(digest_size=8)
    for tensor in tensors:
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return torch.Generator().manual_seed(int.from_bytes(digest.digest(), "little") & (2**63 - 1))


def _n_selected(ratio: float, n_valid: int) -> int:
    """Tokens a covariance method acts on: ratio·N_valid rounded down, but at least one (as in the reference
    implementation, so that small batches are not a no-op) and never more than exist."""
    return min(max(1, int(ratio * n_valid)), n_valid)


def _ratio_problem(ratio: float) -> None:
    if not (math.isfinite(ratio) and 0 <= ratio <= 1):
        raise ConfigError(f"ratio={ratio} must be in [0, 1]")


@dataclass
class ClipCovSettings:
    """``algo.loss`` of ``clip_cov`` (the paper's values)."""

    ratio: float = 2e-4
    """Share of the valid tokens whose gradient is detached, in [0, 1] (at least one token)."""
    cov_min: float = 1.0
    """Lower end of the covariance window a detached token's centered covariance lies in."""
    cov_max: float = 5.0
    """Upper end of that window (>= cov_min)."""

    def __post_init__(self) -> None:
        _ratio_problem(self.ratio)
        if self.cov_min > self.cov_max:
            raise ConfigError(f"cov_min={self.cov_min} must be <= cov_max={self.cov_max}")


@register_loss("clip_cov")
class ClipCov(PolicyLoss):
    """Clip-Cov (arXiv 2505.22617): the PPO-clip loss, except that a few tokens with a high covariance between
    log-prob and advantage lose their gradient, which keeps the policy entropy from collapsing.

    Candidates are the valid tokens not already clipped by PPO whose centered covariance lies in [cov_min, cov_max];
    max(1, ⌊ratio · N_valid⌋) of them are drawn uniformly without replacement (``generator``, or one seeded from
    ``old_logps`` and ``advantages``) and their loss term is set to 0. Metrics ``clip_frac`` (PPO clipping) and
    ``clip_cov_frac``. Not ``zero_at_zero_advantage``: a row with A = 0 adds 0, but its log-probs enter the batch
    means of the covariance, and so which tokens of the other rows are detached."""

    Settings = ClipCovSettings
    metrics = (MetricKey("loss/clip_cov_frac", "Clip-Cov: share of tokens whose gradient is detached.", better=""),)

    def compute(self, x: TokenInputs) -> tuple[Tensor, dict[str, Tensor]]:
        import torch

        from sesa_cli.algos.aggregations import masked_mean

        s = self.settings
        pg_losses, clipped = clipped_surrogate(x.logps, x.old_logps, x.advantages, self.algo)
        valid = x.response_mask.bool()
        cov = _centered_cov(x.logps, x.advantages, valid)
        window = valid & ~clipped & (cov >= s.cov_min) & (cov <= s.cov_max)
        candidates = window.flatten().nonzero().squeeze(1)  # flat indices into (batch * seq,)
        n_pick = min(_n_selected(s.ratio, int(valid.sum())), candidates.numel())
        generator = x.generator if x.generator is not None else _seeded_generator(x.old_logps, x.advantages)
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


@dataclass
class KLCovSettings:
    """``algo.loss`` of ``kl_cov`` (the paper's values)."""

    ratio: float = 2e-3
    """Share of the valid tokens, those of the largest centered covariance, that get the KL penalty, in [0, 1] (at
    least one token)."""
    penalty: float = 1.0
    """Weight of the penalty |logp − old_logp| on those tokens (>= 0)."""

    def __post_init__(self) -> None:
        _ratio_problem(self.ratio)
        if not (math.isfinite(self.penalty) and self.penalty >= 0):
            raise ConfigError(f"penalty={self.penalty} must be a finite number >= 0")


@register_loss("kl_cov")
class KLCov(PolicyLoss):
    """KL-Cov (arXiv 2505.22617): the unclipped policy gradient −A·r, plus penalty·|logp − old_logp| on the
    max(1, ⌊ratio·N_valid⌋) valid tokens with the largest centered covariance.

    As in the paper there is no ratio clipping; the penalty is what keeps the high-covariance tokens near the
    behaviour policy. It is zero, with zero gradient, while logps == old_logps, i.e. on the first update of a batch: it
    acts from the second mini-batch or epoch on (``algo.minibatches``, ``algo.ppo_epochs``). Metrics ``clip_frac``
    (always 0) and ``kl_cov_frac``; ``generator`` is unused (the selection is a top-k). Not
    ``zero_at_zero_advantage``: the penalty acts on a row whatever its advantage."""

    Settings = KLCovSettings
    metrics = (MetricKey("loss/kl_cov_frac", "KL-Cov: share of tokens with the KL penalty.", better=""),)

    def compute(self, x: TokenInputs) -> tuple[Tensor, dict[str, Tensor]]:
        import torch

        from sesa_cli.algos.aggregations import masked_mean

        lr = log_ratio(x.logps, x.old_logps)
        pg_losses = -x.advantages * torch.exp(lr)
        valid = x.response_mask.bool()
        cov = _centered_cov(x.logps, x.advantages, valid).masked_fill(~valid, -torch.inf)
        n_pick = _n_selected(self.settings.ratio, int(valid.sum()))
        penalised_mask = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
        penalised_mask[torch.topk(cov.flatten(), n_pick).indices] = True
        penalised_mask = penalised_mask.view_as(valid)
        pg_losses = torch.where(penalised_mask, pg_losses + self.settings.penalty * lr.abs(), pg_losses)
        dtype = pg_losses.dtype
        return pg_losses, {
            "clip_frac": torch.zeros((), dtype=dtype, device=pg_losses.device),
            "kl_cov_frac": masked_mean(penalised_mask.to(dtype), valid),
        }
