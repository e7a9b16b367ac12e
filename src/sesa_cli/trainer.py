"""The RL loop: draw groups -> learn from them -> metrics, evaluations and checkpoints.

The update itself is the learner's (sesa_cli.learner.Learner: optimizer, reference, scorer, loss terms); the loop
never names a method. No config parsing and no printing here beyond the ``on_step`` and ``phase`` progress hooks; the
command layer owns both.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sesa_cli.collapse import CollapseMonitor
from sesa_cli.compute import ComputeLedger
from sesa_cli.config import TrainConfig
from sesa_cli.distributed import SingleProcess
from sesa_cli.evaluation import Evaluation, sample_records, step_rollout_metrics, success_counts
from sesa_cli.exact import PolicySnapshot
from sesa_cli.learner import Learner, NonFiniteLossError
from sesa_cli.models.policy import Policy
from sesa_cli.rollout.filters import Filters, build_filters
from sesa_cli.rollout.rollouts import Rollout
from sesa_cli.rollout.samplers import make_sampler
from sesa_cli.runs import RunDir
from sesa_cli.tasks.base import Task

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["NonFiniteLossError", "Trainer"]

log = logging.getLogger(__name__)

StepHook = Callable[[int, dict[str, Any]], None]
PhaseHook = Callable[[str], contextlib.AbstractContextManager[Any]]


def _no_phase(label: str) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()


class Trainer:
    """Owns the samplers, the learner, the evaluation and the run dir of one training run."""

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
        self.sampler = make_sampler(cfg.sampler, task, policy, cfg.model.dtype)
        self.filters = Filters(build_filters(cfg.sampler.filters))
        # one generator for the run: the sampler's draws and the learner's mini-batch orders, in the order they come
        self.generator = torch.Generator().manual_seed(self.dist.seed(cfg.seed))
        self.learner = Learner(cfg, task, policy, self.generator, self.dist, reference, sources=[self.sampler])
        self.step = 0
        self.next_instance = 0
        self.found_targets: set[str] = set()
        # The evaluation (sesa_cli.evaluation.Evaluation, the one sesa eval builds from this run's config). Its exact
        # policy/* metrics on the validation instances, where the task can enumerate their solutions, are in training
        # rows every train.policy_every steps too (the collapse monitor reads them).
        m = cfg.model
        self.evaluation = Evaluation(task, policy, cfg.sampler, cfg.eval, cfg.seed, m.dtype, m.max_batch_rows)
        self.exact = self.evaluation.exact
        self._snapshot: tuple[int, PolicySnapshot] | None = None  # (step, snapshot): one scoring per step
        c = cfg.collapse
        self.monitor = CollapseMonitor(
            window=c.window,
            max_effective_solutions=c.max_effective_solutions,
            max_solution_entropy=c.max_solution_entropy,
            max_distinct_correct=c.max_distinct_correct,
            min_entropy=c.min_entropy,
            policy=self.exact.fixed and cfg.train.policy_every > 0,
        )
        self.resumed = False
        """Set when the run continues its own checkpoint (``train.resume=auto``): no second start evaluation."""
        self.between_steps = True
        """False while a step is under way (sampling to its checkpoint): the state is not one a checkpoint can hold."""
        self.saved_step: int | None = None
        """The step of the last checkpoint this trainer wrote or loaded."""
        self.compute = ComputeLedger(self.dist.world)
        """Tokens, FLOPs and seconds by phase (sesa_cli.compute): carried by checkpoints, in run.json at the end."""
        self._last_groups: list[list[Rollout]] = []  # the latest step's rollouts, for sample dumps

    # ------------------------------------------------------------------ sampling
    def _draw_batch(self) -> tuple[list[list[Rollout]], int]:
        """B groups, and the extra sampling rounds a refilling filter took (sesa_cli.rollout.filters.Filters.draw)."""

        def draw(need: int) -> list[list[Rollout]]:
            first, self.next_instance = self.next_instance, self.next_instance + need
            index = self.dist.instance_index
            return self.sampler.sample([self.task.instance("train", index(first + i)) for i in range(need)],
                                       self.generator)  # fmt: skip

        return self.filters.draw(draw, self.local_batch)

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        with self.compute.phase("sample"):
            groups, resample_rounds = self._draw_batch()
        t_sample = time.perf_counter() - t0
        # rollout/*: statistics of what the sampler drew (with a sequential sampler, of the chain, not of the
        # plain-prompt policy); train/*: the training procedure; policy/*: the plain-prompt policy, exactly.
        row: dict[str, Any] = {"step": self.step + 1, **step_rollout_metrics(self.task, groups, self.found_targets)}
        health = self.sampler.chain_health(groups)  # sketches or solutions per chain position
        if health is not None:
            row.update({f"chain/{k}": v for k, v in health.scalars().items()})
        if self.filters.refilling:
            row["train/resample_rounds"] = resample_rounds
        trained = self.filters.trained(groups)
        if self.filters.choosing:
            row["train/kept_groups"] = len(trained)
        row["optim/lr"] = self.learner.lr(self.step)
        t1 = time.perf_counter()
        with self.compute.phase("update"):
            row.update(self.learner.step(trained, self.step))
        t_update = time.perf_counter() - t1
        self.step += 1
        row["compute/train_flops"] = self.compute.train_flops
        row["compute/sampled_tokens"] = self.compute.sampled_tokens
        row["compute/scored_tokens"] = self.compute.scored_tokens
        every = self.cfg.train.policy_every
        if self.exact.fixed and every and self.step % every == 0:
            # the policy after this step's update: the weights its checkpoint would hold
            t2 = time.perf_counter()
            with self.compute.phase("policy"):
                row.update(self.policy_snapshot().summary(self.cfg.eval.samples))
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
    def policy_snapshot(self) -> PolicySnapshot:
        """The exact solution probabilities of the current weights (:class:`sesa_cli.exact.PolicySnapshot`),
        scored once per step."""
        if self._snapshot is None or self._snapshot[0] != self.step:
            self._snapshot = (self.step, self.exact.snapshot())
        return self._snapshot[1]

    def evaluate(self) -> dict[str, Any]:
        """Validation: ``eval/*`` from ``eval.samples`` i.i.d. plain-prompt samples per instance and a greedy
        answer; where the task can enumerate its solutions, the exact ``policy/*`` metrics, and a line of
        ``policy_probs.jsonl`` with the probability of every target and of every solution with p >= 0.001."""
        if not self.dist.is_main:  # the replicas are identical: rank 0 evaluates for all
            return {"step": self.step}
        with self.compute.phase("eval"):
            result = self.evaluation.run(self.step, self.policy_snapshot() if self.exact.available else None)
        if result.policy_record is not None:
            self.run.log_policy_probs(result.policy_record)
        self.run.log_eval_counts(success_counts(self.step, result.groups))
        return result.row

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Weights (or the LoRA adapter only), tokenizer, optimizer, RNG and trainer state (with the loss terms'
        own); rank 0 writes."""
        if not self.dist.is_main:
            return self.run.checkpoint_dir(self.step)
        # A failed write (a full disk, a read-only or vanished dir, a second Ctrl-C) removes the partial step_N.tmp
        # and says in one line what happened (RunDir.writing).
        final = self.run.checkpoint_dir(self.step)
        with self.compute.phase("checkpoint"), self.run.writing(final, cleanup=final.with_name(final.name + ".tmp")):
            tmp = self.run.begin_checkpoint(self.step)
            self.model.save_pretrained(tmp)
            self.policy.tokenizer.save_pretrained(tmp)
            torch.save(self.learner.optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save({"generator": self.generator.get_state()}, tmp / "rng.pt")
            state = {
                "step": self.step,
                "next_instance": self.next_instance,
                "found_targets": sorted(self.found_targets),
                "terms": self.learner.state_dict(),
                "collapse": self.monitor.state_dict(),
                "collapsed": self.monitor.collapsed,
                "config": asdict(self.cfg),
                "compute": self.compute.state_dict(),
            }
            (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2, default=str))
            final = self.run.commit_checkpoint(tmp, self.step)
        self.saved_step = self.step
        self.run.write_csv()
        return final

    def load_checkpoint(self, ckpt: Path, restore_optimizer: bool = True) -> None:
        """Restore optimizer, step counter, data position, the loss terms' state, monitor and RNG (weights are
        loaded with the policy)."""
        state = json.loads((ckpt / "trainer_state.json").read_text())
        self.step = int(state["step"])
        if ckpt.resolve().parent == self.run.checkpoints.resolve():  # this run's own (train.resume=auto)
            self.saved_step = self.step
        self.next_instance = int(state["next_instance"])
        self.found_targets = set(state.get("found_targets", []))
        # a checkpoint written before the terms were objects holds the found term's memory as found_solutions
        terms = state.get("terms", {"found": state["found_solutions"]} if "found_solutions" in state else {})
        self.learner.load_state_dict(terms)
        self.monitor.load_state_dict(state["collapse"])
        if "compute" in state:
            self.compute.load_state_dict(state["compute"], str(ckpt / "trainer_state.json"))
        else:  # a checkpoint from before runs counted their compute: the counts cover this run's steps only
            self.compute.from_step = self.step
        if restore_optimizer:
            opt_state = torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=True)
            self.learner.optimizer.load_state_dict(opt_state)
        rng = ckpt / "rng.pt"
        if rng.is_file():
            self.generator.set_state(torch.load(rng, weights_only=True)["generator"])

    # ------------------------------------------------------------------ the loop
    def fit(self, on_step: StepHook | None = None, phase: PhaseHook | None = None) -> dict[str, Any]:
        """Train until train.steps; returns the last training row merged with the final evaluation. ``phase(label)``
        wraps each evaluation and checkpoint (the command shows them as they run). However the run ends (finished,
        failed, interrupted), run.json records its compute (:meth:`record_compute`)."""
        try:
            final = self._fit(on_step, phase)
        except BaseException:
            with contextlib.suppress(Exception):  # the error under way is what the user must see, not this one
                self.record_compute()
            raise
        self.record_compute()
        return final

    def record_compute(self) -> None:
        """run.json's ``compute``: the ledger's counts so far (sesa_cli.compute.ComputeLedger.block)."""
        self.run.add_run_info(compute=self.compute.block())

    def _fit(self, on_step: StepHook | None, phase: PhaseHook | None) -> dict[str, Any]:
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
