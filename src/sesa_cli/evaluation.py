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
from sesa_cli.config import EvalProtocolConfig, SamplerConfig
from sesa_cli.intervals import sampled_gap
from sesa_cli.models.policy import Policy
from sesa_cli.rollout.samplers import ParallelSampler, Rollout, Sampler
from sesa_cli.tasks.agent import AgentTask
from sesa_cli.tasks.base import Task
from sesa_cli.tasks.episode_tree import episode_tree


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


def summarize(task: Task, groups: Sequence[Sequence[Rollout]], prefix: str = "eval/") -> dict[str, float]:
    """Average over instances of the per-instance metrics of its n samples (n = len of each group): the
    :func:`rollout_stats` and the @k metrics at k = 1, 2, 4, ..., n; grader timeouts are counted over all samples."""
    n = len(groups[0])
    ks = M.power_of_two_ks(n)
    per = []
    for group in groups:
        keys = [r.score.key for r in group]
        correct = [r.score.success for r in group]
        c = sum(correct)
        stats = rollout_stats(group)
        targets = task.target_keys(group[0].inst)
        for k in ks:
            stats[f"pass@{k}"] = M.pass_at_k(n, c, k)
            stats[f"distinct@{k}"] = M.distinct_at_k(keys, k)
            stats[f"distinct_correct@{k}"] = M.distinct_correct_at_k(keys, correct, k)
            if targets:
                stats[f"coverage@{k}"] = M.coverage_at_k(keys, targets, k)
        per.append(stats)
    return {prefix + key: value for key, value in M.mean_over_pools(per).items()}


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


class ExactPolicy:
    """The probability of every solution of an instance under the plain prompt, for tasks that can enumerate them
    (``Task.solution_space``): exact ``policy/*`` metrics instead of estimates from drawn samples.

    Each solution y (its answer text, stop included) is scored π(y | x) = Σ over its spellings in tokens
    (``Policy.spellings``) of Π_j π(y_j | x, y_<j), by teacher forcing, at the sampling temperature, with the token
    masking the sampler applies (:meth:`sesa_cli.rollout.engine.Engine.completion_logps`: the prompt runs once and
    spellings that begin alike share their forward rows until they part). top_p/top_k truncation is not applied
    (the defaults disable it). Instances whose task returns no solution space are skipped; :attr:`available` says
    whether any instance has one.

    Agent tasks whose environment is deterministic and whose responses can be listed
    (``AgentTask.turn_responses``) have no fixed solution list: a solution is an episode's action sequence, and
    :meth:`probs` walks every episode the policy can play (sesa_cli.tasks.episode_tree, branches below
    ``min_prob`` pruned), so each call sets the instance's keys and targets; :meth:`summary` and :meth:`record`
    read those of the latest call, and add ``pruned_mass``.
    """

    def __init__(
        self,
        sampler: Sampler,
        instances: Sequence[Any],
        rows: int = 256,
        min_prob: float = 1e-4,
        max_branches: int = 32,
    ) -> None:
        """``sampler`` gives the policy, the prompt rendering and the temperature; ``rows`` bounds the rows scored in
        one forward pass (a real model's vocabulary makes each row's logits large). An agent task's episode tree is
        pruned below ``min_prob`` and to the ``max_branches`` most probable branches live at once (0 = no cap): 32
        cost ~0.3 s of one core per FrozenLake map at the near-uniform base (64 branches: 0.55 s; 2026-11-26,
        bench/evaluation.py's machine), whose mass is then mostly pruned. The cost is the forward passes' arithmetic:
        a turn's end feeds its feedback, so nearly every pass is branches x 23 columns, and walking several maps in
        one batch costs the same per row (32, 64 and 256 rows x 23 columns: 1.11, 1.11 and 1.14 ms a row)."""
        self.sampler = sampler
        self.rows = rows
        self.min_prob = min_prob
        self.max_branches = max_branches
        task, policy = sampler.task, sampler.policy
        self.prompts: list[list[int]] = []
        self.solutions: list[list[list[int]]] = []
        """Per instance, the token ids of every spelling of every solution (``Policy.spellings``)."""
        self.owners: list[np.ndarray] = []
        """Per instance, (spellings,) the solution (index into ``solution_space``) each spelling writes."""
        self.keys: list[list[str]] = []
        self.targets: list[np.ndarray] = []
        self.indices: list[int] = []
        self.episodes: dict[int, Any] = {}  # position in indices -> instance, for episode-tree instances
        self.pruned: dict[int, float] = {}  # position -> pruned mass of the latest probs()
        walkable = isinstance(task, AgentTask) and task.turn_responses() is not None
        for index, inst in enumerate(instances):
            space = task.solution_space(inst)
            if space is None:
                if walkable:
                    self.episodes[len(self.indices)] = inst
                    self.indices.append(index)
                    self.prompts.append(sampler.encode_prompt(task.prompt(inst)))
                    self.solutions.append([])
                    self.owners.append(np.zeros(0, dtype=np.int64))
                    self.keys.append([])
                    self.targets.append(np.zeros(0, dtype=bool))
                continue
            scores = [task.score(inst, text) for text in space]
            invalid = [text for text, sc in zip(space, scores, strict=True) if sc.key is None]
            if invalid:
                raise ValueError(f"task {task.name!r}: solution_space holds answers it scores invalid: {invalid[:3]}")
            self.indices.append(index)
            self.prompts.append(sampler.encode_prompt(task.prompt(inst)))
            spelled = [policy.spellings(text) for text in space]
            self.solutions.append([ids for spellings in spelled for ids in spellings])
            self.owners.append(np.array([s for s, spellings in enumerate(spelled) for _ in spellings], dtype=np.int64))
            self.keys.append([str(sc.key) for sc in scores])
            self.targets.append(np.array([sc.success for sc in scores], dtype=bool))

    @property
    def available(self) -> bool:
        return bool(self.indices)

    @property
    def fixed(self) -> bool:
        """Every instance has a fixed solution list (one teacher-forced pass each): cheap enough for training rows
        every ``train.policy_every`` steps. Episode trees are walked at evaluations only."""
        return self.available and not self.episodes

    def probs(self) -> list[np.ndarray]:
        """Per instance with a solution space, (S,) float64 π(y | x) of each solution, in ``solution_space`` order."""
        engine, temperature = self.sampler.engine, self.sampler.cfg.temperature
        out = []
        with torch.no_grad():
            for j, (prompt, solutions) in enumerate(zip(self.prompts, self.solutions, strict=True)):
                if j in self.episodes:
                    out.append(self._walk(j, prompt))
                    continue
                # In token order, the spellings of a chunk share the longest prefixes (scored once each).
                order = sorted(range(len(solutions)), key=lambda i: solutions[i])
                logps = torch.empty(len(solutions), dtype=torch.float64)
                for s in range(0, len(order), self.rows):
                    rows = order[s : s + self.rows]
                    logps[rows] = engine.completion_logps(prompt, [solutions[i] for i in rows], temperature)
                # a solution's probability is the sum over its spellings
                out.append(np.bincount(self.owners[j], weights=logps.exp().numpy(), minlength=len(self.keys[j])))
        return out

    def _walk(self, j: int, prompt: list[int]) -> np.ndarray:
        """Episode-tree instance ``j``: the probability of every action sequence played to its end; sets its keys,
        targets and pruned mass."""
        task = self.sampler.task
        assert isinstance(task, AgentTask)
        tree = episode_tree(
            task,
            self.sampler.policy,
            self.sampler.engine,
            prompt,
            self.episodes[j],
            self.sampler.cfg.temperature,
            self.min_prob,
            self.max_branches,
        )
        self.keys[j] = list(tree.probs)
        self.targets[j] = np.array([tree.success[key] for key in self.keys[j]], dtype=bool)
        self.pruned[j] = tree.pruned
        return np.array([tree.probs[key] for key in self.keys[j]], dtype=np.float64)

    def summary(self, probs: Sequence[np.ndarray], k: int, prefix: str = "policy/") -> dict[str, float]:
        """:func:`sesa_cli.metrics.policy_metrics` of each instance (``coverage@k`` at ``k``), averaged over them.

        Episode-tree instances: their targets are the winning action sequences the walk reached (not a fixed set), so
        ``coverage@k`` is left out; an instance with none has success mass 0 and no effective solution; and
        ``pruned_mass`` is the mean mass the walk cut."""
        per = []
        for j, (p, target) in enumerate(zip(probs, self.targets, strict=True)):
            if j in self.episodes:
                # a zero-probability target stands for "no winning episode reached": every metric reads it as 0
                metrics = M.policy_metrics(np.append(p, 0.0), np.append(target, True), k)
                del metrics[f"coverage@{k}"]
                metrics["pruned_mass"] = self.pruned[j]
                per.append(metrics)
            else:
                per.append(M.policy_metrics(p, target, k))
        return {prefix + key: float(np.mean([m[key] for m in per])) for key in per[0]}

    def against_samples(self, probs: Sequence[np.ndarray], groups: Sequence[Sequence[Rollout]]) -> dict[str, float]:
        """The sampled counterpart of ``policy/target_mass``: ``eval/exact_instances_success``, the share of the
        i.i.d. plain-prompt samples ``groups`` (one group per validation instance, in order) that succeed on the
        instances scored here, and ``policy/sampled_gap``, how far it lies from their exact success probability
        (:func:`sesa_cli.intervals.sampled_gap`). Where the two disagree the exact metrics do not describe what
        the policy does (issue 49: replies the parser forgave and the walk did not list)."""
        success = [[r.score.success for r in groups[index]] for index in self.indices]
        target = [float(p[t].sum()) for p, t in zip(probs, self.targets, strict=True)]
        pruned = [self.pruned.get(j, 0.0) for j in range(len(self.indices))]
        return {
            "eval/exact_instances_success": float(np.mean([np.mean(s) for s in success])),
            "policy/sampled_gap": sampled_gap(success, target, pruned),
        }

    def record(self, step: int, probs: Sequence[np.ndarray], min_prob: float = 1e-3) -> dict[str, Any]:
        """One ``policy_probs.jsonl`` line: per instance, the probability of every target and of any other solution
        with p >= ``min_prob``, by solution key (solutions × steps heatmaps are drawn from these)."""
        instances = []
        for index, keys, p, target in zip(self.indices, self.keys, probs, self.targets, strict=True):
            shown = target | (p >= min_prob)
            instances.append(
                {
                    "instance": index,
                    "targets": [key for key, t in zip(keys, target, strict=True) if t],
                    "probs": {key: float(v) for key, v, keep in zip(keys, p, shown, strict=True) if keep},
                }
            )
        return {"step": step, "instances": instances}


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
    (:class:`ExactPolicy`) where the task can enumerate its solutions, else (when the samples are the plain prompt's
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
        plain-prompt :class:`ParallelSampler` of ``sampler_cfg``); ``max_rows``: ``model.max_batch_rows``."""
        self.task = task
        self.seed = seed
        self.samples = protocol.samples
        self.max_rows = max_rows
        self.instances = validation_instances(task, protocol)
        self.plain = ParallelSampler(sampler_cfg, task, policy, dtype)  # the plain prompt, whatever draws
        self.sampler: Sampler = sampler if sampler is not None else self.plain
        self.greedy = ParallelSampler(sampler_cfg, task, policy, dtype, greedy=True)
        self.exact = ExactPolicy(self.plain, self.instances[: protocol.policy_instances], rows=max_rows or 256)
        self.sampler_name = "parallel" if self.sampler is self.plain else sampler_cfg.name
        self.temperature = sampler_cfg.temperature

    def describe(self) -> str:
        """The protocol in words (:func:`describe_protocol`)."""
        return describe_protocol(len(self.instances), self.samples, self.temperature, self.sampler_name)

    def run(self, step: int, probs: Sequence[np.ndarray] | None = None) -> EvalResult:
        """Evaluate the policy as it is now, labelled ``step``. ``probs``: the exact solution probabilities of these
        weights when the caller already scored them (``ExactPolicy.probs``), else they are scored here."""
        groups = draw(self.sampler, self.instances, self.samples, eval_generator(self.seed), self.max_rows)
        row: dict[str, Any] = {
            "step": step,
            **summarize(self.task, groups),
            **greedy_summary(self.greedy, self.instances, self.max_rows),
        }
        record = None
        if self.exact.available:
            probs = self.exact.probs() if probs is None else probs
            row.update(self.exact.summary(probs, self.samples))
            record = self.exact.record(step, probs)
            if self.sampler is self.plain:  # the check needs the plain prompt's i.i.d. draws
                row.update(self.exact.against_samples(probs, groups))
        elif self.sampler is self.plain:
            # no exact policy: the plain-prompt samples' estimate of it, named as one (their i.i.d. draws only)
            keys = [[r.score.key for r in g] for g in groups]
            correct = [[r.score.success for r in g] for g in groups]
            row.update({f"estimate/{k}": v for k, v in M.policy_estimate(keys, correct).items()})
        return EvalResult(row, groups, record)
