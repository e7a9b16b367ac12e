"""Evaluation of a policy on validation instances: success, pass@k, coverage@k, distinct@k, entropy.

Evaluation samples ``n`` completions per instance from the plain prompt, i.i.d. (``sampler=parallel``, what a user of
the trained model does), or with the run's sequential sampler when asked; with a sequential sampler the n samples are
not i.i.d. and pass@k reads as the expected best-of-k over random k-subsets of the n drawn (see sesa_cli.metrics).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sesa_cli import metrics as M
from sesa_cli.rollout.samplers import ParallelSampler, Rollout, Sampler
from sesa_cli.tasks.base import Task


def draw(
    sampler: Sampler, instances: Sequence[Any], n: int, generator: torch.Generator, max_rows: int = 0
) -> list[list[Rollout]]:
    """n samples per instance: i.i.d. from the plain prompt for a parallel sampler, else groups of the sampler.

    ``max_rows`` > 0 draws the instances in chunks of at most ``max_rows // n`` (at least one), so a large model's
    KV cache and prefill never hold every instance x n rows at once (``model.max_batch_rows``).
    """
    if max_rows and len(instances) * n > max_rows:
        per = max(1, max_rows // n)
        chunks = [draw(sampler, instances[s : s + per], n, generator) for s in range(0, len(instances), per)]
        return [group for chunk in chunks for group in chunk]
    if isinstance(sampler, ParallelSampler):
        return sampler.sample_plain(instances, n, generator)
    groups: list[list[Rollout]] = [[] for _ in instances]
    while len(groups[0]) < n:
        for g, group in enumerate(sampler.sample(instances, generator)):
            groups[g].extend(group)
    return [g[:n] for g in groups]


def summarize(task: Task, groups: Sequence[Sequence[Rollout]], prefix: str = "eval/") -> dict[str, float]:
    """Average over instances of the per-instance metrics of its n samples (n = len of each group)."""
    n = len(groups[0])
    ks = M.power_of_two_ks(n)
    per: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        per.setdefault(prefix + key, []).append(float(value))

    for group in groups:
        keys = [r.score.key for r in group]
        correct = [r.score.success for r in group]
        c = sum(correct)
        add("success", c / n)
        add("reward", float(np.mean([r.score.reward for r in group])))
        add("valid", sum(k is not None for k in keys) / n)
        ents = [e for r in group for e in r.completion.policy_entropies]
        add("entropy", float(np.mean(ents)) if ents else 0.0)
        add("response_len", float(np.mean([r.completion.n_sampled for r in group])))
        targets = task.target_keys(group[0].inst)
        for k in ks:
            add(f"pass@{k}", M.pass_at_k(n, c, k))
            add(f"distinct@{k}", M.distinct_at_k(keys, k))
            add(f"distinct_correct@{k}", M.distinct_correct_at_k(keys, correct, k))
            if targets:
                add(f"coverage@{k}", M.coverage_at_k(keys, targets, k))
    return {k: float(np.mean(v)) for k, v in per.items()}


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
            if r.sketch is not None:
                row["sketch"] = r.sketch
            if r.stop_forced:
                row["stop_forced"] = True
            rows.append(row)
    return rows
