"""The collapse monitor (``collapse.*``): flags the training steps where the policy's diversity has died; and
RAGEN-2's diagnostic of template collapse (:func:`input_dependence`), answers that no longer depend on the prompt.

Pure and torch-free like sesa_cli.metrics, whose rows it reads; the trainer calls :meth:`CollapseMonitor.update`
once per step and checkpoints record its state.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sesa_cli.metric_keys import key
from sesa_cli.metrics import as_int

__all__ = ["CollapseMonitor", "input_dependence"]

# The keys the monitor reads (each collapse.* threshold is named after one of them).
EFFECTIVE_SOLUTIONS = key("policy/effective_solutions")
SOLUTION_ENTROPY = key("policy/solution_entropy")
DISTINCT_CORRECT = key("rollout/distinct_correct")
ENTROPY = key("rollout/entropy")


@dataclass
class CollapseMonitor:
    """Flags training steps where the diversity of the policy has died (the spec's collapse monitor, §6).

    It reads one of two kinds of metrics rows:

    * **exact policy metrics** (``policy=True``: the task can enumerate its solutions, see :func:`sesa_cli.metrics.policy_metrics`):
      a step is collapse-like when both ``policy/effective_solutions <= max_effective_solutions`` (the plain-prompt
      policy's success mass sits on about one target) and ``policy/solution_entropy <= max_solution_entropy`` (its
      answers are near-deterministic). The first alone also fires for a policy that has found one target and is
      still exploring, and always when the task has a single target; the second alone for a policy converged on
      a wrong answer. Nothing a sampler draws enters either. Rows without the metrics (the trainer may measure
      every few steps, ``train.policy_every``) leave the monitor as it was;
    * **rollout statistics** otherwise (``rollout/distinct_correct`` and ``rollout/entropy``, computed on what the
      sampler drew): collapse-like when both ``distinct_correct <= max_distinct_correct`` (groups find about one
      correct solution however many samples they draw) and ``entropy < min_entropy`` (sampling is
      near-deterministic; a fair choice between two tokens is ln 2 ≈ 0.69 nats). Either alone is not collapse: one
      correct solution with high entropy is a hard task still being explored, and low entropy with several
      distinct correct solutions per group is a confident policy that still covers the solution set. With a
      sequential sampler these describe the chain rather than the plain-prompt policy, which is why policy
      metrics take precedence where they exist.

    The monitor reports collapse once the measured steps have been collapse-like without a break over ``window``
    steps (``streak``: the steps from the first collapse-like measurement of the current run to the latest one,
    both included), so a single noisy step does not trigger it. Measured every step, that is ``window`` consecutive
    collapse-like steps. NaN or missing inputs count as not collapse-like.

    Usage: call :meth:`update` once per training step with its metrics row; the trainer marks the checkpoint when it
    returns True.
    """

    # The thresholds are the fields of sesa_cli.config.CollapseConfig (``collapse.*``), documented there once.
    window: int = 5
    max_effective_solutions: float = 1.5
    max_solution_entropy: float = 0.5
    max_distinct_correct: float = 1.25
    min_entropy: float = 0.05
    policy: bool = False
    """Read the exact policy metrics (True) or the rollout statistics (False)."""
    streak: int = field(default=0, init=False)
    """Steps spanned by the current run of collapse-like measurements (0 after a healthy one)."""
    last_step: int | None = field(default=None, init=False)
    """The step of the latest measurement."""
    first_flag_step: int | None = field(default=None, init=False)
    """The first step at which :meth:`update` returned True, or None if it never has."""

    def __post_init__(self) -> None:
        if as_int(self.window, "window") < 1:
            raise ValueError(f"CollapseMonitor.window must be >= 1, got {self.window}")

    def collapse_like(self, row: Mapping[str, Any]) -> bool | None:
        """Whether one step's metrics row looks collapsed; None if it does not measure what the monitor reads."""

        def value(key: str) -> float:
            v = row.get(key)
            return float(v) if isinstance(v, (int, float)) else math.nan

        if self.policy:
            if EFFECTIVE_SOLUTIONS not in row:
                return None
            return (
                value(EFFECTIVE_SOLUTIONS) <= self.max_effective_solutions
                and value(SOLUTION_ENTROPY) <= self.max_solution_entropy
            )
        return value(DISTINCT_CORRECT) <= self.max_distinct_correct and value(ENTROPY) < self.min_entropy

    def reading(self, row: Mapping[str, Any]) -> str:
        """What the monitor read in ``row``, in words: ``1.00 effective solutions, solution entropy 0.12 nats`` (or
        the rollout statistics' ``1.00 distinct correct per group, token entropy 0.030 nats``)."""

        def value(key: str) -> str:
            v = row.get(key)
            return f"{float(v):.2f}" if isinstance(v, (int, float)) else "?"

        if self.policy:
            return f"{value(EFFECTIVE_SOLUTIONS)} effective solutions, solution entropy {value(SOLUTION_ENTROPY)} nats"
        return f"{value(DISTINCT_CORRECT)} distinct correct per group, token entropy {value(ENTROPY)} nats"

    def update(self, step: int, row: Mapping[str, Any]) -> bool:
        """Record one step's metrics row. Returns True (collapsed) if the measurements have been collapse-like
        without a break over the last ``window`` steps."""
        verdict = self.collapse_like(row)
        if verdict is None:
            return self.collapsed
        gap = 1 if self.last_step is None else max(1, int(step) - self.last_step)
        self.streak = (self.streak + gap if self.streak else 1) if verdict else 0
        self.last_step = int(step)
        collapsed = self.streak >= self.window
        if collapsed and self.first_flag_step is None:
            self.first_flag_step = int(step)
        return collapsed

    @property
    def collapsed(self) -> bool:
        """Whether the last measurement was flagged."""
        return self.streak >= self.window

    def state_dict(self) -> dict[str, int | None]:
        """JSON-serialisable state for checkpoints (the thresholds come from the config, not the checkpoint)."""
        return {"streak": self.streak, "last_step": self.last_step, "first_flag_step": self.first_flag_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the state saved by :meth:`state_dict` (checkpoints older than ``last_step`` load too)."""
        self.streak = int(state["streak"])
        last, first = state.get("last_step"), state.get("first_flag_step")
        self.last_step = None if last is None else int(last)
        self.first_flag_step = None if first is None else int(first)


def input_dependence(prompts: Sequence[Hashable], answers: Sequence[str | None]) -> dict[str, float]:
    """How much a step's answers depend on their prompt: RAGEN-2's template-collapse diagnostic (Wang et al. 2026,
    "RAGEN-2: Reasoning Collapse in Agentic RL"; its ``collapse/mi_estimate``), on answers instead of log-probs.

    RAGEN-2 splits a policy's diversity into the variety of its responses to one input, H(Z | X), and their
    dependence on the input, the mutual information I(X; Z) under the batch's prompts taken uniformly: "template
    collapse" is a policy whose responses vary (high H(Z | X)) but would be the same whatever the input (I(X; Z)
    near 0), which an entropy does not see. RAGEN-2 estimates I(X; Z) from the log-probs of every response under
    every prompt of the batch; here Z is the response's final answer (its solution key: what sesa counts as the same
    solution; every reply without one is one answer, "invalid"), whose distributions the step's rollouts give
    directly, so the plug-in estimate needs no model pass:

    p(a | x) = the share of prompt x's rollouts with answer a, p(a) = mean over the N distinct prompts of p(a | x),
    ``answer_mi`` = I(X; A) = mean over x of sum_a p(a | x) log(p(a | x) / p(a)) (nats; 0 when no answer depends on
    the prompt), ``answer_mi_max`` = log N (its bound, reached when the prompts share no answer),
    ``answer_cond_entropy`` = H(A | X) = mean over x of −sum_a p(a | x) log p(a | x).

    A plug-in estimate: with few rollouts per prompt it is biased upward (by about (answers − 1)(N − 1) / (2 · rows)
    nats for independent answers). Empty when the step holds fewer than two distinct prompts (the dependence is then
    undefined). ``prompts`` and ``answers``: one entry per rollout.
    """
    if len(prompts) != len(answers):
        raise ValueError(f"prompts and answers must have the same length, got {len(prompts)} and {len(answers)}")
    by_prompt: dict[Hashable, Counter[str | None]] = {}
    for x, a in zip(prompts, answers, strict=True):
        by_prompt.setdefault(x, Counter())[a] += 1
    n = len(by_prompt)
    if n < 2:
        return {}
    conditionals = [{a: c / sum(counts.values()) for a, c in counts.items()} for counts in by_prompt.values()]
    marginal: dict[str | None, float] = {}
    for p in conditionals:
        for a, q in p.items():
            marginal[a] = marginal.get(a, 0.0) + q / n
    mi = sum(q * math.log(q / marginal[a]) for p in conditionals for a, q in p.items()) / n
    cond = -sum(q * math.log(q) for p in conditionals for q in p.values()) / n
    return {"answer_mi": max(0.0, mi), "answer_mi_max": math.log(n), "answer_cond_entropy": cond}
