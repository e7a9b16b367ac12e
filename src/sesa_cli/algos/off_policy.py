"""Off-policy strategies (``algo.off_policy``): what the loss does with *off-policy rows*, the solutions drawn in a
context other than the one they are scored in (with ``algo.loss_context=prompt`` or ``is``: every chain item
after the first and every stage-II solution of the sequential sampler; never a sketch row, never with
``loss_context=conditioned``, never with parallel sampling).

Each strategy is a class registered in :data:`~sesa_cli.algos.registry.OFF_POLICY` under its config name and owns
the three things it changes, with the ``loss/*`` statistics of each:

* :meth:`OffPolicy.advantages`: the group advantages from the outcomes (the estimator ``algo.advantage``, with its
  baseline);
* :attr:`OffPolicy.needs_weights`: whether the update computes the truncated importance weights
  min(c, pi(y|x)/pi(y|ctx)) of the off-policy rows for it;
* :meth:`OffPolicy.rows`: the per-row treatment of the flattened advantages (given those weights).

A strategy is built with a ``gather`` (:meth:`sesa_cli.distributed.SingleProcess.gather`, the identity on one
process) for the one that counts over the whole batch (``distinct_solutions``): under data parallelism each replica
holds a shard of the groups, and :meth:`OffPolicy.rows` must give its rows what one process gives them on the
global batch.

The field doc of ``algo.off_policy`` (sesa_cli/config/method.py) and docs/samplers.md say why each exists and what it
measured. To add one, subclass :class:`OffPolicy` next to its neighbours with ``@OFF_POLICY.register("name")``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from sesa_cli.advantages import Advantage, Outcomes, build_advantage
from sesa_cli.algos.registry import OFF_POLICY
from sesa_cli.config import AlgoConfig

__all__ = [
    "DistinctSolutions",
    "DropNegatives",
    "OffPolicy",
    "OnPolicyBaseline",
    "WeightNegatives",
    "distinct_shares",
    "no_on_policy_groups",
    "off_policy_strategy",
    "scale_off_policy_negatives",
]

Gather = Callable[[list[Any]], list[Any]]
"""Every data-parallel replica's list, concatenated in rank order (:meth:`sesa_cli.distributed.SingleProcess.gather`,
a collective every replica calls); on one process its own list."""


def _own(items: list[Any]) -> list[Any]:
    """The :data:`Gather` of one process: the batch is this process's."""
    return items


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


@OFF_POLICY.register("paper")
class OffPolicy:
    """``paper``: every advantage as the estimator computes it (the paper's loss); the base class of the others."""

    needs_weights: ClassVar[bool] = False
    """Whether :meth:`rows` needs the importance weights of the off-policy rows."""

    def __init__(self, algo: AlgoConfig, gather: Gather = _own, advantage: Advantage | None = None) -> None:
        """``gather``: how a replica sees the other replicas' rows (the default: one process, no other);
        ``advantage``: the estimator (None: built from ``algo.advantage``)."""
        self.algo = algo
        self.gather = gather
        self.advantage = advantage if advantage is not None else build_advantage(algo)

    def advantages(self, outcomes: Outcomes, off_policy: Tensor) -> tuple[Tensor, dict[str, float]]:
        """The outcomes of (n_groups, group) rollouts (sesa_cli.advantages.Outcomes), off_policy (n_groups, group)
        bool -> advantages (n_groups, group) and their ``loss/*`` statistics."""
        return self.advantage(outcomes), {}

    def rows(
        self,
        advantages: Tensor,
        off_policy: Tensor,
        weights: Tensor | None,
        solution: Tensor,
        solutions: Sequence[Hashable | None] = (),
    ) -> tuple[Tensor, dict[str, float]]:
        """The per-row treatment: advantages (rows,) float, off_policy (rows,) bool, weights (rows,) (the truncated
        importance weights when :attr:`needs_weights` and some row is off-policy, else None) -> advantages (rows,)
        and their ``loss/*`` statistics over the solution rows, ``solution`` (rows,) bool (the other rows are what
        a sampler added, a sketch of two-stage sampling). ``solutions``: per solution row, in row order, which
        solution of which prompt it is (equal values = the same solution of the same prompt; None = no solution
        key), for the strategies that count distinct solutions."""
        return advantages, {}


def _changed(new: Tensor, old: Tensor, solution: Tensor) -> dict[str, float]:
    """``loss/adv_changed_frac``: share of the solution rows whose advantage the strategy changed."""
    return {"loss/adv_changed_frac": float((new != old)[solution].float().mean())}


@OFF_POLICY.register("drop_negatives")
class DropNegatives(OffPolicy):
    """``drop_negatives``: negative advantages of off-policy rows set to 0, positives kept."""

    def rows(
        self,
        advantages: Tensor,
        off_policy: Tensor,
        weights: Tensor | None,
        solution: Tensor,
        solutions: Sequence[Hashable | None] = (),
    ) -> tuple[Tensor, dict[str, float]]:
        out = scale_off_policy_negatives(advantages, off_policy, torch.zeros_like(advantages))
        return out, _changed(out, advantages, solution)


@OFF_POLICY.register("weight_negatives")
class WeightNegatives(OffPolicy):
    """``weight_negatives``: negative advantages of off-policy rows multiplied by their truncated importance weight
    (``algo.is_clip``); positives kept. Logs ``loss/neg_weight_mean`` (mean weight of those rows)."""

    needs_weights = True

    def rows(
        self,
        advantages: Tensor,
        off_policy: Tensor,
        weights: Tensor | None,
        solution: Tensor,
        solutions: Sequence[Hashable | None] = (),
    ) -> tuple[Tensor, dict[str, float]]:
        # no weights were computed only when no row is off-policy, and then none is scaled
        factors = torch.ones_like(advantages) if weights is None else weights
        out = scale_off_policy_negatives(advantages, off_policy, factors)
        stats = _changed(out, advantages, solution)
        hit = off_policy & (advantages < 0)
        if bool(hit.any()):
            stats["loss/neg_weight_mean"] = float(factors[hit].mean())
        return out, stats


@OFF_POLICY.register("on_policy_baseline")
class OnPolicyBaseline(OffPolicy):
    """``on_policy_baseline``: the group baseline from the group's on-policy rows only (the scale as the estimator
    has it); a group with none keeps the estimator's own, counted in ``loss/baseline_fallback_frac``."""

    def advantages(self, outcomes: Outcomes, off_policy: Tensor) -> tuple[Tensor, dict[str, float]]:
        on_policy = ~off_policy
        paper = self.advantage(outcomes)
        adv = self.advantage(outcomes, on_policy)
        return adv, {
            "loss/adv_changed_frac": float((adv != paper).float().mean()),
            "loss/baseline_fallback_frac": float(no_on_policy_groups(on_policy).float().mean()),
        }


@OFF_POLICY.register("distinct_solutions")
class DistinctSolutions(DropNegatives):
    """``distinct_solutions``: ``drop_negatives``, then the positive advantages of the off-policy rows shared out
    per distinct rewarded solution of a prompt. A solution drawn off-policy n times for the same prompt in the batch
    (in one group or in several) gets 1/n of each of those rows' advantages, so together they push it as much as one
    row does; the prompt's off-policy positives are then rescaled to their total before the split, so the update
    pushes the rewarded set as hard as ``drop_negatives`` does, but evenly over what was found instead of in
    proportion to how often it was drawn. On-policy rows keep their advantages (with parallel sampling nothing
    changes: plain GRPO), negative ones are as ``drop_negatives`` leaves them.

    The counts and totals are the whole batch's, every data-parallel replica's rows (gathered with ``gather``: one
    small collective per update), applied to this replica's rows: each replica gives its rows what one process
    gives them on the global batch. Logs ``loss/distinct_rewarded_frac``: distinct rewarded solutions per rewarded
    off-policy row of the whole batch (1 = no repeats; every replica logs the same value).
    ``loss/adv_changed_frac`` is this replica's rows', as for the other strategies (its mean over the replicas'
    equal shards is the batch's).
    """

    def rows(
        self,
        advantages: Tensor,
        off_policy: Tensor,
        weights: Tensor | None,
        solution: Tensor,
        solutions: Sequence[Hashable | None] = (),
    ) -> tuple[Tensor, dict[str, float]]:
        dropped, _ = super().rows(advantages, off_policy, weights, solution, solutions)
        # read back as lists once: an element read of a tensor on a GPU is a transfer each
        index = solution.nonzero().flatten().tolist()  # the row of each solution
        if len(solutions) != len(index):
            raise ValueError(
                f"distinct_solutions needs one solution per solution row: {len(solutions)} != {len(index)}"
            )
        off, values = off_policy[solution].tolist(), dropped[solution].tolist()
        positive = [i for i in range(len(index)) if solutions[i] is not None and off[i] and values[i] > 0]
        mine = [(solutions[i], values[i]) for i in positive]
        batch = self.gather(mine)  # every replica calls it, with or without rows of its own
        out = dropped.clone()
        if positive:
            at = torch.tensor([index[i] for i in positive], dtype=torch.long, device=out.device)
            out[at] = distinct_shares(mine, batch).to(out.device, out.dtype)
        stats = _changed(out, advantages, solution)
        if batch:
            stats["loss/distinct_rewarded_frac"] = len({solution for solution, _ in batch}) / len(batch)
        return out, stats


def distinct_shares(mine: Sequence[tuple[Hashable, float]], batch: Sequence[tuple[Hashable, float]]) -> Tensor:
    """The advantages of the rewarded off-policy rows ``mine``, each a (solution, positive advantage) pair, shared out
    per distinct solution of the whole batch's such rows ``batch`` (every replica's, in rank order; ``mine`` is among
    them): each row's advantage divided by how many rows of ``batch`` drew its solution, then every prompt's shares
    scaled so that its rows in ``batch`` keep their total advantage. -> (len(mine),) float32.

    A replica applies what it counts over ``batch`` to its own rows only; one process passes its rows as both, and a
    replica whose shards concatenate to that process's batch gets the same values for its rows (the same sums in
    the same order). Computed on the host, from and to numbers: the caller moves the result to its rows' device."""
    counts = Counter(solution for solution, _ in batch)

    def split(rows: Sequence[tuple[Hashable, float]]) -> Tensor:
        return torch.tensor([adv / counts[solution] for solution, adv in rows], dtype=torch.float32, device="cpu")

    # the total positive push of each prompt's rows is kept (the prompt is the first part of a solution)
    prompts = [_prompt_of(solution) for solution, _ in batch]
    totals = torch.tensor([adv for _, adv in batch], dtype=torch.float32, device="cpu")
    shares = split(batch)
    scale = {}
    for prompt in dict.fromkeys(prompts):
        of_prompt = torch.tensor([p == prompt for p in prompts], device="cpu")
        scale[prompt] = totals[of_prompt].sum() / shares[of_prompt].sum()
    factors = [scale[_prompt_of(solution)] for solution, _ in mine]
    return split(mine) * torch.stack(factors) if factors else torch.zeros(0, device="cpu")


def _prompt_of(solution: Hashable | None) -> Hashable | None:
    """The prompt part of a ``(prompt, key)`` solution identity (the whole value when it is not a pair)."""
    return solution[0] if isinstance(solution, tuple) and len(solution) == 2 else solution


def off_policy_strategy(algo: AlgoConfig, gather: Gather = _own, advantage: Advantage | None = None) -> OffPolicy:
    """The strategy ``algo.off_policy`` names, for ``algo`` and its estimator ``advantage`` (None: built from
    ``algo.advantage``); an unknown name raises ``ConfigError``. ``gather``: the data-parallel replicas'
    (:meth:`sesa_cli.distributed.SingleProcess.gather`); the default is one process's."""
    strategy: OffPolicy = OFF_POLICY.lookup(algo.off_policy)(algo, gather, advantage)
    return strategy
