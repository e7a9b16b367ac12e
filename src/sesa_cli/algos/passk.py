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

The choices where the paper is silent, kept here (:func:`subset_max_advantages`):

* The paper's rewards are binary. A graded reward (Countdown's 0.1 for a well-formed wrong answer, Sokoban's
  shaping) enters as itself, with the subset's reward its maximum (max@k, of which pass@k is the binary case): the
  same advantage as the closed form above whenever the rewards are 0 or 1, without a threshold deciding what
  counts as correct.
* The format penalty stays per sample. Under max@k an invalid reply among valid failures is never a subset's best
  member, so every subset scores alike and its penalty never acts (measured, issue 66: ``passk`` at k=2 on FrozenLake
  lost a seed to invalid text, one invalid reply among valid zeros getting advantage 0 where GRPO gives it -2.6).
  So the subset's reward is the best member's reward *without* its format penalty (``Score.penalty``), plus the
  mean of its members' penalties: R(S) = max_{i in S}(r_i - f_i) + (1/k) sum_{i in S} f_i, and the advantage is
  Pass@k Training's for that reward, exactly (its mean, std and per-rollout means over all k-subsets in closed
  form). Without penalties it is the max@k advantage above; an invalid reply among valid failures gets a negative
  advantage whatever k < N.

Both use ``algo.adv_eps`` beside the std as GRPO does (a group whose subsets all score alike, e.g. fewer than k
incorrect rollouts and no penalty, gets advantage 0). The group baseline is the estimator's own:
``algo.off_policy=on_policy_baseline`` is refused (there is no mean of on-policy rows to put in its place).
``grpo_passk`` keeps the penalty apart too: verl's best-of-group advantage on the rewards without it, plus GRPO's
advantage of the penalties alone.
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


def subset_max_advantages(rewards: Tensor, k: int, eps: float, penalties: Tensor | None = None) -> Tensor:
    """Per rollout: (mean reward of the k-subsets holding it − mean reward of all k-subsets) / (std + eps), a
    subset's reward R(S) = max_{i in S} r_i + (1/k) sum_{i in S} f_i: its best member's reward (pass@k for 0/1
    rewards) plus the mean of its members' format penalties ``penalties`` f (None = 0; ``rewards`` hold none of
    them: module docstring). rewards (N,), penalties (N,) -> (N,), exact.

    The max part: with the rewards sorted ascending, r_(1) <= ... <= r_(N) (ties in any order: the maximum is the
    same), the subset maximum is r_(j) in C(j − 1, k − 1) of the C(N, k) subsets, which gives its mean and its
    second moment; the subsets holding the rollout at sorted place i have maximum r_(i) in C(i − 1, k − 1) of them
    and r_(j), j > i, in C(j − 2, k − 2), out of C(N − 1, k − 1) (its mean given i, m_i). The mean part: over all
    subsets its mean is f̄ and its variance (σ_f² / k)(N − k)/(N − 1) (sampling without replacement, σ_f² the
    population variance); given i it is (f_i + (k − 1)(F − f_i)/(N − 1)) / k, F = Σ f. Their covariance over the
    subsets is (1/N) Σ_i f_i m_i − mean(max) f̄, since Σ_S max(S) Σ_{i in S} f_i = Σ_i f_i Σ_{S ∋ i} max(S)."""
    n = rewards.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"algo.passk_k={k} must be in [1, {n}]: the rollouts of a group")
    values, order = torch.sort(rewards, stable=True)
    v = values.tolist()
    total = comb(n, k)
    as_max = [comb(j, k - 1) for j in range(n)]  # 0-based place j: C(j, k - 1) subsets have r_(j) as their maximum
    mean = sum(w * r for w, r in zip(as_max, v, strict=True)) / total
    second = sum(w * r * r for w, r in zip(as_max, v, strict=True)) / total
    holding = comb(n - 1, k - 1)
    above = [0.0] * (n + 1)  # above[i] = sum over j > i of r_(j) C(j - 1, k - 2) (0-based j, i)
    for j in range(n - 1, -1, -1):
        above[j] = above[j + 1] + (v[j + 1] * comb(j, k - 2) if j + 1 < n and k >= 2 else 0.0)
    own_sorted = [(v[i] * comb(i, k - 1) + above[i]) / holding for i in range(n)]
    own = [0.0] * n
    for place, row in enumerate(order.tolist()):
        own[row] = own_sorted[place]
    var = second - mean * mean
    f = [0.0] * n if penalties is None else [float(x) for x in penalties.tolist()]
    if any(f):
        f_total = sum(f)
        f_mean = f_total / n
        f_var = sum(x * x for x in f) / n - f_mean * f_mean
        pen_var = f_var / k * (n - k) / (n - 1) if n > 1 else 0.0
        cov = sum(x * m for x, m in zip(f, own, strict=True)) / n - mean * f_mean
        var += pen_var + 2 * cov
        given = [(x + (k - 1) * (f_total - x) / (n - 1)) / k if n > 1 else x for x in f]
        own = [m + g for m, g in zip(own, given, strict=True)]
        mean += f_mean
    scale = max(0.0, var) ** 0.5 + eps
    return torch.tensor([(m - mean) / scale for m in own], dtype=torch.float64)


@register(ADVANTAGES, "passk", penalty_apart=True)
def passk(
    rewards: Tensor, cfg: AlgoConfig, on_policy: Tensor | None = None, penalties: Tensor | None = None
) -> Tensor:
    """Pass@k Training's analytical group advantage (arXiv 2508.10751), k = ``algo.passk_k``: each rollout's share
    of the pass@k of the k-subsets of its group, normalised over the subsets (module docstring; non-binary rewards
    by their maximum, format penalties ``penalties`` per sample: :func:`subset_max_advantages`). rewards (n_groups,
    group), without the penalties -> (n_groups, group)."""
    r = _check(rewards, on_policy, "passk")
    f = None if penalties is None else penalties.detach().to(torch.float64)
    out = torch.stack(
        [subset_max_advantages(row, cfg.passk_k, cfg.adv_eps, None if f is None else f[g]) for g, row in enumerate(r)]
    )
    return out.to(rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype())


@register(ADVANTAGES, "grpo_passk", penalty_apart=True)
def grpo_passk(
    rewards: Tensor, cfg: AlgoConfig, on_policy: Tensor | None = None, penalties: Tensor | None = None
) -> Tensor:
    """verl's ``grpo_passk`` (arXiv 2503.19595): the group's best rollout (the first of them, on a tie) gets
    (r_max − r_second) / (unbiased std + adv_eps), every other rollout 0; plus, with ``penalties`` (the format
    penalties taken out of ``rewards``), GRPO's advantage of the penalties alone, (f_i − mean f) / (unbiased std f +
    adv_eps) (module docstring). rewards (n_groups, group) -> (n_groups, group)."""
    r = _check(rewards, on_policy, "grpo_passk")
    top = torch.topk(r, 2, dim=1, sorted=True).values
    best = torch.argmax(r, dim=1)  # the first maximum: topk's choice among ties is unspecified
    gap = (top[:, 0] - top[:, 1]) / (r.std(dim=1, unbiased=True) + cfg.adv_eps)
    out = torch.zeros_like(r)
    out[torch.arange(r.shape[0]), best] = gap
    if penalties is not None:
        f = penalties.detach().to(torch.float64)
        out = out + (f - f.mean(dim=1, keepdim=True)) / (f.std(dim=1, keepdim=True, unbiased=True) + cfg.adv_eps)
    return out.to(rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype())
