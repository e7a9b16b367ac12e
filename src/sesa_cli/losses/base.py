"""The policy-loss protocol (``algo.loss``): per-token losses of the policy gradient.

A policy loss is one registered class (:data:`POLICY_LOSSES`, ``@register_loss("name")``) in one file of this
package, configured under ``algo.loss``: a mapping of its name and its settings, ``{name: forking_tokens, rho: 0.2}``
(``algo.loss=forking_tokens algo.loss.rho=0.2`` on the command line; a bare ``algo.loss=clip_cov`` names it at its
defaults). Its settings are its ``Settings`` dataclass, documented beside its fields; what the PPO-clipped losses
share (``algo.clip_low``, ``algo.clip_high``) stays in the algo section, which it gets too.

It maps ``(logps, old_logps, advantages, response_mask)``, all (batch, seq), to a per-token loss (batch, seq) plus a
few 0-d metric tensors (logged as ``loss/<name>``: ``clip_frac``, which every loss writes, and its own, declared
in its ``metrics``); sesa_cli.algos.compute_loss then
weights and aggregates it. ``logps`` carries the gradient; ``old_logps`` (the policy that drew the rollouts) and
``advantages`` are constants. The ratio is r = exp(logps − old_logps); its log is clamped to ±20 so that garbage in
padded positions (which the aggregation drops) cannot overflow into an ``inf`` whose backward would be NaN. Its
properties, class variables: :attr:`PolicyLoss.zero_at_zero_advantage` and :attr:`PolicyLoss.needs_entropies`.
Torch-free at import: a loss imports torch where it computes, so ``--help`` lists the losses without loading it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from sesa_cli.config import AlgoConfig
from sesa_cli.registry import Plugin, Registry, named_settings

if TYPE_CHECKING:
    import torch
    from torch import Tensor

__all__ = ["MAX_LOG_RATIO", "POLICY_LOSSES", "PolicyLoss", "TokenInputs", "build_loss", "clipped_surrogate",
           "log_ratio", "register_loss"]  # fmt: skip

MAX_LOG_RATIO = 20.0
"""The clamp of log r = logps − old_logps (module docstring)."""


@dataclass(frozen=True)
class TokenInputs:
    """What a policy loss reads of one (mini-)batch; every tensor (batch, seq)."""

    logps: Tensor
    """log pi(token | context) under the policy being trained (carries the gradient)."""
    old_logps: Tensor
    """Under the policy that drew the rollouts (constant)."""
    advantages: Tensor
    """Each token's row's advantage (constant)."""
    response_mask: Tensor
    """True on the tokens that get a loss."""
    entropies: Tensor | None = None
    """The policy's per-token entropies, detached: given to a loss that declares :attr:`PolicyLoss.needs_entropies`."""
    generator: torch.Generator | None = None
    """The RNG of a random token choice (None: one seeded from the batch)."""


class PolicyLoss(Plugin):
    """A per-token policy loss. Subclass it in a file of this package (or a plug-in module of your own) with
    ``@register_loss("name")``, a ``Settings`` dataclass if it has settings, and :meth:`compute`."""

    zero_at_zero_advantage: ClassVar[bool] = False
    """Rows with advantage exactly 0 add exactly 0 to the loss and its gradient, whatever their log-probs, and leave
    the other rows' terms unchanged: the update skips their forward pass when no KL or entropy term needs it (every
    row of a zero-std group); they still count in the aggregation."""
    needs_entropies: ClassVar[bool] = False
    """It reads the policy's per-token entropies (a loss that acts on the high-entropy tokens only, say): the update
    computes them for every row, and the loss gets them as ``entropies`` (batch, seq), detached."""

    def __init__(self, settings: Any, algo: AlgoConfig) -> None:
        self.settings = settings
        self.algo = algo

    def __call__(
        self,
        logps: Tensor,
        old_logps: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        *,
        entropies: Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """All inputs (batch, seq) -> the per-token loss (batch, seq) and 0-d metric tensors (``clip_frac`` at least):
        :meth:`compute` of the :class:`TokenInputs`."""
        return self.compute(TokenInputs(logps, old_logps, advantages, response_mask, entropies, generator))

    def compute(self, x: TokenInputs) -> tuple[Tensor, dict[str, Tensor]]:
        """The loss: per-token loss (batch, seq) and its 0-d metric tensors (``clip_frac`` at least)."""
        raise NotImplementedError


POLICY_LOSSES: Registry[type[PolicyLoss]] = Registry("algo.loss")
"""``algo.loss`` names -> policy-loss classes."""


def register_loss(name: str) -> Callable[[type[PolicyLoss]], type[PolicyLoss]]:
    """Class decorator: make a policy loss available as ``algo.loss=<name>``."""
    return POLICY_LOSSES.register(name)


def build_loss(algo: AlgoConfig) -> PolicyLoss:
    """The policy loss ``algo.loss`` names, with its settings; a ConfigError names an unknown loss or setting."""
    cls, settings = named_settings(POLICY_LOSSES, algo.loss, "algo.loss")
    assert issubclass(cls, PolicyLoss)  # the registry holds policy losses
    return cls(settings, algo)


def log_ratio(logps: Tensor, old_logps: Tensor) -> Tensor:
    """log r = logps − old_logps, clamped to ±20; (batch, seq)."""
    return (logps - old_logps).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def clipped_surrogate(logps: Tensor, old_logps: Tensor, advantages: Tensor, algo: AlgoConfig) -> tuple[Tensor, Tensor]:
    """PPO's −min(r·A, clip(r, 1 − clip_low, 1 + clip_high)·A) per token and the bool mask of tokens where the
    clipped term is the one taken (its gradient is zero there). All (batch, seq)."""
    import torch

    ratio = torch.exp(log_ratio(logps, old_logps))
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - algo.clip_low, 1 + algo.clip_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped
