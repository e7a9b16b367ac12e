"""Pass@k group advantages: the advantage of a rollout for the objective "some one of k rollouts succeeds".

Two published forms, each an estimator of :data:`~sesa_cli.algos.ADVANTAGES` (``algo.advantage``), rewards
(n_groups, group) -> advantages (n_groups, group):

* ``passk``: Pass@k Training's analytical advantage (Chen et al. 2025, "Pass@k Training for Adaptively Balancing
  Exploration and Exploitation of Large Reasoning Models", arXiv 2508.10751, section "analytical derivation"). The
  N rollouts of a group are split into every k-subset; a subset's reward is pass@k (1 if some member is correct);
  a rollout's advantage is the mean reward of the subsets that hold it, less the mean over all subsets, divided by
  their std. For a group of N with N_neg incorrect, closed form:
  R̄ = 1 − C(N_neg, k) / C(N, k), σ = sqrt(R̄ (1 − R̄)),
  A_correct = (1 − R̄) / σ, A_incorrect = (1 − R̄ − C(N_neg − 1, k − 1) / C(N − 1, k − 1)) / σ.
* ``grpo_passk``: verl's ``compute_grpo_passk_outcome_advantage`` ("implemented as described in" arXiv
  2503.19595): only the best rollout of a group gets an advantage, r_max − r_second, divided by the group's
  unbiased std (verl's default ``norm_adv_by_std_in_grpo``); every other rollout gets 0.

The choice where the paper is silent, kept here (:func:`subset_max_advantages`): the paper's rewards are binary. A
reward that is not 0 or 1 (Countdown's 0.1 for a well-formed wrong answer, FrozenLake's format penalty) enters as
itself, with the subset's reward its maximum (max@k, of which pass@k is the binary case): the same advantage as the
closed form above whenever the rewards are 0 or 1, without a threshold deciding what counts as correct. Both use
``algo.adv_eps`` beside the std as GRPO does (a group whose subsets all score alike, e.g. fewer than k incorrect
rollouts, gets advantage 0). The group baseline is the estimator's own: ``algo.off_policy=on_policy_baseline`` is
refused (there is no mean of on-policy rows to put in its place).
"""

from __future__ import annotations

from math import comb

import torch
from torch import Tensor

from sesa_cli.algos.registry import ADVANTAGES, register
from sesa_cli.config import AlgoConfig

__all__ = ["grpo_passk", "passk", "subset_max_advantages"]


def _check(rewards: Tensor, on_policy: Tensor | None, name: str) -> Tensor:
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be (n_groups, group), got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise ValueError(f"the {name} advantage needs at least 2 rollouts per group, got {rewards.shape[1]}")
    if on_policy is not None:
        raise ValueError(
            f"algo.advantage={name} has no group mean to take from on-policy rows: choose another algo.off_policy "
            "than on_policy_baseline"
        )
    return rewards.detach().to(torch.float64)


def subset_max_advantages(rewards: Tensor, k: int, eps: float) -> Tensor:
    """Per rollout: (mean reward of the k-subsets holding it − mean reward of all k-subsets) / (std + eps), a
    subset's reward being the largest of its members' (pass@k for 0/1 rewards). rewards (N,) -> (N,), exact.

    With the rewards sorted ascending, r_(1) <= ... <= r_(N) (ties in any order: the maximum is the same), the
    subset maximum is r_(j) in C(j − 1, k − 1) of the C(N, k) subsets, which gives the mean and the std of the
    subset rewards; the subsets holding the rollout at sorted place i have maximum r_(i) in C(i − 1, k − 1) of
    them and r_(j), j > i, in C(j − 2, k − 2), out of C(N − 1, k − 1)."""
    n = rewards.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"algo.passk_k={k} must be in [1, {n}]: the rollouts of a group")
    values, order = torch.sort(rewards, stable=True)
    v = values.tolist()
    total = comb(n, k)
    as_max = [comb(j, k - 1) for j in range(n)]  # 0-based place j: C(j, k - 1) subsets have r_(j) as their maximum
    mean = sum(w * r for w, r in zip(as_max, v, strict=True)) / total
    var = max(0.0, sum(w * r * r for w, r in zip(as_max, v, strict=True)) / total - mean * mean)
    holding = comb(n - 1, k - 1)
    above = [0.0] * (n + 1)  # above[i] = sum over j > i of r_(j) C(j - 1, k - 2) (0-based j, i)
    for j in range(n - 1, -1, -1):
        above[j] = above[j + 1] + (v[j + 1] * comb(j, k - 2) if j + 1 < n and k >= 2 else 0.0)
    own = [(v[i] * comb(i, k - 1) + above[i]) / holding for i in range(n)]
    scale = var**0.5 + eps
    out = torch.empty(n, dtype=torch.float64)
    out[order] = torch.tensor([(m - mean) / scale for m in own], dtype=torch.float64)
    return out


@register(ADVANTAGES, "passk")
def passk(rewards: Tensor, cfg: AlgoConfig, on_policy: Tensor | None = None) -> Tensor:
    """Pass@k Training's analytical group advantage (arXiv 2508.10751), k = ``algo.passk_k``: each rollout's share
    of the pass@k of the k-subsets of its group, normalised over the subsets (module docstring; non-binary rewards
    by their maximum, :func:`subset_max_advantages`). rewards (n_groups, group) -> (n_groups, group)."""
    r = _check(rewards, on_policy, "passk")
    out = torch.stack([subset_max_advantages(row, cfg.passk_k, cfg.adv_eps) for row in r])
    return out.to(rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype())


@register(ADVANTAGES, "grpo_passk")
def grpo_passk(rewards: Tensor, cfg: AlgoConfig, on_policy: Tensor | None = None) -> Tensor:
    """verl's ``grpo_passk`` (arXiv 2503.19595): the group's best rollout (the first of them, on a tie) gets
    (r_max − r_second) / (unbiased std + adv_eps), every other rollout 0. rewards (n_groups, group) -> (n_groups,
    group)."""
    r = _check(rewards, on_policy, "grpo_passk")
    top = torch.topk(r, 2, dim=1, sorted=True).values
    best = torch.argmax(r, dim=1)  # the first maximum: topk's choice among ties is unspecified
    gap = (top[:, 0] - top[:, 1]) / (r.std(dim=1, unbiased=True) + cfg.adv_eps)
    out = torch.zeros_like(r)
    out[torch.arange(r.shape[0]), best] = gap
    return out.to(rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype())
