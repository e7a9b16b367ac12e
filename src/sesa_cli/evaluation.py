"""Evaluation of a policy on validation instances: success, pass@k, coverage@k, distinct@k, entropy, and (where the
task can enumerate its solutions) exact policy metrics.

One object, :class:`Evaluation`, owns the protocol (``eval.*``), the samplers, the seed of the draws, the exact policy
metrics and the row they make; the run's own evaluations (``Trainer.evaluate``) and ``sesa eval`` both use it, so
``sesa eval`` of a run's checkpoint reproduces the run's evaluation row at that step exactly (same draws:
:func:`eval_generator`).

Evaluation samples ``n`` completions per instance from the plain prompt, i.i.d. (``sampler=parallel``, what a user of
the trained model does), or with the run's sequential sampler when asked; with a sequential sampler the n samples are
not i.i.d. and pass@k reads as the expected best-of-k over random k-subsets of the n drawn (see sesa_cli.metrics).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sesa_cli import metrics as M
from sesa_cli.collapse import input_dependence
from sesa_cli.config import EvalProtocolConfig, SamplerConfig
from sesa_cli.devices import auto_batch_rows
from sesa_cli.exact import ExactPolicy, PolicySnapshot
from sesa_cli.models.policy import Policy
from sesa_cli.rollout.rollouts import Expansion, Rollout
from sesa_cli.rollout.samplers import ParallelSampler, Sampler
from sesa_cli.tasks.base import Task


def validation_instances(task: Task, protocol: EvalProtocolConfig) -> list[Any]:
    """The protocol's validation instances: ``eval.instances`` of the task's validation split (null = the task's own
    count, ``Task.eval_instances``)."""
    n = task.eval_instances if protocol.instances is None else protocol.instances
    return [task.instance("val", i) for i in range(n)]


def describe_protocol(instances: int, samples: int, temperature: float, sampler: str = "parallel") -> str:
    """The evaluation protocol in words, printed with its numbers (``sampler``: the sampler that drew them)."""
    how = "i.i.d. from the plain prompt" if sampler == "parallel" else f"chains of the {sampler} sampler"
    return (
        f"protocol: {instances} instances x {samples} samples ({how}, temperature {temperature:g}) + 1 greedy "
        "answer each (eval.instances, eval.samples)"
    )


def draw(
    sampler: Sampler, instances: Sequence[Any], n: int, generator: torch.Generator, max_rows: int = 0
) -> list[list[Rollout]]:
    """n samples per instance (``Sampler.draw``: i.i.d. from the plain prompt for a parallel sampler, else groups of
    the sampler).

    ``max_rows`` > 0 draws the instances in chunks of at most ``max_rows // n`` (at least one), so a large model's
    KV cache and prefill never hold every instance x n rows at once (``model.max_batch_rows``).
    """
    if max_rows and len(instances) * n > max_rows:
        per = max(1, max_rows // n)
        chunks = [draw(sampler, instances[s : s + per], n, generator) for s in range(0, len(instances), per)]
        return [group for chunk in chunks for group in chunk]
    return sampler.draw(instances, n, generator)


def rollout_stats(rows: Sequence[Rollout]) -> dict[str, float]:
    """:func:`sesa_cli.metrics.rollout_stats` of drawn rollouts (one pool: a training batch, or one instance's
    samples): success, validity, token entropy, lengths, episode turns, grader timeouts."""
    return M.rollout_stats(
        rewards=[r.score.reward for r in rows],
        success=[r.score.success for r in rows],
        valid=[r.score.key is not None for r in rows],
        token_entropies=[e for r in rows for e in r.completion.policy_entropies],
        lengths=[r.completion.n_sampled for r in rows],
        turns=None if rows[0].completion.mask is None else [M.episode_turns(r.completion.mask) for r in rows],
        grader_timeouts=[r.score.grader_timeout for r in rows],
    )


def step_rollout_metrics(task: Task, groups: Sequence[Sequence[Rollout]], found: set[str]) -> dict[str, float]:
    """The ``rollout/*`` metrics of a training step's groups: reward statistics, :func:`rollout_stats`, the group
    diversity, the answers' dependence on the prompt (sesa_cli.collapse.input_dependence), and where the task knows
    its instances' targets, ``rollout/coverage`` and ``rollout/targets_found`` (:func:`target_coverage`; ``found``,
    the targets the run has hit so far, gains this step's)."""
    rows = [r for g in groups for r in g]
    keys = [r.score.key for r in rows]
    correct = [r.score.success for r in rows]
    rewards = [[r.score.reward for r in g] for g in groups]
    stats = {**M.reward_stats(rewards), **rollout_stats(rows), **M.group_diversity(keys, correct, len(groups[0])),
             **input_dependence([tuple(r.prompt_ids) for r in rows], keys)}  # fmt: skip
    out = {f"rollout/{k}": v for k, v in stats.items()}
    coverage = target_coverage(task, groups)
    if coverage is not None:
        share, hit = coverage
        found |= hit
        out["rollout/coverage"] = share
        out["rollout/targets_found"] = len(found)
    return out


def target_coverage(task: Task, groups: Sequence[Sequence[Rollout]]) -> tuple[float, set[str]] | None:
    """(share of its targets a step's rollouts hit, the target keys hit): each group against its own instance's
    targets (``Task.target_keys``; Countdown's differ per puzzle), groups on the same targets pooled (the path task's
    one hidden set: the share of it the whole step hit), the share averaged over the distinct target sets. None when
    no group's instance has targets. A target is named by its key: the keys of different instances' targets never
    coincide on sesa's tasks (a Countdown key names its numbers)."""
    pooled: dict[frozenset[str], set[str]] = {}
    for group in groups:
        targets = task.target_keys(group[0].inst) if group else None
        if targets:
            pooled.setdefault(targets, set()).update(r.score.key for r in group if r.score.key in targets)
    if not pooled:
        return None
    hit = set().union(*pooled.values())
    return sum(len(h) / len(t) for t, h in pooled.items()) / len(pooled), hit


def summarize(task: Task, groups: Sequence[Sequence[Rollout]], prefix: str = "eval/") -> dict[str, float]:
    """Average over instances of the per-instance metrics of its n samples (n = len of each group): the
    :func:`rollout_stats`, Cover@τ (:func:`sesa_cli.metrics.cover_at`) and the @k metrics at k = 1, 2, 4, ..., n
    (every k: :func:`success_counts`); grader timeouts are counted over all samples."""
    n = len(groups[0])
    ks = M.power_of_two_ks(n)
    per = []
    for group in groups:
        keys = [r.score.key for r in group]
        correct = [r.score.success for r in group]
        c = sum(correct)
        stats = rollout_stats(group)
        targets = task.target_keys(group[0].inst)
        for tau in M.COVER_TAUS:
            stats[f"cover@{tau:g}"] = M.cover_at([c], [n], tau)  # the mean over instances is the share
        for k in ks:
            stats[f"pass@{k}"] = M.pass_at_k(n, c, k)
            stats[f"distinct@{k}"] = M.distinct_at_k(keys, k)
            stats[f"distinct_correct@{k}"] = M.distinct_correct_at_k(keys, correct, k)
            if targets:
                stats[f"coverage@{k}"] = M.coverage_at_k(keys, targets, k)
        per.append(stats)
    return {prefix + key: value for key, value in M.mean_over_pools(per).items()}


def success_counts(step: int, groups: Sequence[Sequence[Rollout]]) -> dict[str, Any]:
    """One ``eval_counts.jsonl`` line: per instance, how many of its samples succeeded (``correct``) out of how many
    (``samples``). pass@k for *every* k up to n follows from it exactly (:func:`sesa_cli.metrics.pass_at_k`: the
    report's pass@k curve), where the evaluation row holds k = 1, 2, 4, ..., n."""
    return {
        "step": step,
        "samples": [len(g) for g in groups],
        "correct": [sum(r.score.success for r in g) for g in groups],
    }


def greedy_summary(
    sampler: ParallelSampler, instances: Sequence[Any], max_rows: int = 0, prefix: str = "eval/"
) -> dict[str, float]:
    """Success and reward of one greedy answer (or episode) per instance, from the plain prompt: verl's validation
    default (``val_kwargs.do_sample=False``). ``sampler`` must be built with ``greedy=True``."""
    if sampler.params.temperature != 0:
        raise ValueError("greedy_summary needs a sampler built with greedy=True")
    groups = draw(sampler, instances, 1, torch.Generator().manual_seed(0), max_rows)
    return {
        prefix + "greedy_success": float(np.mean([g[0].score.success for g in groups])),
        prefix + "greedy_reward": float(np.mean([g[0].score.reward for g in groups])),
    }


def sample_records(groups: Sequence[Sequence[Rollout]], decode: Any) -> list[dict[str, Any]]:
    """JSON-ready rows for samples.jsonl: context, completion, reward, success, key (and sketch, and
    ``stop_forced`` when the sampler closed a cut item with the stop)."""
    rows = []
    for g, group in enumerate(groups):
        for r in group:
            row: dict[str, Any] = {
                "group": g,
                "context": decode(r.context_ids),
                "completion": r.text,
                "reward": r.score.reward,
                "success": r.score.success,
                "key": r.score.key,
                "tokens": len(r.completion.ids),
                "stopped": r.completion.stopped,
            }
            if isinstance(r.origin, Expansion):
                row["sketch"] = r.origin.sketch.text
            if r.stop_forced:
                row["stop_forced"] = True
            rows.append(row)
    return rows


EVAL_SEED_OFFSET = 10_000
"""The evaluation draws' generator is seeded ``EVAL_SEED_OFFSET + seed`` (:func:`eval_generator`): apart from the
training draws' generator (seeded ``seed``), so evaluating never moves training."""


def eval_generator(seed: int) -> torch.Generator:
    """The generator of an evaluation's draws: the one rule for every evaluation of a run, ``sesa eval`` included.

    Seeded from the run's seed alone, fresh for each evaluation: every evaluation of a run draws with the same random
    numbers (common random numbers: two steps' rows differ by the policy, not by the draws), and ``sesa eval`` of any
    of its checkpoints draws what the run's evaluation at that step drew."""
    return torch.Generator().manual_seed(EVAL_SEED_OFFSET + seed)


@dataclass
class EvalResult:
    """One evaluation: its row (``step``, ``eval/*`` and, where the task enumerates its solutions, ``policy/*``),
    the drawn groups (samples.jsonl, chain health) and the exact probabilities' ``policy_probs.jsonl`` line (None
    without a solution space)."""

    row: dict[str, Any]
    groups: list[list[Rollout]]
    policy_record: dict[str, Any] | None


class Evaluation:
    """The evaluation protocol of one policy: ``eval.samples`` samples on each of the ``eval.instances`` validation
    instances drawn by ``sampler`` (default: i.i.d. from the plain prompt, what the run's own evaluations do) with
    the generator of :func:`eval_generator`, one greedy answer each, and the exact ``policy/*`` metrics
    (:class:`sesa_cli.exact.ExactPolicy`) where the task can enumerate its solutions, else (when the samples are the plain prompt's
    i.i.d. draws) ``estimate/effective_solutions`` with its interval over the instances.

    ``Trainer.evaluate`` and ``sesa eval`` both call :meth:`run`; built from the same config (``sesa eval ckpt=``
    reloads the run's) they draw the same samples and give the same row."""

    def __init__(
        self,
        task: Task,
        policy: Policy,
        sampler_cfg: SamplerConfig,
        protocol: EvalProtocolConfig,
        seed: int,
        dtype: str = "float32",
        max_rows: int = 0,
        sampler: Sampler | None = None,
    ) -> None:
        """``sampler_cfg``: the sampling settings (temperature, ...); ``sampler``: what draws the samples (None = a
        plain-prompt :class:`ParallelSampler` of ``sampler_cfg``); ``max_rows``: ``model.max_batch_rows`` (0: chosen by
        the policy's device, :func:`sesa_cli.devices.auto_batch_rows`; the exact policy's passes keep their 256)."""
        self.task = task
        self.seed = seed
        self.samples = protocol.samples
        self.max_rows = max_rows or auto_batch_rows(policy.model)
        self.instances = validation_instances(task, protocol)
        self.plain = ParallelSampler(sampler_cfg, task, policy, dtype)  # the plain prompt, whatever draws
        self.sampler: Sampler = sampler if sampler is not None else self.plain
        self.greedy = ParallelSampler(sampler_cfg, task, policy, dtype, greedy=True)
        self.exact = ExactPolicy(
            self.plain,
            self.instances[: protocol.policy_instances],
            rows=max_rows or 256,
            min_prob=protocol.walk_min_prob,
            max_branches=protocol.walk_branches,
        )
        self.sampler_name = "parallel" if self.sampler is self.plain else sampler_cfg.name
        self.temperature = sampler_cfg.temperature

    def describe(self) -> str:
        """The protocol in words (:func:`describe_protocol`)."""
        return describe_protocol(len(self.instances), self.samples, self.temperature, self.sampler_name)

    def run(self, step: int, snapshot: PolicySnapshot | None = None) -> EvalResult:
        """Evaluate the policy as it is now, labelled ``step``. ``snapshot``: the exact solution probabilities of these
        weights when the caller already scored them (``ExactPolicy.snapshot``), else they are scored here."""
        groups = draw(self.sampler, self.instances, self.samples, eval_generator(self.seed), self.max_rows)
        row: dict[str, Any] = {
            "step": step,
            **summarize(self.task, groups),
            **greedy_summary(self.greedy, self.instances, self.max_rows),
        }
        record = None
        if self.exact.available:
            snapshot = self.exact.snapshot() if snapshot is None else snapshot
            row.update(snapshot.summary(self.samples))
            record = snapshot.record(step)
            if self.sampler is self.plain:  # the check needs the plain prompt's i.i.d. draws
                row.update(snapshot.against_samples(groups))
        elif self.sampler is self.plain:
            # no exact policy: the plain-prompt samples' estimate of it, named as one (their i.i.d. draws only)
            keys = [[r.score.key for r in g] for g in groups]
            correct = [[r.score.success for r in g] for g in groups]
            row.update({f"estimate/{k}": v for k, v in M.policy_estimate(keys, correct).items()})
        return EvalResult(row, groups, record)
