"""Outcome advantages: one scalar reward per rollout -> one advantage per rollout, computed within each group.

Every estimator here takes ``rewards`` of shape (n_groups, group), row g holding the rewards of the G rollouts of
prompt g, and returns advantages of the same shape. Rewards are constants: nothing here carries a gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sesa_cli.algos.registry import ADVANTAGES, get, register
from sesa_cli.config import AlgoConfig

__all__ = ["compute_advantages", "dr_grpo", "grpo", "rloo", "top_std_groups", "zero_std_groups"]


def _as_float(rewards: Tensor) -> Tensor:
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be (n_groups, group), got shape {tuple(rewards.shape)}")
    return rewards.detach() if rewards.is_floating_point() else rewards.detach().to(torch.get_default_dtype())


def _need_two(rewards: Tensor, name: str) -> None:
    if rewards.shape[1] < 2:
        raise ValueError(f"the {name} advantage needs at least 2 rollouts per group, got {rewards.shape[1]}")


@register(ADVANTAGES, "grpo")
def grpo(rewards: Tensor, cfg: AlgoConfig) -> Tensor:
    """A_i = (r_i − mean_g r) / (std_g r + adv_eps), GRPO (Shao et al. 2024, DeepSeekMath).

    rewards (n_groups, group) -> (n_groups, group). The std is the *unbiased* one (divides by G − 1), as
    ``torch.std`` computes it in TRL's ``GRPOTrainer`` and verl's ``compute_grpo_outcome_advantage``. A group whose
    rewards are all equal gets advantage 0 (``adv_eps`` keeps the division finite).
    """
    rewards = _as_float(rewards)
    _need_two(rewards, "grpo")
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True, unbiased=True)
    return (rewards - mean) / (std + cfg.adv_eps)


@register(ADVANTAGES, "dr_grpo")
def dr_grpo(rewards: Tensor, cfg: AlgoConfig) -> Tensor:
    """A_i = r_i − mean_g r: GRPO without the std division, which over-weights groups of nearly equal rewards
    (Dr. GRPO, Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective").

    rewards (n_groups, group) -> (n_groups, group).
    """
    rewards = _as_float(rewards)
    return rewards - rewards.mean(dim=1, keepdim=True)


@register(ADVANTAGES, "rloo")
def rloo(rewards: Tensor, cfg: AlgoConfig) -> Tensor:
    """A_i = r_i − mean_{j≠i} r_j = G/(G−1) · (r_i − mean_g r): REINFORCE Leave-One-Out, the baseline of each
    rollout is the mean reward of the others in its group, so it is independent of the rollout (Ahmadian et al.
    2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs").

    rewards (n_groups, group) -> (n_groups, group).
    """
    rewards = _as_float(rewards)
    _need_two(rewards, "rloo")
    group = rewards.shape[1]
    leave_one_out_mean = (rewards.sum(dim=1, keepdim=True) - rewards) / (group - 1)
    return rewards - leave_one_out_mean


def compute_advantages(rewards: Tensor, cfg: AlgoConfig) -> Tensor:
    """Advantages of the estimator ``cfg.advantage``: rewards (n_groups, group) -> advantages (n_groups, group)."""
    return get(ADVANTAGES, cfg.advantage, "algo.advantage")(rewards, cfg)


def zero_std_groups(rewards: Tensor) -> Tensor:
    """True for groups whose rewards are all equal (std 0), which carry no learning signal under a group baseline:
    DAPO's dynamic sampling (Yu et al. 2025) drops them and samples more prompts until the batch is full.

    rewards (n_groups, group) -> bool (n_groups,). Equality is exact (no std threshold), so a group whose rewards
    differ only by float noise still counts as informative.
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be (n_groups, group), got shape {tuple(rewards.shape)}")
    return (rewards == rewards[:, :1]).all(dim=1)


def top_std_groups(rewards: Tensor, ratio: float) -> Tensor:
    """RAGEN's StarPO-S rollout filter (Wang et al. 2025, "RAGEN", arXiv 2504.20073; ``rollout_filter_ratio`` with
    type ``std``): keep the ``int(ratio * n_groups)`` groups (at least one) with the largest in-group reward std,
    so the update spends its step on the prompts whose rollouts disagree. Ties keep the earlier group.

    rewards (n_groups, group) -> bool (n_groups,); ratio in (0, 1], 1 keeps every group.
    """
    std = _as_float(rewards).std(dim=1, unbiased=False)  # _as_float checks the (n_groups, group) shape
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    n = rewards.shape[0]
    k = max(1, int(ratio * n))
    order = torch.sort(-std, stable=True).indices
    keep = torch.zeros(n, dtype=torch.bool)
    keep[order[:k]] = True
    return keep
