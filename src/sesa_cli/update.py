"""The pieces of one policy update, in the order :meth:`sesa_cli.trainer.Trainer.update` runs them: the loss inputs
of a batch of groups, the old policy's log-probs, the truncated importance weights, and the optimizer step. The
off-policy treatment of the advantages is the strategy ``algo.off_policy`` names (sesa_cli/algos/off_policy.py).

Shapes: ``rows`` is the number of scored sequences of the update (every solution, then one row per sketch with
``sampler.train_sketches``); ``T`` the longest completion among them (the width of a
:class:`~sesa_cli.rollout.scoring.ScoringBatch`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from sesa_cli.algos import OffPolicy
from sesa_cli.config import AlgoConfig, SamplerConfig
from sesa_cli.distributed import SingleProcess
from sesa_cli.rollout.samplers import Rollout
from sesa_cli.rollout.scoring import ScoringBatch, select_rows

Solution = tuple[tuple[int, ...], str] | None
"""(plain prompt ids, solution key) of a solution row, None when the answer has no key (unparseable)."""


@dataclass
class LossInputs:
    """The rows one update trains on: the solutions first (``n_solutions`` of them, group after group), then, with
    ``sampler.train_sketches``, one row per sketch. Every list has one entry per row."""

    contexts: list[list[int]]
    """Token ids each row is scored under: the plain prompt x, or (``sampler.loss_context=conditioned``, and every
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
    follow: list[tuple[int, list[int], int]]
    """Two-stage sampling: (row, solve-prompt ids, ``Rollout.follow_token``) of every solution row that has one, for
    ``algo.follow_coef``'s term."""


def loss_inputs(groups: Sequence[Sequence[Rollout]], strategy: OffPolicy, sampler: SamplerConfig) -> LossInputs:
    """Flatten groups into scored rows with advantages (``strategy``'s baseline: ``algo.off_policy``) and, when
    ``sampler.train_sketches``, sketch rows."""
    rewards = torch.tensor([[r.score.reward for r in g] for g in groups], dtype=torch.float32)
    rows = [r for g in groups for r in g]
    contexts = [r.context_ids if sampler.loss_context == "conditioned" else r.prompt_ids for r in rows]
    # The one definition of an off-policy row: drawn in a context other than the one it is scored in.
    off_policy = [r.context_ids != c for r, c in zip(rows, contexts, strict=True)]
    adv, stats = strategy.advantages(rewards, torch.tensor(off_policy, dtype=torch.bool).view(rewards.shape))
    advantages = adv.flatten().tolist()
    completions = [r.completion.ids for r in rows]
    masks: list[list[bool] | None] = [r.completion.mask for r in rows]
    behaviour = [r.completion.logps for r in rows]
    if sampler.train_sketches and rows and rows[0].sketch_completion is not None:
        # A sketch's advantage is the mean advantage of its solutions; sketches are scored in the context that drew
        # them (there is no "plain prompt" form of a sketch), so they are never off-policy. A sketch is never pushed
        # up when it repeats an earlier one of its chain (the chain is asked for sketches unlike the ones listed), nor
        # when none of its solutions carried it out (``Rollout.followed`` False: a malformed or ignored sketch takes no
        # credit for what its solutions won; where the task cannot tell, None, it does).
        by_sketch: dict[int, list[float]] = {}
        first: dict[int, Rollout] = {}
        carried: dict[int, bool] = {}  # some solution of the sketch carried it out, or the task cannot tell
        for r, a in zip(rows, advantages, strict=True):
            if r.sketch_completion is None:  # a row drawn from the plain prompt (sampler.parallel_rows)
                continue
            by_sketch.setdefault(id(r.sketch_completion), []).append(a)
            first.setdefault(id(r.sketch_completion), r)
            carried[id(r.sketch_completion)] = carried.get(id(r.sketch_completion), False) or r.followed is not False
        drafted: set[tuple[int, tuple[int, ...]]] = set()  # (group, sketch ids) of the sketches met so far
        for key, r in first.items():  # in chain order within each group
            assert r.sketch_completion is not None
            assert r.sketch_context_ids is not None
            contexts.append(r.sketch_context_ids)
            completions.append(r.sketch_completion.ids)
            masks.append(None)
            behaviour.append(r.sketch_completion.logps)
            advantage = float(np.mean(by_sketch[key]))
            sketch = (r.group, tuple(r.sketch_completion.ids))
            advantages.append(min(0.0, advantage) if sketch in drafted or not carried[key] else advantage)
            drafted.add(sketch)
            off_policy.append(False)
    return LossInputs(
        contexts=contexts,
        completions=completions,
        masks=masks,
        behaviour_logps=behaviour,
        advantages=torch.tensor(advantages),
        off_policy=torch.tensor(off_policy, dtype=torch.bool),
        n_solutions=len(rows),
        solutions=[None if r.score.key is None else (tuple(r.prompt_ids), r.score.key) for r in rows],
        stats=stats,
        follow=[(i, r.context_ids, r.follow_token) for i, r in enumerate(rows) if r.follow_token is not None],
    )


def behaviour_tensor(logps: Sequence[Sequence[float]], response_mask: Tensor) -> Tensor:
    """The behaviour log-probs as a (rows, T) tensor shaped like ``response_mask``, 0 past each row's end."""
    out = torch.zeros_like(response_mask)
    for i, lp in enumerate(logps):
        out[i, : len(lp)] = torch.tensor(lp)
    return out


def updates_per_batch(algo: AlgoConfig) -> int:
    """Optimizer steps per batch (``algo.ppo_epochs`` x ``algo.minibatches``): above 1 the ratio is taken against
    the old policy, whose weights the earlier steps have moved away from."""
    return algo.ppo_epochs * algo.minibatches


def weighs_rows(sampler: SamplerConfig, strategy: OffPolicy, off_policy: Tensor) -> bool:
    """Whether the update needs truncated importance weights: ``loss_context=is`` (every row), or an off-policy
    strategy that needs them (``algo.off_policy=weight_negatives``) with an off-policy row in the batch."""
    return sampler.loss_context == "is" or (strategy.needs_weights and bool(off_policy.any()))


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


class FoundSolutions:
    """``algo.found_coef``'s memory: per plain prompt, one completion of every distinct solution an off-policy row
    (:attr:`LossInputs.off_policy`) was drawn with, with success (``Score.success``), keyed by its solution key; the
    first one drawn is kept. Nothing of the task's hidden answers is read: a solution is in it only once some sampled
    row was rewarded for it. With parallel sampling no row is off-policy and nothing is remembered.

    The term it gives an update is the mean over the found solutions of the batch's prompts of -log pi(y | x) (the
    whole completion's log-prob under the plain prompt, observations masked): the cross-entropy of the policy to
    the uniform distribution over what was found, whose gradient pulls the policy toward every found solution alike
    (the one it already prefers least) and toward none outside the set."""

    def __init__(self) -> None:
        self.by_prompt: dict[tuple[int, ...], dict[str, tuple[list[int], list[bool] | None]]] = {}

    def add(self, rows: Sequence[Rollout], gather: Callable[[list[Any]], list[Any]]) -> None:
        """Remember the successful rows' solutions; ``gather`` (every data-parallel replica's, in rank order) makes
        every replica hold the whole batch's, so each computes the same term."""
        mine = [
            (tuple(r.prompt_ids), r.score.key, list(r.completion.ids), r.completion.mask)
            for r in rows
            if r.score.success and r.score.key is not None
        ]
        for prompt, key, ids, mask in gather(mine):
            self.by_prompt.setdefault(prompt, {}).setdefault(key, (ids, mask))

    def rows(
        self, prompts: Iterable[tuple[int, ...]]
    ) -> tuple[list[list[int]], list[list[int]], list[list[bool] | None]]:
        """(contexts, completions, masks) of every found solution of ``prompts`` (each prompt once)."""
        contexts: list[list[int]] = []
        completions: list[list[int]] = []
        masks: list[list[bool] | None] = []
        for prompt in dict.fromkeys(prompts):
            for ids, mask in self.by_prompt.get(prompt, {}).values():
                contexts.append(list(prompt))
                completions.append(ids)
                masks.append(mask)
        return contexts, completions, masks

    def state_dict(self) -> list[list[Any]]:
        """JSON-ready: [prompt ids, key, completion ids, mask] per found solution."""
        return [[list(p), k, ids, mask] for p, found in self.by_prompt.items() for k, (ids, mask) in found.items()]

    def load_state_dict(self, state: Sequence[Sequence[Any]]) -> None:
        self.by_prompt = {}
        for prompt, key, ids, mask in state:
            self.by_prompt.setdefault(tuple(prompt), {})[key] = (list(ids), mask)
