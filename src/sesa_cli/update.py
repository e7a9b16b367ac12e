"""The pure pieces of one policy update, in the order :meth:`sesa_cli.learner.Learner.update` runs them: the loss
inputs of a batch of groups, the old policy's log-probs, the truncated importance weights, and the optimizer step.
The off-policy treatment of the advantages is the strategy ``algo.off_policy`` names (sesa_cli/algos/off_policy.py);
the loss terms that bring their own rows are sesa_cli.terms.

Shapes: ``rows`` is the number of scored sequences of the update (every solution, then one row per sketch with
``algo.train_sketches``); ``T`` the longest completion among them (the width of a
:class:`~sesa_cli.rollout.scoring.ScoringBatch`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from sesa_cli.algos import OffPolicy
from sesa_cli.config import AlgoConfig
from sesa_cli.distributed import SingleProcess
from sesa_cli.rollout.rollouts import Expansion, Rollout, Sketch
from sesa_cli.rollout.scoring import ScoringBatch, select_rows

Solution = tuple[tuple[int, ...], str] | None
"""(plain prompt ids, solution key) of a solution row, None when the answer has no key (unparseable)."""


@dataclass
class LossInputs:
    """The rows one update trains on: the solutions first (``n_solutions`` of them, group after group), then, with
    ``algo.train_sketches``, one row per sketch. Every list has one entry per row; the tensors live on the policy's
    device."""

    contexts: list[list[int]]
    """Token ids each row is scored under: the plain prompt x, or (``algo.loss_context=conditioned``, and every
    sketch row) the context that drew it."""
    completions: list[list[int]]
    """Token ids of each row's completion (for a multi-turn task the whole trajectory, observations included)."""
    masks: list[list[bool] | None]
    """Per completion token, True where it gets a loss (a trajectory's own tokens, not its observations); None =
    every token."""
    behaviour_logps: list[list[float]]
    """Per completion token, the log-prob recorded while sampling, in the context that drew the row."""
    advantages: Tensor
    """(rows,) float32: one advantage per row (a sketch's: the mean of its solutions')."""
    off_policy: Tensor
    """(rows,) bool: the row was drawn in a context other than the one it is scored in."""
    n_solutions: int
    """The first ``n_solutions`` rows are solutions; the rest are sketches."""
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
) -> LossInputs:
    """Flatten groups into scored rows with advantages (``strategy``'s baseline: ``algo.off_policy``) and, when
    ``algo.train_sketches``, one row per sketch of the stage-II solutions (:class:`Expansion` rows). ``bonus``: per
    solution row, added to its reward before the advantages (the loss terms' reward bonuses). The group advantages
    are computed on the host (a few numbers per group, read back as a list); the rows' tensors live on ``device``,
    the policy's, where they meet its log-probs."""
    rewards = torch.tensor([[r.score.reward for r in g] for g in groups], dtype=torch.float32, device="cpu")
    if bonus is not None:
        rewards = rewards + torch.tensor(bonus, dtype=torch.float32, device="cpu").view(rewards.shape)
    rows = [r for g in groups for r in g]
    contexts = [r.context_ids if algo.loss_context == "conditioned" else r.prompt_ids for r in rows]
    # The one definition of an off-policy row: drawn in a context other than the one it is scored in.
    off_policy = [r.context_ids != c for r, c in zip(rows, contexts, strict=True)]
    off = torch.tensor(off_policy, dtype=torch.bool, device="cpu").view(rewards.shape)
    penalties = torch.tensor([[r.score.penalty for r in g] for g in groups], dtype=torch.float32, device="cpu")
    adv, stats = strategy.advantages(rewards, off, penalties)
    advantages = adv.flatten().tolist()
    completions = [r.completion.ids for r in rows]
    masks: list[list[bool] | None] = [r.completion.mask for r in rows]
    behaviour = [r.completion.logps for r in rows]
    if algo.train_sketches:
        # A sketch's advantage is the mean advantage of its solutions (its stage-II expansions); sketches are scored
        # in the context that drew them (there is no "plain prompt" form of a sketch), so they are never off-policy.
        # A sketch is never pushed up when it repeats an earlier one of its chain (the chain is asked for sketches
        # unlike the ones listed), nor when none of its solutions carried it out (``Expansion.followed`` False: a
        # malformed or ignored sketch takes no credit for what its solutions won; where the task cannot tell, None,
        # it does).
        by_sketch: dict[int, list[float]] = {}
        first: dict[int, tuple[Rollout, Sketch]] = {}
        carried: dict[int, bool] = {}  # some solution of the sketch carried it out, or the task cannot tell
        for r, a in zip(rows, advantages, strict=True):
            if not isinstance(r.origin, Expansion):  # an i.i.d. or chain row: no sketch of its own
                continue
            key = id(r.origin.sketch)
            by_sketch.setdefault(key, []).append(a)
            first.setdefault(key, (r, r.origin.sketch))
            carried[key] = carried.get(key, False) or r.origin.followed is not False
        drafted: set[tuple[int, tuple[int, ...]]] = set()  # (group, sketch ids) of the sketches met so far
        for key, (r, s) in first.items():  # in chain order within each group
            contexts.append(s.context_ids)
            completions.append(s.completion.ids)
            masks.append(None)
            behaviour.append(s.completion.logps)
            advantage = float(np.mean(by_sketch[key]))
            sketch = (r.group, tuple(s.completion.ids))
            advantages.append(min(0.0, advantage) if sketch in drafted or not carried[key] else advantage)
            drafted.add(sketch)
            off_policy.append(False)
    return LossInputs(
        contexts=contexts,
        completions=completions,
        masks=masks,
        behaviour_logps=behaviour,
        advantages=torch.tensor(advantages, dtype=torch.float32, device=device),
        off_policy=torch.tensor(off_policy, dtype=torch.bool, device=device),
        n_solutions=len(rows),
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


def old_logps(
    batch: ScoringBatch,
    behaviour: Tensor,
    off_policy: Tensor,
    *,
    several_updates: bool,
    weighted: bool,
    dtype: str,
    score: Callable[[ScoringBatch], Tensor],
) -> Tensor | None:
    """(rows, T) log-probs of the rows under the policy as it was before this update, or None when nothing needs
    them (one update per batch without importance weights: each mini-batch's ratio is taken against its own
    detached log-probs, exactly 1).

    A row scored in the context that drew it (every row of parallel sampling or of ``loss_context=conditioned``, the
    ``sampler.parallel_rows`` rows, every sketch row) has the sampler's own log-probs ``behaviour`` as the old
    policy's (same weights, same tempered softmax), so in float32 the extra forward pass ``score`` (no grad) runs on
    the off-policy rows only. bf16 recomputes every row, as verl does."""
    if not (several_updates or weighted):
        return None
    if dtype != "float32":
        with torch.no_grad():
            return score(batch)
    if not off_policy.any():
        return behaviour
    rows = off_policy.nonzero().flatten()
    out = behaviour.clone()
    with torch.no_grad():
        out[rows] = score(select_rows(batch, rows))
    return out


def importance_weights(
    old: Tensor, behaviour: Tensor, response_mask: Tensor, off_policy: Tensor, clip: float
) -> Tensor:
    """Truncated importance weight of each whole row, min(c, pi(y|x) / pi(y|ctx)): ``old`` (rows, T) are the
    log-probs under the scored context, ``behaviour`` (rows, T) under the context that drew the row; -> (rows,).
    A row scored in the context that drew it (every sketch row) gets exactly 1, not 1 up to float noise between the
    cached sampling pass and this forward."""
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
