"""Samplers: how the G rollouts of a group are drawn (docs/samplers.md). Registry keys = ``conf/sampler/*.yaml``.

* ``parallel``   y_1..y_G ~ pi(.|x) i.i.d.: one batched session of B*G rows.
* ``sequential`` SESA. ``stage1=solution``: one session per prompt row; sample k continues the cache right after
  sample k-1 (plus the task's ``between`` text), so y_k ~ pi(.| x + y_1 + ... + y_{k-1}). ``stage1=sketch``: stage I
  drafts G sketches the same way from ``sketch_head(x)``; stage II expands each sketch into m solutions in one
  parallel session over ``solve_prompt(x, s_k)``.

Multi-turn tasks (``task.multi_turn``) answer with whole episodes instead of single responses (:func:`run_episodes`):
each turn samples a response, the task's environment steps on it, and its feedback (next observation, RAGEN's
``Reward:`` line in chat style) is teacher-forced onto the same cache; the rollout's completion is the whole
trajectory with a mask that keeps the observations out of the loss. Both samplers use the same runner, so sequential
sampling works unchanged: with ``stage1=solution`` episode k continues the cache after episode k-1's trajectory; with
``stage1=sketch`` (the default for every task that defines a sketch) the sketches are short plans, each then played
out as an episode starting from ``solve_prompt(x, plan)``.

Every rollout records the exact context that drew it (``context_ids``) and the plain prompt (``prompt_ids``), so the
loss can score it under either (``sampler.loss_context``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sesa_cli import metrics as M
from sesa_cli.config import ConfigError, SamplerConfig
from sesa_cli.models.policy import Policy
from sesa_cli.models.special import stop_ids_for
from sesa_cli.rollout.engine import Completion, Engine, SamplingParams, Session
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
    stop_forced: bool = False
    """Sequential chains: this item (stage1=sketch: its sketch) hit its length limit without its stop, so the sampler
    teacher-forced the task's stop after it: the next item's context holds it and starts clean."""
    followed: bool | None = None
    """stage1=sketch: whether this solution carries out its sketch (``Task.follows_sketch``); None elsewhere, or
    where the task cannot tell."""
    follow_token: int | None = None
    """stage1=sketch: the first token of the text that carries out the sketch (``Task.sketch_response``); where the
    task does not fix that text, the first token of a solution that followed its sketch; else None. The target of
    ``algo.follow_coef``'s term."""


def run_episodes(
    session: Session,
    task: Task,
    instances: Sequence[Any],
    policy: Policy,
    stop_ids: list[int],
    params: SamplingParams,
    generator: torch.Generator,
) -> tuple[list[Completion], list[Score]]:
    """Play one episode of ``instances[i]`` on row i of ``session`` (each row's context ends where the first response
    begins). Every turn samples a response per live row, steps that row's environment, and teacher-forces the
    feedback; rows whose episode is over sample nothing more. Returns per row the trajectory as one Completion
    (responses and feedback in order, ``mask`` True on response tokens) and the episode's Score."""
    envs = [task.make_env(inst) for inst in instances]
    n = len(envs)
    ids: list[list[int]] = [[] for _ in range(n)]
    logps: list[list[float]] = [[] for _ in range(n)]
    ents: list[list[float]] = [[] for _ in range(n)]
    mask: list[list[bool]] = [[] for _ in range(n)]
    stopped = [False] * n
    encoded: dict[str, list[int]] = {}  # feedback text -> ids: the same observations recur across rows and turns
    while True:
        live = [not env.done for env in envs]
        if not any(live):
            break
        comps = session.sample(task.cfg.max_new_tokens, stop_ids, params, generator, active=live)
        feedback: list[list[int]] = [[] for _ in range(n)]
        for i, comp in enumerate(comps):
            if not live[i]:
                continue
            turn = envs[i].step(policy.decode(comp.ids))
            ids[i] += comp.ids
            logps[i] += comp.logps
            ents[i] += comp.entropies
            mask[i] += [True] * len(comp.ids)
            stopped[i] = comp.stopped
            if not turn.done:
                if turn.feedback not in encoded:
                    encoded[turn.feedback] = policy.encode(turn.feedback)
                feedback[i] = encoded[turn.feedback]
                ids[i] += feedback[i]
                logps[i] += [0.0] * len(feedback[i])
                ents[i] += [0.0] * len(feedback[i])
                mask[i] += [False] * len(feedback[i])
        session.extend(feedback)
    return (
        [Completion(ids[i], logps[i], ents[i], stopped[i], mask[i]) for i in range(n)],
        [env.score() for env in envs],
    )


class Sampler:
    """Draws groups of rollouts for a batch of instances."""

    def __init__(
        self, cfg: SamplerConfig, task: Task, policy: Policy, dtype: str = "float32", greedy: bool = False
    ) -> None:
        self.cfg = cfg
        self.task = task
        self.policy = policy
        self.engine = Engine(
            policy.model, int(policy.tokenizer.pad_token_id), dtype, stop_string_fn(policy, task.stop)
        )
        # greedy: argmax decoding (validation with verl's val_kwargs.do_sample=False); never used for training
        self.params = SamplingParams(0.0) if greedy else SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k)
        self.stop_ids = stop_ids_for(policy, task)
        self.bos = [int(policy.tokenizer.bos_token_id)] if policy.tokenizer.bos_token_id is not None else []

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a prompt, refused with a ConfigError when it and ``task.max_new_tokens`` do not fit the
        model's positions: found before the engine allocates (a 200,000-character question of a data file would
        ask the attention for tens of GB, then fail with an allocation traceback)."""
        ids = self.policy.encode_prompt(text, chat=self.task.chat)
        positions = getattr(self.policy.model.config, "max_position_embeddings", None)
        budget = self.task.cfg.max_new_tokens
        if isinstance(positions, int) and len(ids) + budget > positions:
            start = " ".join(text[:40].split())
            raise ConfigError(
                f"a prompt of {len(ids):,} tokens ({start!r}...) + task.max_new_tokens={budget} does not fit the "
                f"model's {positions:,} positions (model.max_position_embeddings): shorten the task's questions or "
                "choose a model with more positions"
            )
        return ids

    def answer(
        self, session: Session, instances: Sequence[Any], generator: torch.Generator
    ) -> list[tuple[Completion, str, Score]]:
        """One answer per row of ``session`` (row i answers ``instances[i]``): a response scored by the task, or for
        multi-turn tasks a whole episode; each with its decoded text."""
        if self.task.multi_turn:
            comps, scores = run_episodes(
                session, self.task, instances, self.policy, self.stop_ids, self.params, generator
            )
            return [(c, self.policy.decode(c.ids), s) for c, s in zip(comps, scores, strict=True)]
        comps = session.sample(self.task.cfg.max_new_tokens, self.stop_ids, self.params, generator)
        return [self._scored(c, inst) for c, inst in zip(comps, instances, strict=True)]

    def _scored(self, comp: Completion, inst: Any) -> tuple[Completion, str, Score]:
        """A single-turn response with its decoded text and the task's score."""
        text = self.policy.decode(comp.ids)
        return comp, text, self.task.score(inst, text)

    def _rollout(
        self,
        group: int,
        inst: Any,
        prompt_ids: list[int],
        ctx: list[int],
        answer: tuple[Completion, str, Score],
        **extra: Any,
    ) -> Rollout:
        comp, text, score = answer
        return Rollout(group, inst, prompt_ids, ctx, comp, text, score, **extra)

    def sample(self, instances: Sequence[Any], generator: torch.Generator) -> list[list[Rollout]]:
        raise NotImplementedError

    def draw(self, instances: Sequence[Any], n: int, generator: torch.Generator) -> list[list[Rollout]]:
        """n samples per instance, as evaluation draws them: here whole groups of :meth:`sample`, drawn until each
        instance has n (the last group cut), so the n samples of a sequential sampler are chains, not i.i.d."""
        groups: list[list[Rollout]] = [[] for _ in instances]
        while len(groups[0]) < n:
            for g, group in enumerate(self.sample(instances, generator)):
                groups[g].extend(group)
        return [g[:n] for g in groups]

    def chain_health(self, groups: Sequence[Sequence[Rollout]]) -> M.ChainHealth | None:
        """The health of the chains in ``groups`` (:func:`sesa_cli.metrics.chain_health`); None for a sampler that
        draws no chains."""
        return None


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
    def draw(self, instances: Sequence[Any], n: int, generator: torch.Generator) -> list[list[Rollout]]:
        """n i.i.d. samples per instance from the plain prompt, in one batched session."""
        prompts = [self.encode_prompt(self.task.prompt(inst)) for inst in instances]
        rows = [prompts[g] for g in range(len(instances)) for _ in range(n)]
        row_inst = [instances[g] for g in range(len(instances)) for _ in range(n)]
        answers = self.answer(self.engine.start(rows), row_inst, generator)
        groups: list[list[Rollout]] = [[] for _ in instances]
        for r, ans in enumerate(answers):
            g = r // n
            groups[g].append(self._rollout(g, instances[g], prompts[g], rows[r], ans))
        return groups

    def sample(self, instances: Sequence[Any], generator: torch.Generator) -> list[list[Rollout]]:
        return self.draw(instances, self.cfg.group_size, generator)


def resolve_stage1(cfg: SamplerConfig, task: Task) -> str:
    """``auto`` is ``sketch`` (the paper's two-stage form) for a task whose sketches its base follows
    (``Task.sketch_followed``, which may depend on its settings), else ``solution``."""
    if cfg.stage1 == "auto":
        return "sketch" if task.has_sketch() and task.sketch_followed() else "solution"
    return cfg.stage1


@register_sampler("sequential")
class SequentialSampler(Sampler):
    def __init__(self, cfg: SamplerConfig, task: Task, policy: Policy, dtype: str = "float32") -> None:
        super().__init__(cfg, task, policy, dtype)
        self.stage1 = resolve_stage1(cfg, task)
        if self.stage1 == "sketch" and not task.has_sketch():
            raise ConfigError(f"task {task.name!r} defines no sketch; use sampler.stage1=solution")
        self.between = policy.encode(task.between) if task.between else []
        self.stop_text = policy.encode(task.stop) if task.stop else []
        self.sketch_max_tokens = (cfg.sketch_max_tokens or task.sketch_max_tokens()) if self.stage1 == "sketch" else 0

    @property
    def chain_items(self) -> int:
        """Items of a chain: G less the group's ``sampler.parallel_rows`` i.i.d. rows."""
        return self.cfg.group_size - self.cfg.parallel_rows

    def _chains(
        self, heads: list[list[int]], max_new_tokens: int, generator: torch.Generator
    ) -> list[list[tuple[list[int], Completion, bool]]]:
        """Draw :attr:`chain_items` single-turn items (solutions or sketches) per row one after another on one cache: item k continues
        right after item k-1 (+ between). Each row moves on to its next item the moment its current one stops
        (:meth:`Session.sample_chains`), without waiting for the other rows.

        An item cut at its length limit is followed by the task's stop text, teacher-forced before ``between``, so the
        next item starts where a finished one would have (issue 16: after a cut item the chain used to run on without
        a separator). Returns, per row, G triples (context_ids that drew the item, the item, whether the stop was
        forced after it).
        """
        g = self.chain_items

        def between(row: int, item: Completion) -> list[int]:
            return (self.stop_text if not item.stopped else []) + self.between

        chains = self.engine.start(heads).sample_chains(
            g, max_new_tokens, self.stop_ids, self.params, generator, between=between
        )
        return [[(ctx, item, not item.stopped and k < g - 1) for k, (ctx, item) in enumerate(row)] for row in chains]

    def _episode_chains(
        self, heads: list[list[int]], instances: Sequence[Any], generator: torch.Generator
    ) -> list[list[tuple[list[int], tuple[Completion, str, Score], bool]]]:
        """stage1=solution for multi-turn tasks: G whole episodes per row one after another on one cache, as
        :meth:`_chains` draws single-turn items, except that episode k+1 of every row starts when episode k has ended
        in every row (the environment steps between turns keep the rows in lock-step)."""
        session = self.engine.start(heads)
        chains: list[list[tuple[list[int], tuple[Completion, str, Score], bool]]] = [[] for _ in heads]
        cut = [False] * len(heads)
        for k in range(self.chain_items):
            if k > 0:
                session.extend([(self.stop_text if c else []) + self.between for c in cut])
            contexts = [list(t) for t in session.tokens]
            answers = self.answer(session, instances, generator)
            cut = [not a[0].stopped for a in answers]
            last = k == self.chain_items - 1
            for row, ans in enumerate(answers):
                chains[row].append((contexts[row], ans, cut[row] and not last))
        return chains

    def sample(self, instances: Sequence[Any], generator: torch.Generator) -> list[list[Rollout]]:
        """Per instance a group: the chain's rows (:attr:`chain_items` of them, times ``solutions_per_sketch`` with
        sketches), then ``sampler.parallel_rows`` rows drawn i.i.d. from the plain prompt."""
        task = self.task
        k = self.cfg.parallel_rows
        if self.stage1 == "solution":
            heads = [self.encode_prompt(task.prompt(inst)) for inst in instances]
            if task.multi_turn:
                chains = self._episode_chains(heads, instances, generator)
            else:
                chains = [
                    [(ctx, self._scored(comp, instances[g]), forced) for ctx, comp, forced in chain]
                    for g, chain in enumerate(self._chains(heads, task.cfg.max_new_tokens, generator))
                ]
            drawn = [
                [self._rollout(g, instances[g], heads[g], ctx, ans, stop_forced=forced) for ctx, ans, forced in chain]
                for g, chain in enumerate(chains)
            ]
            if k:  # the plain rows of every group in one session of their own
                rows = [heads[g] for g in range(len(instances)) for _ in range(k)]
                answers = self.answer(
                    self.engine.start(rows), [instances[r // k] for r in range(len(rows))], generator
                )
                for r, ans in enumerate(answers):
                    drawn[r // k].append(self._rollout(r // k, instances[r // k], rows[r], rows[r], ans))
            return drawn
        # stage I: sequential sketches
        heads = [self.encode_prompt(task.sketch_head(inst)) for inst in instances]
        prompts = [self.encode_prompt(task.prompt(inst)) for inst in instances]  # the plain prompts x
        sketch_chains = self._chains(heads, self.sketch_max_tokens, generator)
        # stage II: every sketch expanded into m solutions (episodes for multi-turn tasks), all in parallel
        m = self.cfg.solutions_per_sketch
        rows, row_inst, meta = [], [], []
        for g, chain in enumerate(sketch_chains):
            for sketch_ctx, sketch_comp, forced in chain:
                sketch = self.policy.decode(sketch_comp.ids)
                solve_ids = self.encode_prompt(task.solve_prompt(instances[g], sketch))
                target = self._response_token(instances[g], sketch)
                for _ in range(m):
                    rows.append(solve_ids)
                    row_inst.append(instances[g])
                    meta.append((g, sketch, sketch_ctx, sketch_comp, forced, target))
        n_expanded = len(rows)
        # sampler.parallel_rows: drawn from the plain prompt in the same stage-II session, after the expansions
        for g in range(len(instances)):
            rows += [prompts[g]] * k
            row_inst += [instances[g]] * k
        answers = self.answer(self.engine.start(rows), row_inst, generator)
        groups: list[list[Rollout]] = [[] for _ in instances]
        for r, ans in enumerate(answers[:n_expanded]):
            g, sketch, sketch_ctx, sketch_comp, forced, target = meta[r]
            followed = task.follows_sketch(instances[g], sketch, ans[1], ans[2])
            if target is None and followed and ans[0].ids:  # the task does not fix the text: a follower's own start
                target = ans[0].ids[0]
            groups[g].append(
                self._rollout(
                    g,
                    instances[g],
                    prompts[g],
                    rows[r],
                    ans,
                    sketch=sketch,
                    sketch_context_ids=sketch_ctx,
                    sketch_completion=sketch_comp,
                    stop_forced=forced,
                    followed=followed,
                    follow_token=target,
                )
            )
        for r, ans in enumerate(answers[n_expanded:]):
            g = r // k
            groups[g].append(self._rollout(g, instances[g], prompts[g], prompts[g], ans))
        return groups

    def _response_token(self, inst: Any, sketch: str) -> int | None:
        """The first token of the text that carries out ``sketch`` (``Task.sketch_response``), once per sketch: the
        ``Rollout.follow_token`` of each of its stage-II solutions; None where the task does not fix that text."""
        response = self.task.sketch_response(inst, sketch)
        ids = self.policy.encode(response) if response is not None else []
        return ids[0] if ids else None

    def chain_health(self, groups: Sequence[Sequence[Rollout]]) -> M.ChainHealth:
        """The health of every chain in ``groups`` (issue 16): the items are the sketches (stage1=sketch, judged by
        ``task.sketch_key`` and each solution's ``Rollout.followed``) or the solutions (keys from their scores). A
        group holds one chain of G items (G x m rollouts with m solutions per sketch), or several in a row (evaluation
        draws n samples); an incomplete chain at a group's end is left out. An evaluation of fewer samples than one chain
        (``eval.samples`` < G x m) measures the first n // m items of each chain."""
        task, m = self.task, self.cfg.solutions_per_sketch if self.stage1 == "sketch" else 1
        keys: list[list[str | None]] = []
        cut: list[list[bool]] = []
        followed: list[list[list[bool | None]]] = []
        per_group = self.chain_items * m + self.cfg.parallel_rows  # rows of one group: the chain's, then i.i.d. ones
        for drawn in groups:
            # the chains' rows: each group of the draw less its trailing sampler.parallel_rows
            group = [r for i, r in enumerate(drawn) if i % per_group < self.chain_items * m]
            g = min(self.chain_items, len(group) // m)  # items per chain measured
            if g == 0:
                continue
            for start in range(0, len(group) - g * m + 1, g * m):
                chain = group[start : start + g * m]
                firsts = chain[::m]
                if self.stage1 == "solution":
                    keys.append([r.score.key for r in firsts])
                    cut.append([not r.completion.stopped for r in firsts])
                    continue
                keys.append([task.sketch_key(r.inst, r.sketch or "") for r in firsts])
                cut.append([r.sketch_completion is not None and not r.sketch_completion.stopped for r in firsts])
                followed.append([[r.followed for r in chain[k * m : (k + 1) * m]] for k in range(g)])
        return M.chain_health(keys, cut, followed if self.stage1 == "sketch" else None)
