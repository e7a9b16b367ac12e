"""Off-policy strategies (``algo.off_policy``): what the loss does with *off-policy rows*, the solutions drawn in a
context other than the one they are scored in (with ``algo.loss_context=prompt`` or ``is``: every chain item
after the first and every stage-II solution of the sequential sampler; never a sketch row, never with
``loss_context=conditioned``, never with parallel sampling).

Each strategy is a class registered in :data:`~sesa_cli.algos.registry.OFF_POLICY` under its config name and owns
the three things it changes, with the ``loss/*`` statistics of each:

* :meth:`OffPolicy.advantages`: the group advantages from the rewards (its baseline);
* :attr:`OffPolicy.needs_weights`: whether the update computes the truncated importance weights
  min(c, pi(y|x)/pi(y|ctx)) of the off-policy rows for it;
* :meth:`OffPolicy.rows`: the per-row treatment of the flattened advantages (given those weights).

A strategy is built with a ``gather`` (:meth:`sesa_cli.distributed.SingleProcess.gather`, the identity on one
process) for the one that counts over the whole batch (``distinct_solutions``): under data parallelism each replica
holds a shard of the groups, and :meth:`OffPolicy.rows` must give its rows what one process gives them on the
global batch.

The field doc of ``algo.off_policy`` (sesa_cli/config/method.py) and docs/samplers.md say why each exists and what it
measured. To add one, subclass :class:`OffPolicy` next to its neighbours with ``@register(OFF_POLICY, "name")``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from sesa_cli.algos.advantages import compute_advantages, no_on_policy_groups, scale_off_policy_negatives
from sesa_cli.algos.registry import OFF_POLICY, get, register
from sesa_cli.config import AlgoConfig

__all__ = [
    "DistinctSolutions",
    "DropNegatives",
    "OffPolicy",
    "OnPolicyBaseline",
    "WeightNegatives",
    "distinct_shares",
    "off_policy_strategy",
]

Gather = Callable[[list[Any]], list[Any]]
"""Every data-parallel replica's list, concatenated in rank order (:meth:`sesa_cli.distributed.SingleProcess.gather`,
a collective every replica calls); on one process its own list."""


def _own(items: list[Any]) -> list[Any]:
    """The :data:`Gather` of one process: the batch is this process's."""
    return items


@register(OFF_POLICY, "paper")
class OffPolicy:
    """``paper``: every advantage as the estimator computes it (the paper's loss); the base class of the others."""

    needs_weights: ClassVar[bool] = False
    """Whether :meth:`rows` needs the importance weights of the off-policy rows."""

    def __init__(self, algo: AlgoConfig, gather: Gather = _own) -> None:
        """``gather``: how a replica sees the other replicas' rows (the default: one process, no other)."""
        self.algo = algo
        self.gather = gather

    def advantages(
        self, rewards: Tensor, off_policy: Tensor, penalties: Tensor | None = None
    ) -> tuple[Tensor, dict[str, float]]:
        """rewards (n_groups, group) float, off_policy (n_groups, group) bool, penalties (n_groups, group) the
        format penalties inside the rewards (:func:`~sesa_cli.algos.advantages.compute_advantages`) -> advantages
        (n_groups, group) and their ``loss/*`` statistics."""
        return compute_advantages(rewards, self.algo, penalties=penalties), {}

    def rows(
        self,
        advantages: Tensor,
        off_policy: Tensor,
        weights: Tensor | None,
        n_solutions: int,
        solutions: Sequence[Hashable | None] = (),
    ) -> tuple[Tensor, dict[str, float]]:
        """The per-row treatment: advantages (rows,) float, off_policy (rows,) bool, weights (rows,) (the truncated
        importance weights when :attr:`needs_weights` and some row is off-policy, else None) -> advantages (rows,)
        and their ``loss/*`` statistics over the first ``n_solutions`` rows (the solutions; sketch rows follow).
        ``solutions``: per solution row, which solution of which prompt it is (equal values = the same solution of
        the same prompt; None = no solution key), for the strategies that count distinct solutions."""
        return advantages, {}


def _changed(new: Tensor, old: Tensor, n_solutions: int) -> dict[str, float]:
    """``loss/adv_changed_frac``: share of the solution rows whose advantage the strategy changed."""
    return {"loss/adv_changed_frac": float((new != old)[:n_solutions].float().mean())}


@register(OFF_POLICY, "drop_negatives")
class DropNegatives(OffPolicy):
    """``drop_negatives``: negative advantages of off-policy rows set to 0, positives kept."""

    def rows(
        self,
        advantages: Tensor,
        off_policy: Tensor,
        weights: Tensor | None,
        n_solutions: int,
        solutions: Sequence[Hashable | None] = (),
    ) -> tuple[Tensor, dict[str, float]]:
        out = scale_off_policy_negatives(advantages, off_policy, torch.zeros_like(advantages))
        return out, _changed(out, advantages, n_solutions)


@register(OFF_POLICY, "weight_negatives")
class WeightNegatives(OffPolicy):
    """``weight_negatives``: negative advantages of off-policy rows multiplied by their truncated importance weight
    (``algo.is_clip``); positives kept. Logs ``loss/neg_weight_mean`` (mean weight of those rows)."""

    needs_weights = True

    def rows(
        self,
        advantages: Tensor,
        off_policy: Tensor,
        weights: Tensor | None,
        n_solutions: int,
        solutions: Sequence[Hashable | None] = (),
    ) -> tuple[Tensor, dict[str, float]]:
        # no weights were computed only when no row is off-policy, and then none is scaled
        factors = torch.ones_like(advantages) if weights is None else weights
        out = scale_off_policy_negatives(advantages, off_policy, factors)
        stats = _changed(out, advantages, n_solutions)
        hit = off_policy & (advantages < 0)
        if bool(hit.any()):
            stats["loss/neg_weight_mean"] = float(factors[hit].mean())
        return out, stats


@register(OFF_POLICY, "on_policy_baseline")
class OnPolicyBaseline(OffPolicy):
    """``on_policy_baseline``: the group baseline from the group's on-policy rows only (the scale as the estimator
    has it); a group with none keeps the estimator's own, counted in ``loss/baseline_fallback_frac``."""

    def advantages(
        self, rewards: Tensor, off_policy: Tensor, penalties: Tensor | None = None
    ) -> tuple[Tensor, dict[str, float]]:
        on_policy = ~off_policy
        paper = compute_advantages(rewards, self.algo, penalties=penalties)
        adv = compute_advantages(rewards, self.algo, on_policy=on_policy, penalties=penalties)
        return adv, {
            "loss/adv_changed_frac": float((adv != paper).float().mean()),
            "loss/baseline_fallback_frac": float(no_on_policy_groups(on_policy).float().mean()),
        }


@register(OFF_POLICY, "distinct_solutions")
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
        n_solutions: int,
        solutions: Sequence[Hashable | None] = (),
    ) -> tuple[Tensor, dict[str, float]]:
        dropped, _ = super().rows(advantages, off_policy, weights, n_solutions, solutions)
        if len(solutions) != n_solutions:
            raise ValueError(
                f"distinct_solutions needs one solution per solution row: {len(solutions)} != {n_solutions}"
            )
        # read back as lists once: an element read of a tensor on a GPU is a transfer each
        off, values = off_policy[:n_solutions].tolist(), dropped[:n_solutions].tolist()
        positive = [i for i in range(n_solutions) if solutions[i] is not None and off[i] and values[i] > 0]
        mine = [(solutions[i], values[i]) for i in positive]
        batch = self.gather(mine)  # every replica calls it, with or without rows of its own
        out = dropped.clone()
        if positive:
            at = torch.tensor(positive, dtype=torch.long, device=out.device)
            out[at] = distinct_shares(mine, batch).to(out.device, out.dtype)
        stats = _changed(out, advantages, n_solutions)
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


def off_policy_strategy(algo: AlgoConfig, gather: Gather = _own) -> OffPolicy:
    """The strategy ``algo.off_policy`` names, for ``algo``; an unknown name raises ``ConfigError``. ``gather``: the
    data-parallel replicas' (:meth:`sesa_cli.distributed.SingleProcess.gather`); the default is one process's."""
    strategy: OffPolicy = get(OFF_POLICY, algo.off_policy, "algo.off_policy")(algo, gather)
    return strategy
