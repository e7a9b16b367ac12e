"""Outcome advantages: one scalar reward per rollout -> one advantage per rollout, computed within each group.

Every estimator here takes ``rewards`` of shape (n_groups, group), row g holding the rewards of the G rollouts of
prompt g, and returns advantages of the same shape. Rewards are constants: nothing here carries a gradient.

Each estimator also takes an optional ``on_policy`` mask, bool (n_groups, group): True for rollouts drawn in the
context they are scored in (``algo.off_policy=on_policy_baseline``). The baseline the estimator subtracts (the
group mean, or for RLOO the mean of the other rollouts) is then taken over on-policy rollouts only, while the scale
(GRPO's std) stays that of the whole group. A group, or for RLOO a rollout, with no on-policy rollout to average
keeps the estimator's own baseline, and a group whose rollouts are all on-policy gets exactly the estimator's
advantages. None = the estimator as published.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sesa_cli.algos.registry import ADVANTAGES, PENALTY_APART, get, register
from sesa_cli.config import AlgoConfig

__all__ = [
    "compute_advantages",
    "dr_grpo",
    "grpo",
    "no_on_policy_groups",
    "rloo",
    "scale_off_policy_negatives",
]


def _as_float(rewards: Tensor) -> Tensor:
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be (n_groups, group), got shape {tuple(rewards.shape)}")
    return rewards.detach() if rewards.is_floating_point() else rewards.detach().to(torch.get_default_dtype())


def _need_two(rewards: Tensor, name: str) -> None:
    if rewards.shape[1] < 2:
        raise ValueError(f"the {name} advantage needs at least 2 rollouts per group, got {rewards.shape[1]}")


def _on_policy_mean(rewards: Tensor, on_policy: Tensor | None, own: Tensor) -> Tensor:
    """The group baseline from on-policy rollouts: (n_groups, 1) mean reward of each group's on-policy rows, where
    the group has some and not all of its rows on-policy; ``own`` (the estimator's baseline, broadcastable to
    (n_groups, 1)) elsewhere, so an all-on-policy group gets bit-identical advantages."""
    if on_policy is None:
        return own
    if on_policy.shape != rewards.shape:
        raise ValueError(f"on_policy {tuple(on_policy.shape)} must match rewards {tuple(rewards.shape)}")
    weights = on_policy.to(rewards.dtype)
    count = weights.sum(dim=1, keepdim=True)
    mean = (rewards * weights).sum(dim=1, keepdim=True) / count.clamp(min=1)
    partial = (count > 0) & (count < rewards.shape[1])
    return torch.where(partial, mean, own)


@register(ADVANTAGES, "grpo")
def grpo(rewards: Tensor, cfg: AlgoConfig, on_policy: Tensor | None = None) -> Tensor:
    """A_i = (r_i − mean_g r) / (std_g r + adv_eps), GRPO (Shao et al. 2024, DeepSeekMath).

    rewards (n_groups, group) -> (n_groups, group). The std is the *unbiased* one (divides by G − 1), as
    ``torch.std`` computes it in TRL's ``GRPOTrainer`` and verl's ``compute_grpo_outcome_advantage``. A group whose
    rewards are all equal gets advantage 0 (``adv_eps`` keeps the division finite). With ``on_policy`` (bool,
    (n_groups, group)) the mean is over the group's on-policy rows (the std stays the whole group's).
    """
    rewards = _as_float(rewards)
    _need_two(rewards, "grpo")
    mean = _on_policy_mean(rewards, on_policy, rewards.mean(dim=1, keepdim=True))
    std = rewards.std(dim=1, keepdim=True, unbiased=True)
    return (rewards - mean) / (std + cfg.adv_eps)


@register(ADVANTAGES, "dr_grpo")
def dr_grpo(rewards: Tensor, cfg: AlgoConfig, on_policy: Tensor | None = None) -> Tensor:
    """A_i = r_i − mean_g r: GRPO without the std division, which over-weights groups of nearly equal rewards
    (Dr. GRPO, Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective").

    rewards (n_groups, group) -> (n_groups, group). With ``on_policy`` the mean is over the on-policy rows.
    """
    rewards = _as_float(rewards)
    return rewards - _on_policy_mean(rewards, on_policy, rewards.mean(dim=1, keepdim=True))


@register(ADVANTAGES, "rloo")
def rloo(rewards: Tensor, cfg: AlgoConfig, on_policy: Tensor | None = None) -> Tensor:
    """A_i = r_i − mean_{j≠i} r_j = G/(G−1) · (r_i − mean_g r): REINFORCE Leave-One-Out, the baseline of each
    rollout is the mean reward of the others in its group, so it is independent of the rollout (Ahmadian et al.
    2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs").

    rewards (n_groups, group) -> (n_groups, group). With ``on_policy`` the baseline of rollout i is the mean reward
    of the *on-policy* rollouts j ≠ i; a rollout with no such j (the group's only on-policy one, or a group with
    none) keeps the mean of all the others, as does every rollout of an all-on-policy group.
    """
    rewards = _as_float(rewards)
    _need_two(rewards, "rloo")
    group = rewards.shape[1]
    leave_one_out_mean = (rewards.sum(dim=1, keepdim=True) - rewards) / (group - 1)
    if on_policy is None:
        return rewards - leave_one_out_mean
    if on_policy.shape != rewards.shape:
        raise ValueError(f"on_policy {tuple(on_policy.shape)} must match rewards {tuple(rewards.shape)}")
    weights = on_policy.to(rewards.dtype)
    others = weights.sum(dim=1, keepdim=True) - weights  # (n_groups, group) on-policy rollouts other than i
    on_mean = ((rewards * weights).sum(dim=1, keepdim=True) - rewards * weights) / others.clamp(min=1)
    use = (others > 0) & ~on_policy.all(dim=1, keepdim=True)
    return rewards - torch.where(use, on_mean, leave_one_out_mean)


def compute_advantages(
    rewards: Tensor, cfg: AlgoConfig, on_policy: Tensor | None = None, penalties: Tensor | None = None
) -> Tensor:
    """Advantages of the estimator ``cfg.advantage``: rewards (n_groups, group) -> advantages (n_groups, group).
    ``on_policy`` (bool, (n_groups, group)): take the baseline from on-policy rollouts only (module docstring).
    ``penalties`` (n_groups, group): the format penalties inside ``rewards`` (``Score.penalty``); an estimator of
    :data:`~sesa_cli.algos.registry.PENALTY_APART` gets the rewards without them and the penalties apart, every
    other the rewards as they are."""
    estimator = get(ADVANTAGES, cfg.advantage, "algo.advantage")
    if penalties is None or cfg.advantage not in PENALTY_APART:
        advantages: Tensor = estimator(rewards, cfg, on_policy=on_policy)
        return advantages
    if penalties.shape != rewards.shape:
        raise ValueError(f"penalties {tuple(penalties.shape)} must match rewards {tuple(rewards.shape)}")
    apart: Tensor = estimator(rewards - penalties.to(rewards.dtype), cfg, on_policy=on_policy, penalties=penalties)
    return apart


def no_on_policy_groups(on_policy: Tensor) -> Tensor:
    """bool (n_groups, group) -> bool (n_groups,): groups with no on-policy rollout, where an on-policy baseline
    falls back to the estimator's own (with the two-stage sampler and a plain-prompt loss, every group)."""
    return ~on_policy.any(dim=1)


def scale_off_policy_negatives(advantages: Tensor, off_policy: Tensor, factors: Tensor) -> Tensor:
    """A_i · f_i for rows that are off-policy with A_i < 0; every other A_i unchanged (positives are kept).

    advantages (batch,) float, off_policy (batch,) bool, factors (batch,) float -> (batch,). Factors 0 drop those
    negatives (``algo.off_policy=drop_negatives``); truncated importance weights min(c, π(y|x)/π(y|ctx)) bound
    them by how likely the scored context is to draw the row (``weight_negatives``).
    """
    if not advantages.shape == off_policy.shape == factors.shape or advantages.ndim != 1:
        raise ValueError(
            f"advantages, off_policy and factors must be (batch,) alike, got {tuple(advantages.shape)}, "
            f"{tuple(off_policy.shape)} and {tuple(factors.shape)}"
        )
    return torch.where(off_policy & (advantages < 0), advantages * factors.to(advantages.dtype), advantages)
