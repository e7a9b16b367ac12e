"""The pure pieces of one policy update, in the order :meth:`sesa_cli.learner.Learner.update` runs them: the loss
inputs of a batch of groups, the truncated importance weights, and the optimizer step. The advantage estimator is
``algo.advantage`` (sesa_cli.advantages), the off-policy treatment of the advantages the strategy ``algo.off_policy``
names (sesa_cli/algos/off_policy.py); the loss terms that bring their own rows are sesa_cli.terms, the rows a sampler
adds to the policy-gradient batch its own (:class:`RowSource`). The old policy's log-probs are the scorer's
(sesa_cli.rollout.scoring.Scorer.old_logps).

Shapes: ``rows`` is the number of scored sequences of the update (every solution, then the rows a sampler adds);
``T`` the longest completion among them (the width of a :class:`~sesa_cli.rollout.scoring.ScoringBatch`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from sesa_cli.advantages import Outcomes
from sesa_cli.algos import OffPolicy
from sesa_cli.config import AlgoConfig
from sesa_cli.distributed import SingleProcess
from sesa_cli.rollout.rollouts import PolicyRows, Rollout

Solution = tuple[tuple[int, ...], str] | None
"""(plain prompt ids, solution key) of a solution row, None when the answer has no key (unparseable)."""
SOLUTION = "solution"
"""The kind of a row that is a rollout of the groups (:attr:`LossInputs.kinds`)."""


class RowSource(Protocol):
    """What adds rows of its own to the policy-gradient batch of an update, beside the solution rows (a sampler that
    trains more than the solutions it drew)."""

    def policy_rows(self, rows: Sequence[Rollout], advantages: Sequence[float], algo: AlgoConfig) -> PolicyRows | None:
        """The rows to add for the update of the solution rows ``rows`` with their ``advantages`` (before the
        off-policy strategy's per-row treatment), or None."""
        ...


@dataclass
class LossInputs:
    """The rows one update trains on: the solutions (group after group), then the rows the sources added. Every list
    has one entry per row; the tensors live on the policy's device."""

    contexts: list[list[int]]
    """Token ids each row is scored under: the plain prompt x, or (``algo.loss_context=conditioned``, and every row a
    source added) the context that drew it."""
    completions: list[list[int]]
    """Token ids of each row's completion (for a multi-turn task the whole trajectory, observations included)."""
    masks: list[list[bool] | None]
    """Per completion token, True where it gets a loss (a trajectory's own tokens, not its observations); None =
    every token."""
    behaviour_logps: list[list[float]]
    """Per completion token, the log-prob recorded while sampling, in the context that drew the row."""
    advantages: Tensor
    """(rows,) float32: one advantage per row (a source's rows: the ones their source gave them)."""
    off_policy: Tensor
    """(rows,) bool: the row was drawn in a context other than the one it is scored in."""
    kinds: list[str]
    """What each row is: :data:`SOLUTION`, or the kind its source gave the rows it added."""
    solution: Tensor
    """(rows,) bool: the row is a solution (the ``loss/*`` statistics of solution rows read it)."""
    solutions: list[Solution]
    """Per solution row, which solution of which prompt it is (``None`` for an answer with no solution key): rows
    alike are draws of the same solution for the same prompt."""
    stats: dict[str, float]
    """``loss/*`` statistics of the advantage computation (the off-policy strategy's baseline)."""
    rollouts: list[Rollout]
    """The solution rows' rollouts, in row order: what the loss terms (sesa_cli.terms) observe."""


def loss_inputs(
    groups: Sequence[Sequence[Rollout]],
    strategy: OffPolicy,
    algo: AlgoConfig,
    bonus: Sequence[float] | None = None,
    device: torch.device | str = "cpu",
    sources: Sequence[RowSource] = (),
) -> LossInputs:
    """Flatten groups into scored rows with advantages (``strategy``'s baseline, ``algo.off_policy``, over the
    estimator ``algo.advantage``), then each source's rows (:class:`RowSource`). ``bonus``: per solution row, added
    to its reward before the advantages (the loss terms' reward bonuses). The group advantages are computed on the
    host (a few numbers per group, read back as a list); the rows' tensors live on ``device``, the policy's, where
    they meet its log-probs."""
    rewards = torch.tensor([[r.score.reward for r in g] for g in groups], dtype=torch.float32, device="cpu")
    if bonus is not None:
        rewards = rewards + torch.tensor(bonus, dtype=torch.float32, device="cpu").view(rewards.shape)
    rows = [r for g in groups for r in g]
    contexts = [r.context_ids if algo.loss_context == "conditioned" else r.prompt_ids for r in rows]
    # The one definition of an off-policy row: drawn in a context other than the one it is scored in.
    off_policy = [r.context_ids != c for r, c in zip(rows, contexts, strict=True)]
    off = torch.tensor(off_policy, dtype=torch.bool, device="cpu").view(rewards.shape)
    outcomes = Outcomes(
        rewards,
        penalties=torch.tensor([[r.score.penalty for r in g] for g in groups], dtype=torch.float32, device="cpu"),
        success=torch.tensor([[r.score.success for r in g] for g in groups], dtype=torch.bool, device="cpu"),
        keys=[[r.score.key for r in g] for g in groups],
    )
    adv, stats = strategy.advantages(outcomes, off)
    advantages = adv.flatten().tolist()
    completions = [r.completion.ids for r in rows]
    masks: list[list[bool] | None] = [r.completion.mask for r in rows]
    behaviour = [r.completion.logps for r in rows]
    kinds = [SOLUTION] * len(rows)
    solved = list(advantages)
    for source in sources:
        added = source.policy_rows(rows, solved, algo)
        if added is None:
            continue
        contexts += added.contexts
        completions += added.completions
        masks += [None] * len(added.contexts)
        behaviour += added.behaviour_logps
        advantages += added.advantages
        off_policy += [False] * len(added.contexts)  # scored in the context that drew it
        kinds += [added.kind] * len(added.contexts)
    return LossInputs(
        contexts=contexts,
        completions=completions,
        masks=masks,
        behaviour_logps=behaviour,
        advantages=torch.tensor(advantages, dtype=torch.float32, device=device),
        off_policy=torch.tensor(off_policy, dtype=torch.bool, device=device),
        kinds=kinds,
        solution=torch.tensor([k == SOLUTION for k in kinds], dtype=torch.bool, device=device),
        solutions=[None if r.score.key is None else (tuple(r.prompt_ids), r.score.key) for r in rows],
        stats=stats,
        rollouts=rows,
    )


def behaviour_tensor(logps: Sequence[Sequence[float]], response_mask: Tensor) -> Tensor:
    """The behaviour log-probs as a (rows, T) tensor shaped like ``response_mask`` and on its device, 0 past each
    row's end (padded as lists and made one tensor: a copy per row would be one host-to-device transfer each)."""
    width = response_mask.shape[1]
    rows = [[*lp, *[0.0] * (width - len(lp))] for lp in logps]
    return torch.tensor(rows, dtype=response_mask.dtype, device=response_mask.device).view(response_mask.shape)


def updates_per_batch(algo: AlgoConfig) -> int:
    """Optimizer steps per batch (``algo.ppo_epochs`` x ``algo.minibatches``): above 1 the ratio is taken against
    the old policy, whose weights the earlier steps have moved away from."""
    return algo.ppo_epochs * algo.minibatches


def weighs_rows(algo: AlgoConfig, strategy: OffPolicy, off_policy: Tensor) -> bool:
    """Whether the update needs truncated importance weights: ``loss_context=is`` (every row), or an off-policy
    strategy that needs them (``algo.off_policy=weight_negatives``) with an off-policy row in the batch."""
    return algo.loss_context == "is" or (strategy.needs_weights and bool(off_policy.any()))


def importance_weights(
    old: Tensor, behaviour: Tensor, response_mask: Tensor, off_policy: Tensor, clip: float
) -> Tensor:
    """Truncated importance weight of each whole row, min(c, pi(y|x) / pi(y|ctx)): ``old`` (rows, T) are the
    log-probs under the scored context, ``behaviour`` (rows, T) under the context that drew the row; -> (rows,).
    A row scored in the context that drew it (every row a source added) gets exactly 1, not 1 up to float noise
    between the cached sampling pass and this forward."""
    log_w = torch.where(off_policy, ((old - behaviour) * response_mask).sum(1), 0.0)
    return torch.exp(log_w).clamp(max=clip)


def optimizer_step(
    loss: Tensor,
    optimizer: torch.optim.Optimizer,
    params: Iterable[torch.nn.Parameter],
    dist: SingleProcess,
    max_grad_norm: float,
    lr: float,
) -> float:
    """Backward, gradients averaged over data-parallel replicas, clipped to ``max_grad_norm``, one optimizer step
    at learning rate ``lr``; returns the gradient norm before clipping. ``params``: the trainable parameters."""
    params = list(params)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    for p in params:  # a mini-batch of skipped rows only: zero, as a full pass would give
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    dist.average_gradients(params)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    return float(grad_norm)
