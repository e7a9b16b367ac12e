"""The exact plain-prompt policy: the probability of every solution of an instance, for tasks that can enumerate them.

Two kinds of instance, one class each:

* :class:`SolutionList`: the task lists every valid answer (``Task.solution_space``: the path task's leaves). Each
  solution y (its answer text, stop included) is scored π(y | x) = Σ over its spellings in tokens
  (``Policy.spellings``) of Π_j π(y_j | x, y_<j), by teacher forcing, at the sampling temperature, with the token
  masking the sampler applies (:meth:`sesa_cli.rollout.engine.Engine.completion_logps`: the prompt runs once and
  spellings that begin alike share their forward rows until they part).
* :class:`EpisodeWalk`: an agent task whose environment is deterministic and whose responses can be listed
  (``AgentTask.turn_responses``) has no fixed solution list: a solution is what an episode did (its key, the states
  it went through: ``task.solution_key``), and every episode the policy can play is walked
  (sesa_cli.rollout.episode_tree, branches below ``min_prob`` pruned); which solutions exist depends on the
  weights, and so does the mass the walk cut (``pruned_mass``).

:meth:`ExactPolicy.snapshot` scores the current weights once and returns a :class:`PolicySnapshot`, immutable: its
metrics (:meth:`PolicySnapshot.summary`) and its ``policy_probs.jsonl`` line (:meth:`PolicySnapshot.record`) read
that snapshot alone, never state a later scoring changed. top_p/top_k truncation is not applied (the defaults
disable it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sesa_cli import metrics as M
from sesa_cli.intervals import sampled_gap
from sesa_cli.rollout.episode_tree import episode_tree
from sesa_cli.rollout.rollouts import Rollout
from sesa_cli.rollout.samplers import Sampler
from sesa_cli.tasks.agent import AgentTask

__all__ = ["EpisodeWalk", "ExactPolicy", "InstanceProbs", "PolicySnapshot", "SolutionList"]


def _frozen(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@dataclass(frozen=True)
class InstanceProbs:
    """One instance's exact solution probabilities under one set of weights."""

    index: int
    """The validation instance (its index among the evaluation's instances)."""
    keys: tuple[str, ...]
    """Each solution's key (``Score.key``)."""
    probs: np.ndarray
    """(S,) float64 π(y | x) of each solution (read-only)."""
    targets: np.ndarray
    """(S,) bool: the solution succeeds (read-only)."""
    pruned: float | None = None
    """An episode walk's: the mass it cut (its targets are the winning episodes it reached, not a fixed set); None
    for a fixed solution list."""

    def metrics(self, k: int) -> dict[str, float]:
        """:func:`sesa_cli.metrics.policy_metrics` (``coverage@k`` at ``k``). A walk's instance leaves out
        ``coverage@k`` and adds ``pruned_mass``; one that reached no winning episode has success mass 0 and no
        effective solution."""
        if self.pruned is None:
            return M.policy_metrics(self.probs, self.targets, k)
        # a zero-probability target stands for "no winning episode reached": every metric reads it as 0
        metrics = M.policy_metrics(np.append(self.probs, 0.0), np.append(self.targets, True), k)
        del metrics[f"coverage@{k}"]
        metrics["pruned_mass"] = self.pruned
        return metrics


@dataclass(frozen=True)
class PolicySnapshot:
    """The exact policy of every scored instance under one set of weights."""

    instances: tuple[InstanceProbs, ...]

    def summary(self, k: int, prefix: str = "policy/") -> dict[str, float]:
        """:meth:`InstanceProbs.metrics` of each instance, averaged over them."""
        per = [inst.metrics(k) for inst in self.instances]
        return {prefix + key: float(np.mean([m[key] for m in per])) for key in per[0]}

    def against_samples(self, groups: Sequence[Sequence[Rollout]]) -> dict[str, float]:
        """The sampled counterpart of ``policy/target_mass``: ``eval/exact_instances_success``, the share of the
        i.i.d. plain-prompt samples ``groups`` (one group per validation instance, in order) that succeed on the
        instances scored here, and ``policy/sampled_gap``, how far it lies from their exact success probability
        (:func:`sesa_cli.intervals.sampled_gap`). Where the two disagree the exact metrics do not describe what
        the policy does (replies a lenient parser forgave and the walk did not list: docs/tasks.md, "What a valid reply is")."""
        success = [[r.score.success for r in groups[inst.index]] for inst in self.instances]
        target = [float(inst.probs[inst.targets].sum()) for inst in self.instances]
        pruned = [inst.pruned or 0.0 for inst in self.instances]
        return {
            "eval/exact_instances_success": float(np.mean([np.mean(s) for s in success])),
            "policy/sampled_gap": sampled_gap(success, target, pruned),
        }

    def record(self, step: int, min_prob: float = 1e-3) -> dict[str, Any]:
        """One ``policy_probs.jsonl`` line: per instance, the probability of every target and of any other solution
        with p >= ``min_prob``, by solution key (solutions × steps heatmaps are drawn from these)."""
        instances = []
        for inst in self.instances:
            shown = inst.targets | (inst.probs >= min_prob)
            instances.append(
                {
                    "instance": inst.index,
                    "targets": [key for key, t in zip(inst.keys, inst.targets, strict=True) if t],
                    "probs": {
                        key: float(v) for key, v, keep in zip(inst.keys, inst.probs, shown, strict=True) if keep
                    },
                }
            )
        return {"step": step, "instances": instances}


class SolutionList:
    """An instance whose task lists every valid answer: each scored by teacher forcing (module docstring)."""

    def __init__(self, sampler: Sampler, index: int, inst: Any, space: list[str], rows: int) -> None:
        """``space``: ``Task.solution_space(inst)``; ``rows`` bounds the rows scored in one forward pass."""
        task, policy = sampler.task, sampler.policy
        scores = [task.score(inst, text) for text in space]
        invalid = [text for text, sc in zip(space, scores, strict=True) if sc.key is None]
        if invalid:
            raise ValueError(f"task {task.name!r}: solution_space holds answers it scores invalid: {invalid[:3]}")
        self.sampler = sampler
        self.index = index
        self.rows = rows
        self.prompt = sampler.encode_prompt(task.prompt(inst))
        spelled = [policy.spellings(text) for text in space]
        self.spellings = [ids for spellings in spelled for ids in spellings]
        """The token ids of every spelling of every solution (``Policy.spellings``)."""
        self.owners = np.array([s for s, spellings in enumerate(spelled) for _ in spellings], dtype=np.int64)
        """(spellings,) the solution (index into ``space``) each spelling writes."""
        self.keys = tuple(str(sc.key) for sc in scores)
        self.targets = _frozen(np.array([sc.success for sc in scores], dtype=bool))

    def score(self) -> InstanceProbs:
        """The probabilities under the current weights: a solution's is the sum over its spellings."""
        engine, temperature = self.sampler.engine, self.sampler.cfg.temperature
        # In token order, the spellings of a chunk share the longest prefixes (scored once each).
        order = sorted(range(len(self.spellings)), key=lambda i: self.spellings[i])
        logps = torch.empty(len(self.spellings), dtype=torch.float64, device="cpu")  # read as numbers: the host
        with torch.no_grad():
            for s in range(0, len(order), self.rows):
                rows = order[s : s + self.rows]
                logps[rows] = engine.completion_logps(self.prompt, [self.spellings[i] for i in rows], temperature)
        probs = np.bincount(self.owners, weights=logps.exp().numpy(), minlength=len(self.keys))
        return InstanceProbs(self.index, self.keys, _frozen(probs), self.targets)


class EpisodeWalk:
    """An agent instance whose every episode is walked (module docstring)."""

    def __init__(self, sampler: Sampler, index: int, inst: Any, min_prob: float, max_branches: int) -> None:
        self.sampler = sampler
        self.index = index
        self.inst = inst
        self.min_prob = min_prob
        self.max_branches = max_branches
        self.prompt = sampler.encode_prompt(sampler.task.prompt(inst))

    def score(self) -> InstanceProbs:
        """The probability of every solution (episodes played to their end, by key) under the current weights."""
        task = self.sampler.task
        assert isinstance(task, AgentTask)  # ExactPolicy walks agent tasks only
        with torch.no_grad():
            tree = episode_tree(
                task,
                self.sampler.policy,
                self.sampler.engine,
                self.prompt,
                self.inst,
                self.sampler.cfg.temperature,
                self.min_prob,
                self.max_branches,
            )
        keys = tuple(tree.probs)
        targets = np.array([tree.success[key] for key in keys], dtype=bool)
        probs = np.array([tree.probs[key] for key in keys], dtype=np.float64)
        return InstanceProbs(self.index, keys, _frozen(probs), _frozen(targets), tree.pruned)


class ExactPolicy:
    """The exact plain-prompt policy on the instances whose solutions can be enumerated (the others are skipped;
    :attr:`available` says whether any instance can)."""

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
        task = sampler.task
        walkable = isinstance(task, AgentTask) and task.turn_responses() is not None
        self.instances: list[SolutionList | EpisodeWalk] = []
        for index, inst in enumerate(instances):
            space = task.solution_space(inst)
            if space is not None:
                self.instances.append(SolutionList(sampler, index, inst, space, rows))
            elif walkable:
                self.instances.append(EpisodeWalk(sampler, index, inst, min_prob, max_branches))

    @property
    def available(self) -> bool:
        return bool(self.instances)

    @property
    def fixed(self) -> bool:
        """Every instance has a fixed solution list (one teacher-forced pass each): cheap enough for training rows
        every ``train.policy_every`` steps. Episode trees are walked at evaluations only."""
        return self.available and all(isinstance(inst, SolutionList) for inst in self.instances)

    def snapshot(self) -> PolicySnapshot:
        """Every instance scored under the current weights."""
        return PolicySnapshot(tuple(inst.score() for inst in self.instances))
