"""Pass@k group advantages: the advantage of a rollout for the objective "some one of k rollouts succeeds".

Two published forms, each an estimator of :data:`~sesa_cli.advantages.ADVANTAGES` (``algo.advantage``), rewards
(n_groups, group) -> advantages (n_groups, group):

* ``passk`` (its setting ``algo.advantage.k``): Pass@k Training's analytical advantage (Chen et al. 2025, "Pass@k Training for Adaptively Balancing
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
  member, so every subset scores alike and its penalty never acts (measured on FrozenLake, 2026-12-07: ``passk`` at
  k=2 lost a seed to invalid text, one invalid reply among valid zeros getting advantage 0 where GRPO gives it
  -2.6).
  So the subset's reward is the best member's reward *without* its format penalty (``Score.penalty``), plus the
  mean of its members' penalties: R(S) = max_{i in S}(r_i - f_i) + (1/k) sum_{i in S} f_i, and the advantage is
  Pass@k Training's for that reward, exactly (its mean, std and per-rollout means over all k-subsets in closed
  form). Without penalties it is the max@k advantage above; an invalid reply among valid failures gets a negative
  advantage whatever k < N.

Both use ``algo.adv_eps`` beside the std as GRPO does (a group whose subsets all score alike, e.g. fewer than k
incorrect rollouts and no penalty, gets advantage 0). The group baseline is the estimator's own:
``algo.off_policy=on_policy_baseline`` is refused (there is no mean of on-policy rows to put in its place: neither is
``on_policy_baseline``).
``grpo_passk`` keeps the penalty apart too: verl's best-of-group advantage on the rewards without it, plus GRPO's
advantage of the penalties alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import TYPE_CHECKING

from sesa_cli.advantages.base import Advantage, Outcomes, register_advantage, subset_size_problem
from sesa_cli.config import ConfigError

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["GRPOPassK", "PassK", "PassKSettings", "penalty_advantages", "subset_max_advantages"]


def checked_rewards(rewards: Tensor, name: str) -> Tensor:
    """``rewards`` (n_groups, group >= 2), detached, as float64 (a ValueError on any other shape)."""
    import torch

    if rewards.ndim != 2:
        raise ValueError(f"rewards must be (n_groups, group), got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise ValueError(f"the {name} advantage needs at least 2 rollouts per group, got {rewards.shape[1]}")
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
    import torch

    n = rewards.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"algo.advantage.k={k} must be in [1, {n}]: the rollouts of a group")
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


def penalty_advantages(penalties: Tensor, eps: float) -> Tensor:
    """GRPO's advantage of the format penalties alone, (f_i − mean f) / (unbiased std f + eps), float64: how an
    estimator that takes the penalties apart gives them back per sample. penalties (n_groups, group) -> same."""
    import torch

    f = penalties.detach().to(torch.float64)
    return (f - f.mean(dim=1, keepdim=True)) / (f.std(dim=1, keepdim=True, unbiased=True) + eps)


@dataclass
class PassKSettings:
    """``algo.advantage`` of ``passk``."""

    k: int = 4
    """k of the pass@k objective, in [1, the rollouts of a group] (1 = GRPO's mean with the population std; k = G
    gives every rollout advantage 0). 4 is a choice: the paper trains with several k."""

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigError(f"k={self.k} must be >= 1")


@register_advantage("passk")
class PassK(Advantage):
    """Pass@k Training's analytical group advantage (arXiv 2508.10751), k = ``algo.advantage.k``: each rollout's
    share of the pass@k of the k-subsets of its group, normalised over the subsets (non-binary rewards by their
    maximum, format penalties per sample: :func:`subset_max_advantages`)."""

    Settings = PassKSettings
    penalty_apart = True
    on_policy_baseline = False

    def check_group(self, rows: int) -> str | None:
        return subset_size_problem(self.settings.k, rows)

    def compute(self, rewards: Tensor, outcomes: Outcomes, on_policy: Tensor | None) -> Tensor:
        import torch

        r = checked_rewards(rewards, "passk")
        f = None if outcomes.penalties is None else outcomes.penalties.detach().to(torch.float64)
        k, eps = self.settings.k, self.algo.adv_eps
        out = torch.stack([subset_max_advantages(row, k, eps, None if f is None else f[g]) for g, row in enumerate(r)])
        return out.to(rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype())


@register_advantage("grpo_passk")
class GRPOPassK(Advantage):
    """verl's ``grpo_passk`` (arXiv 2503.19595): the group's best rollout (the first of them, on a tie) gets
    (r_max − r_second) / (unbiased std + adv_eps), every other rollout 0; plus, with format penalties (taken out of
    the rewards), GRPO's advantage of the penalties alone, (f_i − mean f) / (unbiased std f + adv_eps) (module
    docstring)."""

    penalty_apart = True
    on_policy_baseline = False

    def compute(self, rewards: Tensor, outcomes: Outcomes, on_policy: Tensor | None) -> Tensor:
        import torch

        r = checked_rewards(rewards, "grpo_passk")
        eps = self.algo.adv_eps
        top = torch.topk(r, 2, dim=1, sorted=True).values
        best = torch.argmax(r, dim=1)  # the first maximum: topk's choice among ties is unspecified
        gap = (top[:, 0] - top[:, 1]) / (r.std(dim=1, unbiased=True) + eps)
        out = torch.zeros_like(r)
        out[torch.arange(r.shape[0]), best] = gap
        if outcomes.penalties is not None:
            out = out + penalty_advantages(outcomes.penalties, eps)
        return out.to(rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype())
