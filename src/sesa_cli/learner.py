"""The learner: one policy update from a batch of groups, ``learner.step(groups) -> metrics``.

It owns everything the update needs and nothing of the loop around it: the optimizer and its learning-rate schedule,
the KL reference policy, the :class:`~sesa_cli.rollout.scoring.Scorer` (padded or padding-free, and whether a term's
rows ride in a mini-batch's forward pass), the methods the config chooses (the advantage estimator, the policy loss,
the off-policy strategy, the loss terms that bring their own rows: each built once, sesa_cli.methods), the sources of
rows of their own (:class:`~sesa_cli.update.RowSource`, which the trainer passes in), and the epoch and
mini-batch loop. The trainer (sesa_cli.trainer) draws the groups, calls :meth:`Learner.step`, evaluates and
checkpoints; nothing here calls back into it.

One update (:meth:`Learner.update`): :meth:`Learner.prepare` makes the rows of :func:`sesa_cli.update.loss_inputs`
one scoring batch and computes once what every mini-batch reads (the old log-probs, the truncated importance weights,
the advantages after the off-policy strategy, each term's rows, the reference log-probs); then ``algo.ppo_epochs``
passes of ``algo.minibatches`` optimizer steps, each on :meth:`Learner.minibatch_loss`: the pure objective
(sesa_cli.algos.compute_loss) plus ``coef`` times each term's loss.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sesa_cli import algos
from sesa_cli.advantages import build_advantage
from sesa_cli.config import TrainConfig
from sesa_cli.distributed import SingleProcess
from sesa_cli.losses import build_loss
from sesa_cli.methods import check_methods
from sesa_cli.models.lora import is_lora, reference
from sesa_cli.models.policy import Policy
from sesa_cli.rollout.rollouts import Rollout
from sesa_cli.rollout.scoring import Scorer, ScoringBatch, select_rows
from sesa_cli.tasks.base import Task
from sesa_cli.terms import Term, TermContext, build_terms
from sesa_cli.update import (
    LossInputs,
    RowSource,
    behaviour_tensor,
    importance_weights,
    loss_inputs,
    optimizer_step,
    updates_per_batch,
    weighs_rows,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    """One update's batch as every mini-batch reads it (:meth:`Learner.prepare`); shapes as sesa_cli.update's."""

    batch: ScoringBatch
    """Every row of the update, scored as one batch."""
    advantages: torch.Tensor
    """(rows,) after the off-policy strategy's per-row treatment."""
    old: torch.Tensor | None
    """(rows, T) log-probs under the policy before the update, or None when no ratio needs them."""
    seq_weights: torch.Tensor | None
    """(rows,) truncated importance weights of ``algo.loss_context=is``, or None."""
    terms: list[tuple[Term, ScoringBatch, torch.Tensor | None]]
    """Each term that scores rows: (the term, its rows, the (rows,) update row each belongs to or None)."""
    stats: dict[str, float]
    """The update's ``loss/*`` statistics so far, and ``optim/no_signal``."""
    ref: torch.Tensor | None = None
    """(rows, T) log-probs under the KL reference (``algo.kl_coef`` > 0), or None."""
    entropies: bool = False
    """The objective reads the entropies (an entropy bonus, or a loss that reads them)."""
    skip_zero: bool = False
    """Rows of advantage 0 need no forward pass (a loss zero at zero advantage, no KL or entropy term)."""

    @property
    def signal(self) -> bool:
        """Whether the update has a policy-gradient signal (some advantage, or some term's rows)."""
        return not self.stats["optim/no_signal"]


class NonFiniteLossError(RuntimeError):
    """``train.max_nonfinite`` non-finite losses in a row: the run stops."""


class Learner:
    """The update of one training run: optimizer, reference, scorer, off-policy strategy and loss terms."""

    def __init__(
        self,
        cfg: TrainConfig,
        task: Task,
        policy: Policy,
        generator: torch.Generator,
        dist: SingleProcess | None = None,
        reference: PreTrainedModel | None = None,
        sources: Sequence[RowSource] = (),
    ) -> None:
        """``generator``: the run's one generator (mini-batch orders draw from it, between the sampler's draws);
        ``reference``: the KL reference model when it is not the policy as given (a revived run passes its
        lineage's base, see sesa_cli.models.reference); None = a frozen copy of the policy, the run's start;
        ``sources``: what adds rows of its own to the policy-gradient batch (sesa_cli.update.RowSource)."""
        self.cfg = cfg
        self.model = policy.model
        self.generator = generator
        self.dist = dist or SingleProcess()
        self.device = next(self.model.parameters()).device
        """Where every tensor of the update lives: the policy's device (its statistics come back as floats)."""
        m = cfg.model
        pad = int(policy.tokenizer.pad_token_id)
        self.scorer = Scorer(pad, cfg.sampler.temperature, m.dtype, m.padding_free, self.device)
        check_methods(cfg)  # the advantage, the loss and their settings (a library caller gets the command's checks)
        self.loss = build_loss(cfg.algo)
        # the strategy sees the other replicas' rows through dist.gather (distinct_solutions counts over the batch)
        self.off_policy = algos.off_policy_strategy(cfg.algo, self.dist.gather, build_advantage(cfg.algo))
        self.sources = list(sources)
        self.terms: list[Term] = build_terms(cfg.algo.terms, TermContext(task, policy.encode, self.dist.gather))
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trainable, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
        self.ref_model: PreTrainedModel | None = None
        if cfg.algo.kl_coef > 0 and not is_lora(self.model):
            # LoRA needs no copy: its reference is the same model with the adapter disabled (see ref_logps).
            ref = reference if reference is not None else copy.deepcopy(self.model)
            ref.eval().requires_grad_(False)
            self.ref_model = ref
        self.norm_constant = cfg.algo.norm_constant or task.cfg.max_new_tokens
        self.nonfinite = 0
        """Non-finite losses in a row (each skips its optimizer step)."""

    # ------------------------------------------------------------------ the entry
    def step(self, groups: list[list[Rollout]], step: int) -> dict[str, float]:
        """One update on ``groups`` at training step ``step`` (0-based, which sets the learning rate): the ``loss/*``
        statistics and ``optim/grad_norm``."""
        return self.update(self.inputs(groups), step)

    def inputs(self, groups: list[list[Rollout]]) -> LossInputs:
        """The rows the update of ``groups`` trains on (:func:`sesa_cli.update.loss_inputs`), the terms' reward
        bonuses (:meth:`sesa_cli.terms.Term.rewards`) added to the rewards the advantages are computed from."""
        rows = [r for g in groups for r in g]
        bonuses = [b for b in (term.rewards(rows) for term in self.terms) if b is not None]
        bonus = [sum(per_row) for per_row in zip(*bonuses, strict=True)] if bonuses else None
        return loss_inputs(groups, self.off_policy, self.cfg.algo, bonus, self.device, self.sources)

    def lr(self, step: int) -> float:
        """The learning rate of training step ``step`` (0-based): linear warm-up, then ``optim.lr_schedule``."""
        o = self.cfg.optim
        return o.lr * algos.lr_scale(step, self.cfg.train.steps, o.warmup_steps, o.lr_schedule)

    # ------------------------------------------------------------------ one update
    def update(self, inputs: LossInputs, step: int = 0) -> dict[str, float]:
        """One update on ``inputs``: ``algo.ppo_epochs`` passes of ``algo.minibatches`` optimizer steps; returns the
        ``loss/*`` statistics (each mini-batch's metrics averaged), ``optim/grad_norm`` and ``optim/no_signal``.
        A batch with no policy-gradient signal (every advantage 0, no loss term's rows) takes no step."""
        algo = self.cfg.algo
        prepared = self.prepare(inputs)
        stats = prepared.stats
        if not prepared.signal:
            # No policy-gradient signal: what is left of the loss is the entropy bonus and the KL penalty, and Adam
            # rescales any gradient to a learning-rate-sized step, so stepping would move the policy as far as a
            # real update does, along the bonus alone (measured 2026-12-07: with every advantage 0, a 0.003 entropy
            # bonus took a Pass@k run's entropy from 1.5 nats to uniform within four steps, and its replies to
            # invalid text).
            return stats
        n = prepared.batch.response_mask.shape[0]
        sums: dict[str, list[float]] = {}
        norms: list[float] = []
        skipped = 0  # mini-batches whose loss was not finite (each skips its optimizer step)
        self.model.train()
        for _epoch in range(algo.ppo_epochs):
            # the run's generator lives on the host (the sampler draws from it too): the order is drawn there
            if updates_per_batch(algo) > 1:
                order = torch.randperm(n, generator=self.generator, device="cpu").to(self.device)
            else:
                order = torch.arange(n, device=self.device)
            for chunk in order.chunk(algo.minibatches):
                loss, m = self.minibatch_loss(prepared, chunk)
                if not self._finite(loss, step):
                    skipped += 1
                    continue
                o = self.cfg.optim
                norms.append(optimizer_step(loss, self.optimizer, self.trainable, self.dist, o.max_grad_norm,
                                            self.lr(step)))  # fmt: skip
                m["total"] = float(loss.detach())
                for k, v in m.items():
                    sums.setdefault(k, []).append(v)
        self.model.eval()
        stats["optim/nonfinite_losses"] = float(skipped)
        # A statistic of the whole batch (the importance weights of its solution rows) is not replaced by the mean
        # of compute_loss's per-mini-batch values of it.
        stats.update({f"loss/{k}": float(np.mean(v)) for k, v in sums.items() if f"loss/{k}" not in stats})
        if norms:
            stats["optim/grad_norm"] = float(np.mean(norms))
        return stats

    def prepare(self, inputs: LossInputs) -> Prepared:
        """What every mini-batch of the update of ``inputs`` reads, computed once: the rows as one scoring batch, the
        old log-probs, the importance weights and the advantages after the off-policy strategy, each term's rows
        (every term observes the solution rows first), whether the update has a signal, and (when it has) the
        reference log-probs and which rows a mini-batch may skip."""
        algo = self.cfg.algo
        batch = self.scorer.batch(inputs.contexts, inputs.completions, inputs.masks)
        old, seq_weights, advantages, stats = self._off_policy_terms(inputs, batch)
        terms = self._term_rows(inputs, stats)
        stats["optim/no_signal"] = float(not terms and not bool(advantages.any()))
        prepared = Prepared(batch, advantages, old, seq_weights, terms, stats)
        if prepared.signal:
            prepared.ref = self.ref_logps(batch) if algo.kl_coef > 0 else None
            # the entropies: of an entropy bonus, or of a loss that reads them (PolicyLoss.needs_entropies)
            prepared.entropies = algo.entropy_coef > 0 or self.loss.needs_entropies
            # With no KL or entropy term, the rows a zero-at-zero-advantage loss gives nothing (every row of a
            # zero-std group) need no forward pass; they still count in the aggregation.
            prepared.skip_zero = self.loss.zero_at_zero_advantage and algo.kl_coef == 0 and not prepared.entropies
        return prepared

    def minibatch_loss(self, prepared: Prepared, chunk: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of the mini-batch of update rows ``chunk`` (indices into ``prepared``'s rows): the pure objective
        (sesa_cli.algos.compute_loss) plus ``coef`` times the loss of each term on the rows it scores for them, and
        the metrics of both."""
        sub = select_rows(prepared.batch, chunk)
        old = prepared.old
        live = prepared.advantages[chunk] != 0 if prepared.skip_zero else None
        extras = [(term, rows) for term, rows in ((t, _rows_of(b, owners, chunk)) for t, b, owners in prepared.terms)
                  if rows is not None]  # fmt: skip
        joined = [rows for _, rows in extras] if self.scorer.shares_passes else []
        logps, ents, extra_logps = self.scorer.minibatch(
            self.model, sub, live, None if old is None else old[chunk], joined
        )
        old_sub = old[chunk] if updates_per_batch(self.cfg.algo) > 1 and old is not None else logps.detach()
        loss, m = algos.compute_loss(
            logps,
            old_sub,
            prepared.advantages[chunk],
            sub.response_mask,
            self.cfg.algo,
            ref_logps=None if prepared.ref is None else prepared.ref[chunk],
            entropies=ents if prepared.entropies else None,
            seq_weights=None if prepared.seq_weights is None else prepared.seq_weights[chunk],
            norm_constant=self.norm_constant,
            loss=self.loss,
        )
        for i, (term, rows) in enumerate(extras):
            term_logps = extra_logps[i] if joined else self.scorer(self.model, rows)[0]
            term_loss, term_metrics = term.loss(term_logps, rows.response_mask)
            loss = loss + term.settings.coef * term_loss
            m.update(term_metrics)
        return loss, m

    def _term_rows(
        self, inputs: LossInputs, stats: dict[str, float]
    ) -> list[tuple[Term, ScoringBatch, torch.Tensor | None]]:
        """Each term that scores rows in this update: (the term, its rows as a scoring batch, the (rows,) update row
        each belongs to or None); every term observes the solution rows first, and its statistics join ``stats``."""
        out = []
        off = inputs.off_policy[inputs.solution].tolist()
        for term in self.terms:
            term.observe(inputs.rollouts, off)
            rows = term.rows(inputs.rollouts)
            if rows is None:
                continue
            stats.update({f"loss/{k}": v for k, v in rows.stats.items()})
            owners = None if rows.owners is None else torch.tensor(rows.owners, device=self.device)
            out.append((term, self.scorer.batch(rows.contexts, rows.completions, rows.masks), owners))
        return out

    def _off_policy_terms(
        self, inputs: LossInputs, batch: ScoringBatch
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor, dict[str, float]]:
        """What the update does about rows drawn off the context they are scored in: (the old policy's (rows, T)
        log-probs or None, the (rows,) importance weights of ``loss_context=is`` or None, the (rows,) advantages after
        the off-policy strategy (``algo.off_policy``), their ``loss/*`` statistics)."""
        algo = self.cfg.algo
        mask, off, solution = batch.response_mask, inputs.off_policy, inputs.solution
        behaviour = behaviour_tensor(inputs.behaviour_logps, mask)
        weighted = weighs_rows(algo, self.off_policy, off)
        several = updates_per_batch(algo) > 1
        old = self.scorer.old_logps(self.model, batch, behaviour, off, several_updates=several, weighted=weighted)
        stats: dict[str, float] = {"loss/off_policy_frac": float(off[solution].float().mean()), **inputs.stats}
        weights = None
        if weighted:
            assert old is not None
            weights = importance_weights(old, behaviour, mask, off, algo.is_clip)
        seq_weights = weights if algo.loss_context == "is" else None
        if seq_weights is not None:
            stats["loss/is_weight_mean"] = float(seq_weights[solution].mean())
            stats["loss/is_weight_max"] = float(seq_weights[solution].max())
        advantages, adv_stats = self.off_policy.rows(inputs.advantages, off, weights, solution, inputs.solutions)
        return old, seq_weights, advantages, {**stats, **adv_stats}

    def _finite(self, loss: torch.Tensor, step: int) -> bool:
        """Whether ``loss`` is finite on every replica; a non-finite one skips its update, and
        ``train.max_nonfinite`` of them in a row stop the run."""
        if self.dist.all_finite(loss):
            self.nonfinite = 0
            return True
        self.nonfinite += 1
        log.warning("non-finite loss at step %d: update skipped", step)
        if self.nonfinite >= self.cfg.train.max_nonfinite:
            raise NonFiniteLossError(
                f"{self.nonfinite} consecutive non-finite losses; lower optim.lr or check the task reward"
            )
        self.optimizer.zero_grad(set_to_none=True)
        return False

    def ref_logps(self, batch: ScoringBatch) -> torch.Tensor:
        """(batch, T) log-probs under the KL reference: the initial weights, or for LoRA the adapter disabled."""
        with torch.no_grad():
            if self.ref_model is not None:
                return self.scorer(self.ref_model, batch)[0]
            with reference(self.model) as ref_model:
                return self.scorer(ref_model, batch)[0]

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The terms' checkpoint state, by name (JSON-ready); the optimizer's is :attr:`optimizer`'s own."""
        return {term.name: term.state_dict() for term in self.terms}

    def load_state_dict(self, terms: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; a term not in it keeps its fresh state, a state of a term not on is dropped
        (a run without the term neither remembers nor uses it)."""
        for term in self.terms:
            if term.name in terms:
                term.load_state_dict(terms[term.name])


def _rows_of(batch: ScoringBatch, owners: torch.Tensor | None, chunk: torch.Tensor) -> ScoringBatch | None:
    """The rows of a term's ``batch`` that a mini-batch of update rows ``chunk`` scores: those whose owner is in it
    (in their order), every one when they have no owner; None when none."""
    if owners is None:
        return batch
    picked = torch.isin(owners, chunk).nonzero().flatten()
    return select_rows(batch, picked) if picked.numel() else None
