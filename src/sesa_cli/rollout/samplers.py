"""Samplers: how the G rollouts of a group are drawn (docs/samplers.md). Registry keys = ``conf/sampler/*.yaml``.

* ``parallel``   y_1..y_G ~ pi(.|x) i.i.d.: one batched session of B*G rows.
* ``lte``        LTE (arXiv 2510.26109): k rows i.i.d., then G - k rows from the plain prompt followed by the group's
  distinct wrong answers among them, when none of the k succeeded (:class:`LTESampler`).
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

Every rollout records the exact context that drew it (``context_ids``), the plain prompt (``prompt_ids``), so the
loss can score it under either (``algo.loss_context``), and its origin (sesa_cli.rollout.rollouts: i.i.d., a chain
item and its position, or a stage-II expansion of its sketch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from sesa_cli import metrics as M
from sesa_cli.config import AlgoConfig, ConfigError, SamplerConfig
from sesa_cli.models.policy import Policy
from sesa_cli.models.special import stop_ids_for
from sesa_cli.registry import Plugin, Registry
from sesa_cli.rollout.engine import Engine, SamplingParams, Session
from sesa_cli.rollout.rollouts import (
    ChainItem,
    Completion,
    Expansion,
    Hinted,
    Origin,
    Plain,
    PolicyRows,
    Rollout,
    Sketch,
)
from sesa_cli.rollout.stops import stop_string_fn
from sesa_cli.tasks.base import Score, Task

__all__ = [
    "SAMPLERS",
    "LTESampler",
    "ParallelSampler",
    "Sampler",
    "SequentialSampler",
    "chains_of",
    "make_sampler",
    "register_sampler",
    "resolve_stage1",
    "run_episodes",
]


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


class Sampler(Plugin):
    """Draws groups of rollouts for a batch of instances. A sampler is a method like any other (sesa_cli.registry):
    registered under its name (``sampler.name``, ``@register_sampler``), its settings the ``sampler`` section."""

    Settings = SamplerConfig

    stage1: str | None = None
    """A sequential sampler's resolved ``sampler.stage1`` (``sketch`` or ``solution``); None for the others."""

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
        origin: Origin | None = None,
    ) -> Rollout:
        comp, text, score = answer
        return Rollout(group, inst, prompt_ids, ctx, comp, text, score, origin if origin is not None else Plain())

    @property
    def rows_per_group(self) -> int:
        """Rollouts of one group (the rows an update gets per prompt)."""
        return self.cfg.group_size

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

    def policy_rows(self, rows: Sequence[Rollout], advantages: Sequence[float], algo: AlgoConfig) -> PolicyRows | None:
        """Rows of its own the sampler adds to the policy-gradient batch of the update of ``rows`` (the solution
        rows, with their group ``advantages``), or None (the default): sesa_cli.update.RowSource."""
        return None


SAMPLERS: Registry[type[Sampler]] = Registry("sampler")
"""``sampler.name`` -> sampler class (each with its ``conf/sampler/<name>.yaml``)."""


def register_sampler(name: str) -> Callable[[type[Sampler]], type[Sampler]]:
    """Class decorator: make a sampler available as ``sampler.name=<name>``."""
    return SAMPLERS.register(name)


def make_sampler(cfg: SamplerConfig, task: Task, policy: Policy, dtype: str = "float32") -> Sampler:
    """The sampler ``sampler.name`` names; an unknown name is a ConfigError naming the valid ones."""
    return SAMPLERS.lookup(cfg.name)(cfg, task, policy, dtype)


@register_sampler("parallel")
class ParallelSampler(Sampler):
    """i.i.d. groups, what GRPO, verl and TRL draw: the G rows of a group sampled independently from the plain
    prompt, in one batched session."""

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
    """SESA (arXiv 2510.15502): each row of a group conditioned on the rows drawn before it. ``stage1=sketch``: a
    chain of short sketches, each expanded into a solution (``solutions_per_sketch``) in parallel; ``stage1=solution``:
    a chain of whole solutions; ``parallel_rows`` of a group drawn i.i.d. besides. Adds its sketches to the update's
    policy-gradient batch with ``algo.train_sketches`` (:meth:`policy_rows`)."""

    def __init__(self, cfg: SamplerConfig, task: Task, policy: Policy, dtype: str = "float32") -> None:
        super().__init__(cfg, task, policy, dtype)
        self.stage1: str = resolve_stage1(cfg, task)
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
        next item starts where a finished one would have (without it, a chain ran on after a cut item without a
        separator). Returns, per row, G triples (context_ids that drew the item, the item, whether the stop was
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

    @property
    def rows_per_group(self) -> int:
        """Rollouts of one group: the chain's items (times ``solutions_per_sketch`` with sketches), then the
        ``sampler.parallel_rows`` i.i.d. rows."""
        m = self.cfg.solutions_per_sketch if self.stage1 == "sketch" else 1
        return self.chain_items * m + self.cfg.parallel_rows

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
            drawn = []
            for g, chain in enumerate(chains):
                texts = tuple(ans[1] for _, ans, _ in chain)
                drawn.append([
                    self._rollout(g, instances[g], heads[g], ctx, ans, ChainItem(p, texts[:p], forced))
                    for p, (ctx, ans, forced) in enumerate(chain)
                ])  # fmt: skip
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
        for g, sketch_chain in enumerate(sketch_chains):
            for p, (sketch_ctx, sketch_comp, forced) in enumerate(sketch_chain):
                sketch = Sketch(self.policy.decode(sketch_comp.ids), sketch_ctx, sketch_comp, p, forced)
                solve_ids = self.encode_prompt(task.solve_prompt(instances[g], sketch.text))
                for _ in range(m):
                    rows.append(solve_ids)
                    row_inst.append(instances[g])
                    meta.append((g, sketch))
        n_expanded = len(rows)
        # sampler.parallel_rows: drawn from the plain prompt in the same stage-II session, after the expansions
        for g in range(len(instances)):
            rows += [prompts[g]] * k
            row_inst += [instances[g]] * k
        answers = self.answer(self.engine.start(rows), row_inst, generator)
        groups: list[list[Rollout]] = [[] for _ in instances]
        for r, ans in enumerate(answers[:n_expanded]):
            g, sketch = meta[r]
            followed = task.follows_sketch(instances[g], sketch.text, ans[1], ans[2])
            groups[g].append(self._rollout(g, instances[g], prompts[g], rows[r], ans, Expansion(sketch, followed)))
        for r, ans in enumerate(answers[n_expanded:]):
            g = r // k
            groups[g].append(self._rollout(g, instances[g], prompts[g], prompts[g], ans))
        return groups

    def policy_rows(self, rows: Sequence[Rollout], advantages: Sequence[float], algo: AlgoConfig) -> PolicyRows | None:
        """With ``algo.train_sketches``, one row per sketch of the stage-II solutions among ``rows`` (its
        :class:`Expansion` rows; chain items and i.i.d. rows have no sketch), in chain order within each group: the
        sketch scored in the context that drew it (there is no "plain prompt" form of a sketch, so it is never
        off-policy), its advantage the mean advantage of its solutions. A sketch is never pushed up (advantage
        min(0, a)) when it repeats an earlier one of its chain (the chain is asked for sketches unlike the ones
        listed), nor when none of its solutions carried it out (``Expansion.followed`` False: a malformed or ignored
        sketch takes no credit for what its solutions won; where the task cannot tell, None, it does)."""
        if not algo.train_sketches:
            return None
        by_sketch: dict[int, list[float]] = {}
        first: dict[int, tuple[Rollout, Sketch]] = {}
        carried: dict[int, bool] = {}  # some solution of the sketch carried it out, or the task cannot tell
        for r, a in zip(rows, advantages, strict=True):
            if not isinstance(r.origin, Expansion):  # an i.i.d. or chain row: no sketch of its own
                continue
            key = id(r.origin.sketch)
            by_sketch.setdefault(key, []).append(a)
            first.setdefault(key, (r, r.origin.sketch))
            carried[key] = carried.get(key, False) or r.origin.followed is not False
        if not first:
            return None
        out = PolicyRows("sketch", [], [], [], [])
        drafted: set[tuple[int, tuple[int, ...]]] = set()  # (group, sketch ids) of the sketches met so far
        for key, (r, s) in first.items():  # in chain order within each group
            out.contexts.append(s.context_ids)
            out.completions.append(s.completion.ids)
            out.behaviour_logps.append(s.completion.logps)
            advantage = float(np.mean(by_sketch[key]))
            sketch = (r.group, tuple(s.completion.ids))
            out.advantages.append(min(0.0, advantage) if sketch in drafted or not carried[key] else advantage)
            drafted.add(sketch)
        return out

    def chain_health(self, groups: Sequence[Sequence[Rollout]]) -> M.ChainHealth:
        """The health of every chain in ``groups`` (docs/samplers.md): the items are the sketches
        (stage1=sketch, judged by ``task.sketch_key`` and each solution's ``Expansion.followed``) or the solutions
        (keys from their scores). A group holds one chain of G items (G x m rollouts with m solutions per sketch),
        or several in a row (evaluation draws n samples), each starting at position 0 of its origin; its i.i.d. rows
        (``Plain``) are not items. An incomplete chain at a group's end is left out. An evaluation of fewer samples
        than one chain (``eval.samples`` < G x m) measures the first n // m items of each chain."""
        task, m = self.task, self.cfg.solutions_per_sketch if self.stage1 == "sketch" else 1
        keys: list[list[str | None]] = []
        cut: list[list[bool]] = []
        followed: list[list[list[bool | None]]] = []
        for drawn in groups:
            chains = chains_of(drawn)
            g = min(self.chain_items, sum(len(c) for c in chains) // m)  # items per chain measured
            if g == 0:
                continue
            for rows in chains:
                chain = rows[: g * m]
                if len(chain) < g * m:
                    continue
                firsts = chain[::m]
                if self.stage1 == "solution":
                    keys.append([r.score.key for r in firsts])
                    cut.append([not r.completion.stopped for r in firsts])
                    continue
                items = [r.origin for r in firsts]
                assert all(isinstance(o, Expansion) for o in items)  # stage1=sketch draws expansions only
                sketches = [o.sketch for o in items if isinstance(o, Expansion)]
                keys.append([task.sketch_key(r.inst, s.text) for r, s in zip(firsts, sketches, strict=True)])
                cut.append([not s.completion.stopped for s in sketches])
                followed.append([[_followed(r) for r in chain[i * m : (i + 1) * m]] for i in range(g)])
        return M.chain_health(keys, cut, followed if self.stage1 == "sketch" else None)


@register_sampler("lte")
class LTESampler(Sampler):
    """LTE, "Learning to reason from Trial and Error" (Tang et al. 2025, "Do Not Step Into the Same River Twice",
    arXiv 2510.26109): later rollouts of a prompt are hinted with the model's own earlier wrong answers to it.

    Per prompt, k = ``sampler.parallel_rows`` (0: G // 2) rows are drawn i.i.d. from the plain prompt x. A group none
    of whose k rows succeeded (LTE's "none-pass" prompt) draws its other G - k rows from x followed by the distinct
    wrong answers among them (by solution key, in the order drawn; a reply without a key is left out), each laid out
    as a chain item of the sequential sampler (its tokens, the task's stop if it was cut, ``task.between``): the
    context the warm start taught to read as "answers already given", here all wrong. A group with a success, or
    without a wrong answer to show, draws its G - k rows from x. The budget is GRPO's: G rows per prompt.

    The hinted rows (origin :class:`~sesa_cli.rollout.rollouts.Hinted`) are drawn in a context other than x, so under
    the plain-prompt loss (``algo.loss_context=prompt``) they are off-policy rows, treated as SESA's are:
    ``algo.off_policy`` (by default their negative advantages dropped, their positives kept) or ``algo.loss_context``
    (``is``: a truncated importance weight, LTE's own choice is a mixed-policy loss with importance sampling). The
    choices where the paper differs or is silent, kept here: the hint is the context of earlier answers, not an
    instruction text (the tiny model reads no instructions); LTE draws G extra hinted rows on top of G plain ones,
    here they share one budget of G; LTE's hint about overlong answers is not given."""

    def __init__(self, cfg: SamplerConfig, task: Task, policy: Policy, dtype: str = "float32") -> None:
        super().__init__(cfg, task, policy, dtype)
        self.between = policy.encode(task.between) if task.between else []
        self.stop_text = policy.encode(task.stop) if task.stop else []
        self.first = cfg.parallel_rows or cfg.group_size // 2
        """k: the i.i.d. rows of a group whose wrong answers hint the others."""

    def hints(self, rows: Sequence[Rollout]) -> list[Rollout]:
        """The rows whose answers hint the rest of their group: one per distinct wrong answer among ``rows`` (the
        first drawn), in order; none when some row succeeded."""
        if any(r.score.success for r in rows):
            return []
        first: dict[str, Rollout] = {}
        for r in rows:
            if r.score.key is not None and not r.score.success:
                first.setdefault(r.score.key, r)
        return list(first.values())

    def _hinted_context(self, prompt: list[int], wrong: list[Rollout]) -> tuple[list[int], list[Rollout]]:
        """(x followed by each wrong answer as a chain item, the answers it holds): the latest hints are left out
        while the context and ``task.max_new_tokens`` would not fit the model's positions."""
        positions = getattr(self.policy.model.config, "max_position_embeddings", None)
        while True:
            ids = list(prompt)
            for r in wrong:
                ids += r.completion.ids + (self.stop_text if not r.completion.stopped else []) + self.between
            if not wrong or not isinstance(positions, int) or len(ids) + self.task.cfg.max_new_tokens <= positions:
                return ids, wrong
            wrong = wrong[:-1]

    def sample(self, instances: Sequence[Any], generator: torch.Generator) -> list[list[Rollout]]:
        """Per instance a group: k rows i.i.d. from x, then G - k rows hinted with their wrong answers (or from x)."""
        k, rest = self.first, self.cfg.group_size - self.first
        prompts = [self.encode_prompt(self.task.prompt(inst)) for inst in instances]
        rows = [prompts[g] for g in range(len(instances)) for _ in range(k)]
        answers = self.answer(self.engine.start(rows), [instances[r // k] for r in range(len(rows))], generator)
        groups: list[list[Rollout]] = [[] for _ in instances]
        for r, ans in enumerate(answers):
            groups[r // k].append(self._rollout(r // k, instances[r // k], prompts[r // k], rows[r], ans))
        heads, origins = [], []
        for g, group in enumerate(groups):
            head, shown = self._hinted_context(prompts[g], self.hints(group))
            heads.append(head)
            origins.append(Hinted(k, tuple(r.text for r in shown)) if shown else Plain())
        rows = [heads[g] for g in range(len(instances)) for _ in range(rest)]
        answers = self.answer(self.engine.start(rows), [instances[r // rest] for r in range(len(rows))], generator)
        for r, ans in enumerate(answers):
            g = r // rest
            groups[g].append(self._rollout(g, instances[g], prompts[g], rows[r], ans, origins[g]))
        return groups


def chains_of(drawn: Sequence[Rollout]) -> list[list[Rollout]]:
    """The chains among a group's rows, in order: the rows whose origin is a chain item or an expansion, a new chain
    starting at each item of position 0 (for expansions, at each new sketch of position 0: its m solutions are one
    item)."""
    chains: list[list[Rollout]] = []
    previous: object = None
    for r in drawn:
        if not isinstance(r.origin, ChainItem | Expansion):
            continue
        item = r.origin.sketch if isinstance(r.origin, Expansion) else r
        if not chains or (r.origin.position == 0 and item is not previous):
            chains.append([])
        chains[-1].append(r)
        previous = item
    return chains


def _followed(r: Rollout) -> bool | None:
    """Whether a stage-II solution carries out its sketch (``Expansion.followed``)."""
    return r.origin.followed if isinstance(r.origin, Expansion) else None
