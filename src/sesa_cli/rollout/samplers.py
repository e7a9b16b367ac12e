"""Samplers: how the G rollouts of a group are drawn (spec section 4). Registry keys = ``conf/sampler/*.yaml``.

* ``parallel``   y_1..y_G ~ pi(.|x) i.i.d.: one batched session of B*G rows.
* ``sequential`` SESA. ``stage1=solution``: one session per prompt row; sample k continues the cache right after
  sample k-1 (plus the task's ``between`` text), so y_k ~ pi(.| x + y_1 + ... + y_{k-1}). ``stage1=sketch``: stage I
  drafts G sketches the same way from ``sketch_head(x)``; stage II expands each sketch into m solutions in one
  parallel session over ``solve_prompt(x, s_k)``.

Every rollout records the exact context that drew it (``context_ids``) and the plain prompt (``prompt_ids``), so the
loss can score it under either (``sampler.loss_context``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sesa_cli.config import ConfigError, SamplerConfig
from sesa_cli.models.loading import Policy
from sesa_cli.rollout.engine import Completion, Engine, SamplingParams
from sesa_cli.rollout.stops import stop_string_fn
from sesa_cli.tasks.base import Score, Task


@dataclass
class Rollout:
    """One solution of one group, with everything the loss and the metrics need."""

    group: int
    """Index of its prompt in the batch."""
    inst: Any
    prompt_ids: list[int]
    """The plain prompt x (with BOS)."""
    context_ids: list[int]
    """The context the solution was drawn from (= prompt_ids for parallel sampling)."""
    completion: Completion
    text: str
    score: Score
    sketch: str | None = None
    """stage1=sketch: the sketch this solution expands."""
    sketch_context_ids: list[int] | None = None
    sketch_completion: Completion | None = None


def stop_ids_for(policy: Policy, task: Task) -> list[int]:
    """Token ids that end an answer: the task's stop character (if it is one token) and EOS."""
    ids = policy.encode(task.stop) if task.stop else []
    stops = [ids[0]] if len(ids) == 1 else []
    eos = policy.tokenizer.eos_token_id
    if eos is not None:
        stops.append(int(eos))
    if not stops:
        raise ConfigError(f"task {task.name!r}: stop {task.stop!r} is not a single token and the tokenizer has no EOS")
    return stops


class Sampler:
    """Draws groups of rollouts for a batch of instances."""

    def __init__(self, cfg: SamplerConfig, task: Task, policy: Policy, dtype: str = "float32") -> None:
        if getattr(task, "multi_turn", False):
            raise ConfigError(f"task={task.name} is multi-turn; multi-turn rollouts are not built yet (issue #5)")
        self.cfg = cfg
        self.task = task
        self.policy = policy
        self.engine = Engine(
            policy.model, int(policy.tokenizer.pad_token_id), dtype, stop_string_fn(policy, task.stop)
        )
        self.params = SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k)
        self.stop_ids = stop_ids_for(policy, task)
        self.bos = [int(policy.tokenizer.bos_token_id)] if policy.tokenizer.bos_token_id is not None else []

    def encode_prompt(self, text: str) -> list[int]:
        return self.policy.encode_prompt(text, chat=self.task.cfg.style == "chat")

    def _rollout(self, group: int, inst: Any, ctx: list[int], comp: Completion, **extra: Any) -> Rollout:
        text = self.policy.decode(comp.ids)
        prompt_ids = self.encode_prompt(self.task.prompt(inst))
        return Rollout(group, inst, prompt_ids, ctx, comp, text, self.task.score(inst, text), **extra)

    def sample(self, instances: Sequence[Any], generator: torch.Generator) -> list[list[Rollout]]:
        raise NotImplementedError


SAMPLERS: dict[str, type[Sampler]] = {}


def register_sampler(name: str) -> Callable[[type[Sampler]], type[Sampler]]:
    def wrap(cls: type[Sampler]) -> type[Sampler]:
        if name in SAMPLERS:
            raise ValueError(f"sampler {name!r} registered twice")
        SAMPLERS[name] = cls
        return cls

    return wrap


def make_sampler(cfg: SamplerConfig, task: Task, policy: Policy, dtype: str = "float32") -> Sampler:
    try:
        cls = SAMPLERS[cfg.name]
    except KeyError:
        raise ConfigError(f"unknown sampler {cfg.name!r}; valid: {', '.join(sorted(SAMPLERS))}") from None
    return cls(cfg, task, policy, dtype)


@register_sampler("parallel")
class ParallelSampler(Sampler):
    def sample_plain(self, instances: Sequence[Any], n: int, generator: torch.Generator) -> list[list[Rollout]]:
        """n i.i.d. samples per instance from the plain prompt (also what evaluation uses)."""
        prompts = [self.encode_prompt(self.task.prompt(inst)) for inst in instances]
        rows = [prompts[g] for g in range(len(instances)) for _ in range(n)]
        comps = self.engine.start(rows).sample(self.task.cfg.max_new_tokens, self.stop_ids, self.params, generator)
        groups: list[list[Rollout]] = [[] for _ in instances]
        for r, comp in enumerate(comps):
            g = r // n
            groups[g].append(self._rollout(g, instances[g], rows[r], comp))
        return groups

    def sample(self, instances: Sequence[Any], generator: torch.Generator) -> list[list[Rollout]]:
        return self.sample_plain(instances, self.cfg.group_size, generator)


@register_sampler("sequential")
class SequentialSampler(Sampler):
    def __init__(self, cfg: SamplerConfig, task: Task, policy: Policy, dtype: str = "float32") -> None:
        super().__init__(cfg, task, policy, dtype)
        if cfg.stage1 == "sketch" and not task.has_sketch():
            raise ConfigError(f"task {task.name!r} defines no sketch; use sampler.stage1=solution")
        self.between = policy.encode(task.between) if task.between else []

    def _chain(self, heads: list[list[int]], max_new: int, generator: torch.Generator) -> list[list[tuple]]:
        """Draw G items per row one after another on one cache: item k continues right after item k-1 (+ between).

        Returns, per row, G pairs (context_ids that drew the item, Completion).
        """
        session = self.engine.start(heads)
        chains: list[list[tuple]] = [[] for _ in heads]
        for k in range(self.cfg.group_size):
            if k > 0 and self.between:
                session.extend([self.between] * len(heads))
            contexts = [list(t) for t in session.tokens]
            comps = session.sample(max_new, self.stop_ids, self.params, generator)
            for row, comp in enumerate(comps):
                chains[row].append((contexts[row], comp))
        return chains

    def sample(self, instances: Sequence[Any], generator: torch.Generator) -> list[list[Rollout]]:
        task = self.task
        if self.cfg.stage1 == "solution":
            heads = [self.encode_prompt(task.prompt(inst)) for inst in instances]
            chains = self._chain(heads, task.cfg.max_new_tokens, generator)
            return [
                [self._rollout(g, instances[g], ctx, comp) for ctx, comp in chain] for g, chain in enumerate(chains)
            ]
        # stage I: sequential sketches
        heads = [self.encode_prompt(task.sketch_head(inst)) for inst in instances]
        chains = self._chain(heads, self.cfg.sketch_max_tokens, generator)
        # stage II: every sketch expanded into m solutions, all in parallel
        m = self.cfg.solutions_per_sketch
        rows, meta = [], []
        for g, chain in enumerate(chains):
            for sketch_ctx, sketch_comp in chain:
                sketch = self.policy.decode(sketch_comp.ids)
                solve_ids = self.encode_prompt(task.solve_prompt(instances[g], sketch))
                for _ in range(m):
                    rows.append(solve_ids)
                    meta.append((g, sketch, sketch_ctx, sketch_comp))
        comps = self.engine.start(rows).sample(task.cfg.max_new_tokens, self.stop_ids, self.params, generator)
        groups: list[list[Rollout]] = [[] for _ in instances]
        for r, comp in enumerate(comps):
            g, sketch, sketch_ctx, sketch_comp = meta[r]
            groups[g].append(
                self._rollout(
                    g,
                    instances[g],
                    rows[r],
                    comp,
                    sketch=sketch,
                    sketch_context_ids=sketch_ctx,
                    sketch_completion=sketch_comp,
                )
            )
        return groups
