"""The group-relative baselines: ``grpo``, ``dr_grpo`` and ``rloo`` (``algo.advantage``).

Each takes rewards (n_groups, group), row g holding the rewards of the G rollouts of prompt g, and returns advantages
of the same shape, computed within each group. Each also takes an optional ``on_policy`` mask, bool (n_groups,
group): True for rollouts drawn in the context they are scored in (``algo.off_policy=on_policy_baseline``). The
baseline the estimator subtracts (the group mean, or for RLOO the mean of the other rollouts) is then taken over
on-policy rollouts only, while the scale (GRPO's std) stays that of the whole group. A group, or for RLOO a rollout,
with no on-policy rollout to average keeps the estimator's own baseline, and a group whose rollouts are all on-policy
gets exactly the estimator's advantages. None = the estimator as published. They have no settings of their own:
GRPO's ``algo.adv_eps`` is the algo section's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sesa_cli.advantages.base import Advantage, Outcomes, register_advantage

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["GRPO", "RLOO", "DrGRPO", "as_float", "grpo_advantages", "need_two"]


def as_float(rewards: Tensor) -> Tensor:
    """``rewards`` (n_groups, group), detached, as floats (the default dtype for integer rewards)."""
    import torch

    if rewards.ndim != 2:
        raise ValueError(f"rewards must be (n_groups, group), got shape {tuple(rewards.shape)}")
    return rewards.detach() if rewards.is_floating_point() else rewards.detach().to(torch.get_default_dtype())


def need_two(rewards: Tensor, name: str) -> None:
    """A ValueError unless every group has two rollouts (a group baseline needs them)."""
    if rewards.shape[1] < 2:
        raise ValueError(f"the {name} advantage needs at least 2 rollouts per group, got {rewards.shape[1]}")


def _on_policy_mean(rewards: Tensor, on_policy: Tensor | None, own: Tensor) -> Tensor:
    """The group baseline from on-policy rollouts: (n_groups, 1) mean reward of each group's on-policy rows, where
    the group has some and not all of its rows on-policy; ``own`` (the estimator's baseline, broadcastable to
    (n_groups, 1)) elsewhere, so an all-on-policy group gets bit-identical advantages."""
    import torch

    if on_policy is None:
        return own
    if on_policy.shape != rewards.shape:
        raise ValueError(f"on_policy {tuple(on_policy.shape)} must match rewards {tuple(rewards.shape)}")
    weights = on_policy.to(rewards.dtype)
    count = weights.sum(dim=1, keepdim=True)
    mean = (rewards * weights).sum(dim=1, keepdim=True) / count.clamp(min=1)
    partial = (count > 0) & (count < rewards.shape[1])
    return torch.where(partial, mean, own)


def grpo_advantages(rewards: Tensor, eps: float, on_policy: Tensor | None = None) -> Tensor:
    """(r_i − mean_g r) / (std_g r + eps) of rewards (n_groups, group) (:class:`GRPO`)."""
    rewards = as_float(rewards)
    need_two(rewards, "grpo")
    mean = _on_policy_mean(rewards, on_policy, rewards.mean(dim=1, keepdim=True))
    std = rewards.std(dim=1, keepdim=True, unbiased=True)
    return (rewards - mean) / (std + eps)


@register_advantage("grpo")
class GRPO(Advantage):
    """A_i = (r_i − mean_g r) / (std_g r + adv_eps), GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300).

    The std is the *unbiased* one (divides by G − 1), as ``torch.std`` computes it in TRL's ``GRPOTrainer`` and
    verl's ``compute_grpo_outcome_advantage``. A group whose rewards are all equal gets advantage 0 (``adv_eps``
    keeps the division finite). With ``on_policy`` the mean is over the group's on-policy rows (the std stays the
    whole group's)."""

    def compute(self, rewards: Tensor, outcomes: Outcomes, on_policy: Tensor | None) -> Tensor:
        return grpo_advantages(rewards, self.algo.adv_eps, on_policy)


@register_advantage("dr_grpo")
class DrGRPO(Advantage):
    """A_i = r_i − mean_g r: GRPO without the std division, which over-weights groups of nearly equal rewards
    (Dr. GRPO, Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective", arXiv 2503.20783).
    With ``on_policy`` the mean is over the on-policy rows."""

    def compute(self, rewards: Tensor, outcomes: Outcomes, on_policy: Tensor | None) -> Tensor:
        rewards = as_float(rewards)
        return rewards - _on_policy_mean(rewards, on_policy, rewards.mean(dim=1, keepdim=True))


@register_advantage("rloo")
class RLOO(Advantage):
    """A_i = r_i − mean_{j≠i} r_j = G/(G−1) · (r_i − mean_g r): REINFORCE Leave-One-Out, the baseline of each rollout
    is the mean reward of the others in its group, so it is independent of the rollout (Ahmadian et al. 2024, "Back to
    Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs", arXiv 2402.14740).

    With ``on_policy`` the baseline of rollout i is the mean reward of the *on-policy* rollouts j ≠ i; a rollout with
    no such j (the group's only on-policy one, or a group with none) keeps the mean of all the others, as does every
    rollout of an all-on-policy group."""

    def compute(self, rewards: Tensor, outcomes: Outcomes, on_policy: Tensor | None) -> Tensor:
        import torch

        rewards = as_float(rewards)
        need_two(rewards, "rloo")
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
