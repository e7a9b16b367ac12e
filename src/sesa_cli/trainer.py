"""The RL loop: sample groups -> score -> advantages -> clipped policy-gradient update -> metrics and checkpoints.

No config parsing and no printing here beyond the ``on_step`` and ``phase`` progress hooks; the command layer owns both.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sesa_cli import algos
from sesa_cli import metrics as M
from sesa_cli.collapse import CollapseMonitor
from sesa_cli.config import TrainConfig
from sesa_cli.distributed import SingleProcess
from sesa_cli.evaluation import Evaluation, rollout_stats, sample_records
from sesa_cli.models.lora import is_lora, reference
from sesa_cli.models.policy import Policy
from sesa_cli.rollout.samplers import Rollout, make_sampler
from sesa_cli.rollout.scoring import ScoringBatch, build_batch, completion_logps, join_rows, select_rows
from sesa_cli.runs import RunDir
from sesa_cli.tasks.base import Task
from sesa_cli.update import (
    FoundSolutions,
    LossInputs,
    behaviour_tensor,
    importance_weights,
    loss_inputs,
    old_logps,
    optimizer_step,
    updates_per_batch,
    weighs_rows,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)

StepHook = Callable[[int, dict[str, Any]], None]
PhaseHook = Callable[[str], contextlib.AbstractContextManager[Any]]


def _no_phase(label: str) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()


class NonFiniteLossError(RuntimeError):
    pass


class Trainer:
    """Owns the policy, optimizer, samplers and run dir of one training run."""

    def __init__(
        self,
        cfg: TrainConfig,
        task: Task,
        policy: Policy,
        run: RunDir,
        dist: SingleProcess | None = None,
        reference: PreTrainedModel | None = None,
    ) -> None:
        """``reference``: the KL reference model when it is not the policy as given (a revived run passes its
        lineage's base, see sesa_cli.models.reference); None = a frozen copy of ``policy``, the run's start."""
        self.cfg = cfg
        self.task = task
        self.policy = policy
        self.run = run
        self.model = policy.model
        # Data parallelism (sesa_cli.distributed): one process by default, where every call below is the identity.
        self.dist = dist or SingleProcess()
        self.local_batch = self.dist.local_batch(cfg.train.batch_size)
        self.dist.broadcast_parameters(self.model)
        dtype = cfg.model.dtype
        self.sampler = make_sampler(cfg.sampler, task, policy, dtype)
        # the strategy sees the other replicas' rows through dist.gather (distinct_solutions counts over the batch)
        self.off_policy = algos.off_policy_strategy(cfg.algo, self.dist.gather)
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.trainable,
            lr=cfg.optim.lr,
            weight_decay=cfg.optim.weight_decay,
        )
        self.ref_model: PreTrainedModel | None = None
        if cfg.algo.kl_coef > 0 and not is_lora(self.model):
            # LoRA needs no copy: its reference is the same model with the adapter disabled (see _ref_logps).
            ref = reference if reference is not None else copy.deepcopy(self.model)
            ref.eval().requires_grad_(False)
            self.ref_model = ref
        self.generator = torch.Generator().manual_seed(self.dist.seed(cfg.seed))
        self.step = 0
        self.next_instance = 0
        self.found_targets: set[str] = set()
        self.found = FoundSolutions()
        """``algo.found_coef``'s memory of the solutions drawn with success (filled only when the term is on)."""
        # The evaluation (sesa_cli.evaluation.Evaluation, the one sesa eval builds from this run's config). Its exact
        # policy/* metrics on the validation instances, where the task can enumerate their solutions, are in training
        # rows every train.policy_every steps too (the collapse monitor reads them).
        self.evaluation = Evaluation(task, policy, cfg.sampler, cfg.eval, cfg.seed, dtype, cfg.model.max_batch_rows)
        self.val_instances = self.evaluation.instances
        self.exact = self.evaluation.exact
        self._exact_probs: tuple[int, list[np.ndarray]] | None = None  # (step, probs): one scoring per step
        self.monitor = CollapseMonitor(
            window=cfg.collapse.window,
            max_effective_solutions=cfg.collapse.max_effective_solutions,
            max_solution_entropy=cfg.collapse.max_solution_entropy,
            max_distinct_correct=cfg.collapse.max_distinct_correct,
            min_entropy=cfg.collapse.min_entropy,
            policy=self.exact.fixed and cfg.train.policy_every > 0,
        )
        self.nonfinite = 0
        self.resumed = False
        """Set when the run continues its own checkpoint (``train.resume=auto``): no second start evaluation."""
        self.between_steps = True
        """False while a step is under way (sampling to its checkpoint): the state is not one a checkpoint can hold."""
        self.saved_step: int | None = None
        """The step of the last checkpoint this trainer wrote or loaded."""
        self._last_groups: list[list[Rollout]] = []  # the latest step's rollouts, for sample dumps
        self.norm_constant = cfg.algo.norm_constant or task.cfg.max_new_tokens

    # ------------------------------------------------------------------ sampling
    def _draw_batch(self) -> tuple[list[list[Rollout]], int]:
        """B groups; with DAPO dynamic sampling, zero-std groups are dropped and refilled (capped, counted)."""
        b = self.local_batch
        kept: list[list[Rollout]] = []
        rounds = 0
        while True:
            need = b - len(kept)
            instances = [
                self.task.instance("train", self.dist.instance_index(self.next_instance + i)) for i in range(need)
            ]
            self.next_instance += need
            groups = self.sampler.sample(instances, self.generator)
            if not self.cfg.algo.dynamic_sampling:
                return groups, 0
            rewards = torch.tensor([[r.score.reward for r in g] for g in groups])
            keep = ~algos.zero_std_groups(rewards)
            flags = keep.tolist()
            kept.extend(g for g, k in zip(groups, flags, strict=True) if k)
            if len(kept) >= b or rounds >= self.cfg.algo.max_resample_rounds:
                # Cap reached: fill the batch with this round's zero-std groups (they carry no signal, but the batch
                # size and so the step's token budget stay what the config says).
                dropped = [g for g, k in zip(groups, flags, strict=True) if not k]
                kept.extend(dropped[: max(0, b - len(kept))])
                return kept[:b], rounds
            rounds += 1

    # ------------------------------------------------------------------ update
    def loss_inputs(self, groups: list[list[Rollout]]) -> LossInputs:
        """The rows the update trains on (sesa_cli.update.loss_inputs); with ``algo.found_coef``, the rows drawn with
        success (the off-policy ones, or every one with ``algo.found_rows=all``) join the memory of found solutions."""
        inputs = loss_inputs(groups, self.off_policy, self.cfg.sampler)
        if self.cfg.algo.found_coef > 0:
            rows = [r for g in groups for r in g]
            off = inputs.off_policy[: inputs.n_solutions].tolist()
            every = self.cfg.algo.found_rows == "all"
            self.found.add([r for r, o in zip(rows, off, strict=True) if o or every], self.dist.gather)
        return inputs

    def update(self, inputs: LossInputs) -> dict[str, float]:
        """One update on ``inputs``: ``algo.ppo_epochs`` passes of ``algo.minibatches`` optimizer steps; returns the
        ``loss/*`` statistics (each mini-batch's metrics averaged) and ``optim/grad_norm``."""
        algo, optim = self.cfg.algo, self.cfg.optim
        batch = build_batch(inputs.contexts, inputs.completions, int(self.policy.tokenizer.pad_token_id), inputs.masks)
        old, seq_weights, advantages, stats = self._off_policy_terms(inputs, batch)
        ref = self._ref_logps(batch) if algo.kl_coef > 0 else None
        follow = self._follow_batch(inputs) if algo.follow_coef > 0 and inputs.follow else None
        found = self._found_batch(inputs) if algo.found_coef > 0 else None
        if found is not None:
            stats["loss/found_solutions"] = float(found.response_mask.shape[0])
        several = updates_per_batch(algo) > 1
        # With no KL or entropy term, the rows a zero-at-zero-advantage loss gives nothing (every row of a zero-std
        # group) need no forward pass; they still count in the aggregation.
        skip_zero = algos.zero_at_zero_advantage(algo.loss) and algo.kl_coef == 0 and algo.entropy_coef == 0
        n = batch.response_mask.shape[0]
        sums: dict[str, list[float]] = {}
        norms: list[float] = []
        self.model.train()
        for _epoch in range(algo.ppo_epochs):
            order = torch.randperm(n, generator=self.generator) if several else torch.arange(n)
            for chunk in order.chunk(algo.minibatches):
                sub = select_rows(batch, chunk)
                live = advantages[chunk] != 0 if skip_zero else None
                follow_sub = None if follow is None else self._follow_rows(*follow, chunk)
                # padding-free, the follow rows ride in the mini-batch's pass; padded, a solve prompt and one token
                # would take the mini-batch's width, so they keep a pass of their own (below, where it always was)
                joined = follow_sub if self.cfg.model.padding_free else None
                logps, ents, follow_logps = self._minibatch_logps(
                    sub, live, None if old is None else old[chunk], joined
                )
                old_sub = old[chunk] if several and old is not None else logps.detach()
                loss, m = algos.compute_loss(
                    logps,
                    old_sub,
                    advantages[chunk],
                    sub.response_mask,
                    algo,
                    ref_logps=None if ref is None else ref[chunk],
                    entropies=ents if algo.entropy_coef > 0 else None,
                    seq_weights=None if seq_weights is None else seq_weights[chunk],
                    norm_constant=self.norm_constant,
                )
                if follow_sub is not None and joined is None:
                    follow_logps = self._score(self.model, follow_sub)[0]
                if follow_logps is not None:
                    nll = -follow_logps[:, 0].mean()
                    loss = loss + algo.follow_coef * nll
                    m["follow_nll"] = float(nll.detach())
                if found is not None:
                    nll = self._found_nll(found)
                    loss = loss + algo.found_coef * nll
                    m["found_nll"] = float(nll.detach())
                if not self._finite(loss):
                    continue
                lr = optim.lr * self.lr_scale()
                norms.append(optimizer_step(loss, self.optimizer, self.trainable, self.dist, optim.max_grad_norm, lr))
                m["total"] = float(loss.detach())
                for k, v in m.items():
                    sums.setdefault(k, []).append(v)
        self.model.eval()
        # A statistic of the whole batch (the importance weights of its solution rows) is not replaced by the mean
        # of compute_loss's per-mini-batch values of it.
        stats.update({f"loss/{k}": float(np.mean(v)) for k, v in sums.items() if f"loss/{k}" not in stats})
        if norms:
            stats["optim/grad_norm"] = float(np.mean(norms))
        return stats

    def _follow_batch(self, inputs: LossInputs) -> tuple[torch.Tensor, ScoringBatch]:
        """``algo.follow_coef``'s rows: (the (n,) solution rows they belong to, a scoring batch of each one's solve
        prompt and its target token, ``Rollout.follow_token``)."""
        rows, contexts, firsts = zip(*inputs.follow, strict=True)
        pad = int(self.policy.tokenizer.pad_token_id)
        return torch.tensor(rows), build_batch(list(contexts), [[t] for t in firsts], pad)

    def _found_batch(self, inputs: LossInputs) -> ScoringBatch | None:
        """``algo.found_coef``'s rows: every found solution of the batch's plain prompts (every replica's), None when
        none has been found yet."""
        prompts = [
            s[0] for s in self.dist.gather([s for s in inputs.solutions[: inputs.n_solutions] if s is not None])
        ]
        contexts, completions, masks = self.found.rows(prompts)
        if not contexts:
            return None
        return build_batch(contexts, completions, int(self.policy.tokenizer.pad_token_id), masks)

    def _found_nll(self, batch: ScoringBatch) -> torch.Tensor:
        """Mean over the found solutions of -log pi(y | x), each completion's log-probs summed over its masked
        tokens."""
        logps, _ = self._score(self.model, batch)
        return -(logps * batch.response_mask).sum(1).mean()

    def _follow_rows(self, rows: torch.Tensor, batch: ScoringBatch, chunk: torch.Tensor) -> ScoringBatch | None:
        """The follow rows (solve prompt, target token) of the solution rows among the mini-batch's rows ``chunk``,
        None when it holds none; the term is the mean of -log pi(target token | solve prompt) over them."""
        picked = torch.isin(rows, chunk).nonzero().flatten()
        return select_rows(batch, picked) if picked.numel() else None

    def _off_policy_terms(
        self, inputs: LossInputs, batch: ScoringBatch
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor, dict[str, float]]:
        """What the update does about rows drawn off the context they are scored in: (the old policy's (rows, T)
        log-probs or None, the (rows,) importance weights of ``loss_context=is`` or None, the (rows,) advantages after
        the off-policy strategy (``algo.off_policy``), their ``loss/*`` statistics)."""
        scfg, dtype = self.cfg.sampler, self.cfg.model.dtype
        mask, off, n_sol = batch.response_mask, inputs.off_policy, inputs.n_solutions
        behaviour = behaviour_tensor(inputs.behaviour_logps, mask)
        weighted = weighs_rows(scfg, self.off_policy, off)
        old = old_logps(
            batch,
            behaviour,
            off,
            several_updates=updates_per_batch(self.cfg.algo) > 1,
            weighted=weighted,
            dtype=dtype,
            score=lambda b: self._score(self.model, b)[0],
        )
        stats: dict[str, float] = {"loss/off_policy_frac": float(off[:n_sol].float().mean()), **inputs.stats}
        weights = None
        if weighted:
            assert old is not None
            weights = importance_weights(old, behaviour, mask, off, scfg.is_clip)
        seq_weights = weights if scfg.loss_context == "is" else None
        if seq_weights is not None:
            stats["loss/is_weight_mean"] = float(seq_weights[:n_sol].mean())
            stats["loss/is_weight_max"] = float(seq_weights[:n_sol].max())
        advantages, adv_stats = self.off_policy.rows(inputs.advantages, off, weights, n_sol, inputs.solutions)
        return old, seq_weights, advantages, {**stats, **adv_stats}

    def _finite(self, loss: torch.Tensor) -> bool:
        """Whether ``loss`` is finite on every replica; a non-finite one skips its update, and
        ``train.max_nonfinite`` of them in a row stop the run."""
        if self.dist.all_finite(loss):
            self.nonfinite = 0
            return True
        self.nonfinite += 1
        log.warning("non-finite loss at step %d: update skipped", self.step)
        if self.nonfinite >= self.cfg.train.max_nonfinite:
            raise NonFiniteLossError(
                f"{self.nonfinite} consecutive non-finite losses; lower optim.lr or check the task reward"
            )
        self.optimizer.zero_grad(set_to_none=True)
        return False

    def _minibatch_logps(
        self, sub: ScoringBatch, live: torch.Tensor | None, old_sub: torch.Tensor | None, extra: ScoringBatch | None
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(logps, entropies) of a mini-batch, and the log-probs of ``extra``'s rows (the follow term's), scored in
        the same forward pass (None without them). Rows where ``live`` is False skip the forward pass: their
        log-probs are the old ones (``old_sub``, or 0 when the ratio is taken against the result itself), so their
        ratio is exactly 1, and no entropies are returned. Callers pass ``live`` only when such rows add nothing to
        the gradient."""
        rows = None if live is None or bool(live.all()) else live.nonzero().flatten()
        n, width = sub.targets.shape if rows is None else (rows.numel(), sub.targets.shape[1])
        parts = [sub if rows is None else select_rows(sub, rows)] if n else []
        parts += [] if extra is None else [extra]
        if not parts:  # no live row and no extra row
            return self._filler(sub, old_sub).requires_grad_(), None, None
        logps, ents = self._score(self.model, join_rows(parts, int(self.policy.tokenizer.pad_token_id)))
        extra_logps = None if extra is None else logps[n:, : extra.targets.shape[1]]
        if rows is None:
            return logps[:n, :width], ents[:n, :width], extra_logps
        if n == 0:
            return self._filler(sub, old_sub).requires_grad_(), None, extra_logps
        return self._filler(sub, old_sub).index_put((rows,), logps[:n, :width]), None, extra_logps

    @staticmethod
    def _filler(sub: ScoringBatch, old_sub: torch.Tensor | None) -> torch.Tensor:
        """The log-probs of a mini-batch's skipped rows: the old ones, or 0 when the ratio is taken against the
        result itself."""
        return torch.zeros_like(sub.response_mask) if old_sub is None else old_sub.detach().clone()

    def _score(self, model: Any, batch: ScoringBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(logps, entropies) of ``batch`` under ``model`` as every term of the update scores its rows: at the
        sampler's temperature, in ``model.dtype``, padded or packed (``model.padding_free``)."""
        m = self.cfg.model
        temp = self.cfg.sampler.temperature
        return completion_logps(model, batch, temp, dtype=m.dtype, padding_free=m.padding_free)

    def _ref_logps(self, batch: ScoringBatch) -> torch.Tensor:
        """(batch, T) log-probs under the KL reference: the initial weights, or for LoRA the adapter disabled."""
        with torch.no_grad():
            if self.ref_model is not None:
                return self._score(self.ref_model, batch)[0]
            with reference(self.model) as ref_model:
                return self._score(ref_model, batch)[0]

    def lr_scale(self) -> float:
        """The learning-rate multiplier of the coming step: linear warm-up, then optim.lr_schedule."""
        o = self.cfg.optim
        return algos.lr_scale(self.step, self.cfg.train.steps, o.warmup_steps, o.lr_schedule)

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        groups, resample_rounds = self._draw_batch()
        t_sample = time.perf_counter() - t0
        rows = [r for g in groups for r in g]
        keys = [r.score.key for r in rows]
        correct = [r.score.success for r in rows]
        # rollout/*: statistics of what the sampler drew (with a sequential sampler, of the chain, not of the
        # plain-prompt policy); train/*: the training procedure; policy/*: the plain-prompt policy, exactly.
        row: dict[str, Any] = {"step": self.step + 1}
        rewards = [[r.score.reward for r in g] for g in groups]
        stats = {**M.reward_stats(rewards), **rollout_stats(rows), **M.group_diversity(keys, correct, len(groups[0]))}
        row.update({f"rollout/{k}": v for k, v in stats.items()})
        targets = self.task.target_keys(groups[0][0].inst)
        if targets:
            hit = {k for k in keys if k in targets}
            self.found_targets |= hit
            row["rollout/coverage"] = len(hit) / len(targets)
            row["rollout/targets_found"] = len(self.found_targets)
        health = self.sampler.chain_health(groups)  # issue 16: sketches or solutions per chain position
        if health is not None:
            row.update({f"chain/{k}": v for k, v in health.scalars().items()})
        if self.cfg.algo.dynamic_sampling:
            row["train/resample_rounds"] = resample_rounds
        trained = groups
        if self.cfg.algo.rollout_filter_ratio < 1:
            keep = algos.top_std_groups(torch.tensor(rewards), self.cfg.algo.rollout_filter_ratio).tolist()
            trained = [g for g, k in zip(groups, keep, strict=True) if k]
            row["train/kept_groups"] = len(trained)
        row["optim/lr"] = self.cfg.optim.lr * self.lr_scale()
        t1 = time.perf_counter()
        row.update(self.update(self.loss_inputs(trained)))
        t_update = time.perf_counter() - t1
        self.step += 1
        every = self.cfg.train.policy_every
        if self.exact.fixed and every and self.step % every == 0:
            # the policy after this step's update: the weights its checkpoint would hold
            t2 = time.perf_counter()
            row.update(self.exact.summary(self._policy_probs(), self.cfg.eval.samples))
            row["time/policy_s"] = time.perf_counter() - t2
        row = self.dist.mean_metrics(row)
        flagged = self.monitor.update(self.step, row)
        row["collapse/flag"] = int(flagged)
        row["time/sample_s"] = t_sample
        row["time/update_s"] = t_update
        row["time/step_s"] = time.perf_counter() - t0
        self._last_groups = groups
        return row

    # ------------------------------------------------------------------ evaluation
    def _policy_probs(self) -> list[np.ndarray]:
        """The exact solution probabilities of the current weights, scored once per step."""
        if self._exact_probs is None or self._exact_probs[0] != self.step:
            self._exact_probs = (self.step, self.exact.probs())
        return self._exact_probs[1]

    def evaluate(self) -> dict[str, Any]:
        """Validation: ``eval/*`` from ``eval.samples`` i.i.d. plain-prompt samples per instance and a greedy
        answer; where the task can enumerate its solutions, the exact ``policy/*`` metrics, and a line of
        ``policy_probs.jsonl`` with the probability of every target and of every solution with p >= 0.001."""
        if not self.dist.is_main:  # the replicas are identical: rank 0 evaluates for all
            return {"step": self.step}
        result = self.evaluation.run(self.step, self._policy_probs() if self.exact.available else None)
        if result.policy_record is not None:
            self.run.log_policy_probs(result.policy_record)
        return result.row

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Weights (or the LoRA adapter only), tokenizer, optimizer, RNG and trainer state; rank 0 writes."""
        if not self.dist.is_main:
            return self.run.checkpoint_dir(self.step)
        # A failed write (a full disk, a read-only or vanished dir, a second Ctrl-C) removes the partial step_N.tmp
        # and says in one line what happened (RunDir.writing).
        final = self.run.checkpoint_dir(self.step)
        with self.run.writing(final, cleanup=final.with_name(final.name + ".tmp")):
            tmp = self.run.begin_checkpoint(self.step)
            self.model.save_pretrained(tmp)
            self.policy.tokenizer.save_pretrained(tmp)
            torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save({"generator": self.generator.get_state()}, tmp / "rng.pt")
            state = {
                "step": self.step,
                "next_instance": self.next_instance,
                "found_targets": sorted(self.found_targets),
                "found_solutions": self.found.state_dict(),
                "collapse": self.monitor.state_dict(),
                "collapsed": self.monitor.collapsed,
                "config": asdict(self.cfg),
            }
            (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2, default=str))
            final = self.run.commit_checkpoint(tmp, self.step)
        self.saved_step = self.step
        self.run.write_csv()
        return final

    def load_checkpoint(self, ckpt: Path, restore_optimizer: bool = True) -> None:
        """Restore optimizer, step counter, data position, monitor and RNG (weights are loaded with the policy)."""
        state = json.loads((ckpt / "trainer_state.json").read_text())
        self.step = int(state["step"])
        if ckpt.resolve().parent == self.run.checkpoints.resolve():  # this run's own (train.resume=auto)
            self.saved_step = self.step
        self.next_instance = int(state["next_instance"])
        self.found_targets = set(state.get("found_targets", []))
        if self.cfg.algo.found_coef > 0:  # a run without the term neither remembers nor uses them
            self.found.load_state_dict(state.get("found_solutions", []))
        self.monitor.load_state_dict(state["collapse"])
        if restore_optimizer:
            opt_state = torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=True)
            self.optimizer.load_state_dict(opt_state)
        rng = ckpt / "rng.pt"
        if rng.is_file():
            self.generator.set_state(torch.load(rng, weights_only=True)["generator"])

    # ------------------------------------------------------------------ the loop
    def fit(self, on_step: StepHook | None = None, phase: PhaseHook | None = None) -> dict[str, Any]:
        """Train until train.steps; returns the last training row merged with the final evaluation. ``phase(label)``
        wraps each evaluation and checkpoint (the command shows them as they run)."""
        tc = self.cfg.train
        phase = phase or _no_phase
        last: dict[str, Any] = {}
        if tc.eval_before and self.step < tc.steps and not self.resumed:
            with phase(f"evaluation of the start (step {self.step})"):
                self.run.log_metrics(self.evaluate())
        try:
            while self.step < tc.steps:
                self.between_steps = False  # from here to the end of the step, a checkpoint would be torn
                row = self.train_step()
                self.run.log_metrics(row)
                if tc.sample_every and self.step % tc.sample_every == 0:
                    self.run.dump_samples(self.step, sample_records(self._last_groups, self.policy.decode))
                if tc.eval_every and self.step % tc.eval_every == 0 and self.step < tc.steps:
                    with phase(f"evaluation (step {self.step})"):
                        ev = self.evaluate()
                    self.run.log_metrics(ev)
                    row = {**row, **ev}
                if tc.checkpoint_every and self.step % tc.checkpoint_every == 0 and self.step < tc.steps:
                    with phase(f"checkpoint (step {self.step})"):
                        self.save_checkpoint()
                last = row
                self.between_steps = True
                if on_step is not None:
                    on_step(self.step, row)
        except KeyboardInterrupt:
            if self.step > 0 and self.between_steps:
                path = self.run.checkpoint_dir(self.step)
                if self.saved_step != self.step:
                    with phase(f"checkpoint (step {self.step})"):
                        path = self.save_checkpoint()
                log.warning("interrupted: checkpoint saved to %s", path)
            elif self.step > 0:
                # Stopped at once inside a step (a second signal): its prompts and random draws are consumed and
                # the weights may be half-updated, so a checkpoint of this state would not resume exactly.
                log.warning("interrupted inside a step: no checkpoint of it (the last is step %s)", self.saved_step)
            raise
        with phase(f"final evaluation (step {self.step})"):
            ev = self.evaluate()
        self.run.log_metrics(ev)
        with phase(f"checkpoint (step {self.step})"):
            self.save_checkpoint()
        self.dist.barrier()
        return {**last, **ev}
