"""``algo.advantage=darling``: DARLING, each reward multiplied by how distinct its answer is within its group.

Li et al. 2025, "Jointly Reinforcing Diversity and Quality in Language Model Generations" (arXiv 2509.02534;
facebookresearch/darling). The rollouts of a prompt are partitioned into classes of equivalent answers, and each
rollout's quality reward is multiplied by its normalised diversity, the share of the other rollouts of its group whose
answer is not equivalent to its own:

div_i = |{j ≠ i in i's group: a_j ≠ a_i}| / (G − 1),   r_i' = r_i · div_i,

so a correct answer the group gave once keeps its whole reward and one the whole group gave gets none; the advantage
is then taken on r' (multiplicative fusion: diversity pays only where quality does).

The choices where the paper is silent or sesa differs, kept here:

* Equivalence is exact: the task's solution key (``Score.key``; on the grid tasks the loop-erased route of states the
  episode went through, on Countdown the equation up to commutativity and associativity), where the paper uses a
  learned equivalence classifier over free text. A reply without a key (invalid) is equivalent to no other.
* The advantage on r' is GRPO's, (r'_i − mean_g r') / (std_g r' + algo.adv_eps), so DARLING's group differs from
  GRPO's by its reward alone; with ``algo.off_policy=on_policy_baseline`` the mean is over on-policy rows, as GRPO's.
* The format penalty stays per sample: it is taken out before the product and added back after,
  r'_i = (r_i − f_i) · div_i + f_i, so a repeated invalid reply is not forgiven by its repetition, nor a distinct one
  paid for it. Graded rewards (Countdown's 0.1 for a well-formed wrong answer, Sokoban's shaping, the loss terms'
  bonuses) enter as the quality reward itself; a reward below 0 is multiplied like any other (a failure repeated by
  the group is then pushed down less than one it gave once).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from sesa_cli.advantages.base import Advantage, Outcomes, register_advantage
from sesa_cli.advantages.group import grpo_advantages

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["Darling", "distinct_shares"]


def distinct_shares(keys: list[str | None]) -> list[float]:
    """Per rollout of one group, the share of the others whose key differs from its own (a None key differs from
    every key, None included): div_i = |{j ≠ i: a_j ≠ a_i}| / (G − 1)."""
    counts = Counter(k for k in keys if k is not None)
    others = len(keys) - 1
    return [1.0 if k is None else (others - (counts[k] - 1)) / others for k in keys]


@register_advantage("darling")
class Darling(Advantage):
    """DARLING (arXiv 2509.02534) with exact equivalence: GRPO's advantage of r_i · div_i, div_i the share of the
    other rollouts of its group with another solution key (module docstring)."""

    penalty_apart = True

    def compute(self, rewards: Tensor, outcomes: Outcomes, on_policy: Tensor | None) -> Tensor:
        if outcomes.keys is None or len(outcomes.keys) != rewards.shape[0]:
            raise ValueError("darling reads the rollouts' solution keys: pass Outcomes.keys, one list per group")
        if any(len(group) != rewards.shape[1] for group in outcomes.keys) or rewards.shape[1] < 2:
            raise ValueError(f"darling needs groups of >= 2 rollouts, a key each; rewards {tuple(rewards.shape)}")
        div = rewards.new_tensor([distinct_shares(list(group)) for group in outcomes.keys])
        shaped = rewards * div
        if outcomes.penalties is not None:
            shaped = shaped + outcomes.penalties.to(rewards.dtype)
        return grpo_advantages(shaped, self.algo.adv_eps, on_policy)
