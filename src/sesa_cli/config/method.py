"""The method's sections, each read by what carries it out: ``sampler.*`` (how the groups are drawn, and which are
kept: sesa_cli.rollout), ``algo.*`` (the loss: sesa_cli.learner, sesa_cli.algos, sesa_cli.terms) and ``optim.*``
(the optimizer). The names a registry holds (a sampler, an advantage, a loss term, a batch filter, ...) are checked
against that registry by the command layer (sesa_cli.commands.validate and sesa_cli.commands.registered), not copied
here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sesa_cli.config.base import ConfigError, at_least, one_of, positive, raise_if

__all__ = ["NAMED_PLUGINS", "PLUGIN_MAPPINGS", "SEQUENTIAL_ONLY", "AlgoConfig", "OptimConfig", "SamplerConfig",
           "plugin_name"]  # fmt: skip

PLUGIN_MAPPINGS = ("algo.terms", "sampler.filters")
"""The config keys that map a plug-in's name to its settings (``algo.terms.found.coef``): their names and settings
are the plug-ins' registries', not the schema's (a plain override adds one; sesa_cli.commands.schemas)."""
NAMED_PLUGINS = ("algo.advantage", "algo.loss")
"""The config keys that choose one plug-in: a mapping of its ``name`` and its settings (``algo.advantage.k=4``); its
settings are the chosen plug-in's, checked against its registry, not the schema (a plain override adds one). On the
command line a bare name, ``algo.advantage=passk``, is ``algo.advantage.name=passk`` (sesa_cli.deprecations)."""


def plugin_name(value: Any) -> str:
    """The name a :data:`NAMED_PLUGINS` value chooses (a mapping's ``name``; a bare string, as a Python caller may
    give, is the name itself)."""
    if isinstance(value, str):
        return value
    return str(value.get("name", "")) if hasattr(value, "get") else ""


SEQUENTIAL_ONLY = (
    "sampler.stage1",
    "sampler.sketch_max_tokens",
    "sampler.solutions_per_sketch",
    "sampler.parallel_rows",
    "algo.loss_context",
    "algo.is_clip",
    "algo.train_sketches",
    "algo.off_policy",
)
"""Config keys that ``sampler=parallel`` never reads: every parallel row is drawn and scored under the plain
prompt. Set on the command line of a run that samples in parallel they are an error (sesa_cli/commands/validate.py),
not silently ignored; recipes and parent runs may carry them (a revived sequential run switched to parallel keeps its
own values). The diversity report leaves them out of a parallel group's label."""


@dataclass
class SamplerConfig:
    """How the G rollouts of a group are drawn (docs/samplers.md)."""

    name: str = "parallel"
    """The sampler (registry ``sesa_cli.rollout.samplers.SAMPLERS``, the ``sampler=`` group): ``sesa train --help``
    lists the options, ``--help sampler`` what each draws, a plug-in's too (docs/samplers.md)."""
    group_size: int = 8
    """G, rollouts per prompt (solutions per group = G x solutions_per_sketch)."""
    temperature: float = 1.0
    """Sampling temperature (> 0)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 disables it."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 disables it."""
    stage1: str = "auto"
    """sequential only: ``sketch`` drafts short sketches (for agent tasks: plans) sequentially, then expands each into
    a solution (an episode) in parallel, the paper's two-stage form; ``solution`` conditions each whole solution on
    the earlier ones (the paper's synthetic-task form); ``auto`` = sketch only for a task whose tiny base was measured
    to follow its sketches as configured (stage II carries out the sketch in >= 80% of solutions: the path task, and
    on model=tiny FrozenLake, Sokoban and Countdown with their recipes' settings), else solution
    (``Task.sketch_followed``; the table is in docs/samplers.md)."""
    sketch_max_tokens: int = 0
    """sequential, stage1=sketch: longest sketch in tokens; 0 = the task's own budget (``Task.sketch_max_tokens``:
    in compact style the longest well-formed sketch plus its stop, in chat style ``task.max_new_tokens``). A sketch
    that reaches it is cut, and the sampler closes it with the task's stop before the next one."""
    solutions_per_sketch: int = 1
    """sequential, stage1=sketch: m solutions drawn from every sketch."""
    parallel_rows: int = 0
    """sequential: k of the G rows of every group drawn i.i.d. from the plain prompt, as ``sampler=parallel`` draws
    them (on-policy rows: every advantage kept, positive and negative); the other G - k are a sequential chain of
    G - k items (sketches expanded, or whole solutions). 0 = the whole group sequential (the paper). The groups'
    advantages are normalised over all G rows. Why (docs/samplers.md, "FrozenLake: sequential against parallel"):
    a group of forced-different rows trains the plain-prompt policy on what the chain found, which widens it and
    costs success per sample; its i.i.d. half keeps the on-policy signal of GRPO, pushing down what the policy
    itself gets wrong. In [0, G - 1]. ``sampler=lte``: the k rows drawn i.i.d. before the G - k hinted with their
    wrong answers (0 = G // 2; sesa_cli.rollout.samplers.LTESampler)."""
    filters: dict[str, Any] = field(default_factory=dict)
    """Batch filters (registry ``sesa_cli.rollout.filters.FILTERS``), name -> settings: which drawn groups a step
    keeps. A filter that refills draws more prompts in place of the groups it drops; one that does not trains on the
    groups it keeps while the step's rollout metrics cover the whole batch. A value is a mapping of the filter's
    settings, a bare value of its first one, ``true`` for its defaults, ``false`` or ``null`` for off, e.g.
    ``sampler.filters.dynamic_sampling.max_rounds=8``, ``sampler.filters={rollout_filter: 0.25}``. Each filter's
    settings are documented in its file (sesa_cli/rollout/filters/); ``sesa train --help sampler`` lists every
    registered one."""

    def __post_init__(self) -> None:
        one_of(self.stage1, "sampler.stage1", ("auto", "sketch", "solution"))
        if self.group_size < 2:
            raise ConfigError("sampler.group_size must be >= 2: group-normalised advantages need two rollouts")
        if self.temperature <= 0:
            raise ConfigError("sampler.temperature must be > 0")
        if not 0 < self.top_p <= 1:
            raise ConfigError("sampler.top_p must be in (0, 1]")
        if self.solutions_per_sketch < 1:
            raise ConfigError("sampler.solutions_per_sketch must be >= 1")
        # a recipe's parallel_rows (task_model/train/agent_tiny) is the chain samplers' and ignored by i.i.d. sampling
        if self.name != "parallel" and not 0 <= self.parallel_rows < self.group_size:
            raise ConfigError(
                f"sampler.parallel_rows={self.parallel_rows} must be in [0, sampler.group_size - 1] = "
                f"[0, {self.group_size - 1}]: at least one row of a group is sequential"
            )
        raise_if(at_least(self, "sampler", 0, "top_k", "sketch_max_tokens"))  # sketch_max_tokens 0 = the task's own


@dataclass
class AlgoConfig:
    """The RL objective: an advantage estimator and a policy loss (plug-ins with their own settings), a token
    aggregation, the KL and entropy terms, the loss terms, and the treatment of off-policy rows."""

    name: str = "grpo"
    """Algo option name (``algo=`` group)."""
    advantage: dict[str, Any] = field(default_factory=lambda: {"name": "grpo"})
    """The advantage estimator: its ``name`` (registry ``sesa_cli.advantages.ADVANTAGES``) and its settings, e.g.
    ``algo.advantage.name=passk algo.advantage.k=4`` (``algo.advantage=passk`` names it with its defaults). Each
    estimator's settings are documented in its file (sesa_cli/advantages/); ``sesa train --help algo`` lists every
    registered one, a plug-in's too, with its settings."""
    loss: dict[str, Any] = field(default_factory=lambda: {"name": "ppo_clip"})
    """The per-token policy loss: its ``name`` (registry ``sesa_cli.losses.POLICY_LOSSES``) and its settings, e.g.
    ``algo.loss=forking_tokens algo.loss.rho=0.2``. Each loss's settings are documented in its file
    (sesa_cli/losses/); ``sesa train --help algo`` lists every registered one with its settings."""
    aggregation: str = "token_mean"
    """How per-token losses become one scalar (registry ``sesa_cli.algos.AGGREGATIONS``)."""
    clip_low: float = 0.2
    """PPO clip epsilon below 1 (ratio floor 1 - clip_low), of every PPO-clipped loss."""
    clip_high: float = 0.2
    """PPO clip epsilon above 1 (ratio ceiling 1 + clip_high; DAPO's clip-higher uses 0.28)."""
    kl_coef: float = 0.0
    """beta, weight of the KL penalty to the reference (initial) policy; 0 skips the reference forward."""
    kl_estimator: str = "k3"
    """KL estimator per token: k1, k2 or k3 (Schulman's approximations)."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (subtracted from the loss)."""
    loss_context: str = "prompt"
    """Context under which a solution's log-prob is scored in the loss: ``prompt`` = log pi(y|x) (the paper);
    ``conditioned`` = log pi(y | the context that drew y); ``is`` = prompt context with the truncated importance
    weight min(is_clip, pi(y|x) / pi(y|ctx)). A setting of the loss (the old key ``sampler.loss_context`` still works
    for one release)."""
    is_clip: float = 2.0
    """Truncation c of the importance weight min(c, pi(y|x) / pi(y|ctx)) of ``loss_context=is`` and of
    ``off_policy=weight_negatives``."""
    train_sketches: bool = False
    """sequential, stage1=sketch: also give sketch tokens a policy-gradient term (advantage = mean of its solutions).
    A sketch that repeats an earlier sketch of its chain is never pushed up (advantage min(0, a)): stage I is asked
    for a sketch unlike those listed, and rewarding a repeat taught FrozenLake's chains to repeat their best plan
    (distinct sketches per chain of 8 fell from 6.5 to 1-2 within 50 steps; docs/samplers.md). Nor is a sketch none
    of whose solutions carried it out (``Expansion.followed`` False; a task that cannot tell keeps the credit):
    credited with what its solutions won without it, malformed sketches took over stage I (docs/samplers.md)."""
    terms: dict[str, Any] = field(default_factory=dict)
    """Loss terms (registry ``sesa_cli.terms.TERMS``), name -> settings: a term that brings its own rows is added as
    ``coef`` times its loss to every mini-batch's objective (``coef`` 0 = off), a term that changes the rewards (an
    exploration bonus) by its own scale. A value is a mapping of the term's settings (``algo.terms.found.rows=all``),
    a bare number for its first setting (``algo.terms={follow: 0.1, found: 0.2}``), ``false`` or ``null`` for off.
    Each term's settings are documented in its file (sesa_cli/terms/); ``sesa train --help algo`` lists every
    registered one."""
    adv_eps: float = 1e-6
    """Added to the divisor of the group-normalised advantages (GRPO's std, and the estimators that divide alike)."""
    norm_constant: int = 0
    """Dr. GRPO seq_sum_norm: constant divisor; 0 = the task's max_new_tokens."""
    off_policy: str = "drop_negatives"
    """Off-policy strategy (registry ``sesa_cli.algos.OFF_POLICY``, sesa_cli/algos/off_policy.py; the old key
    ``sampler.off_policy`` still works for one release): what the loss does with off-policy rows, solutions drawn in
    a context other than the one they are scored in (with ``algo.loss_context=prompt`` or ``is``, every chain
    item after the first and every stage-II solution; never a sketch row, never with ``loss_context=conditioned``,
    never with parallel sampling). Under the plain-prompt loss such a row's negative advantage pushes down
    log pi(y|x) of a solution the plain policy would almost never draw, without bound (with one update per batch
    the PPO ratio is exactly 1), and with it the prefixes it shares with the targets the chain found: measured on
    the path task, discovered targets fell 8-26 nats under the plain prompt.
    ``drop_negatives`` (the default): negative advantages of off-policy rows set to 0, positives kept
    (docs/results.md, claims II and III). ``distinct_solutions``: as ``drop_negatives``, and the positive
    advantages of a prompt's rows shared out per distinct rewarded solution (a solution drawn n times gets 1/n of
    each row's advantage, the prompt's total positive push kept), so what the policy already draws often is not
    pushed n times as hard as what the chain found once; measured on the path task from scratch on seeds 0-4
    (docs/samplers.md) it keeps about twice the targets of ``drop_negatives`` at a lower target mass; it counts
    repeats over the whole batch, every data-parallel replica's rows. ``paper``: every advantage as computed (the
    paper's loss). ``weight_negatives``: negative advantages of off-policy rows multiplied by the truncated
    importance weight min(algo.is_clip, pi(y|x) / pi(y|ctx)) of the whole solution, positives kept (the negative
    push on y is bounded by how likely the plain policy is to draw it). ``on_policy_baseline``: the group baseline
    (the mean the advantage subtracts) from the group's on-policy rows only, the scale as the estimator has it; a
    group with no on-policy row keeps the estimator's own baseline (counted)."""
    ppo_epochs: int = 1
    """Optimisation passes over each batch; > 1 makes the ratio against the sampling-time log-probs matter."""
    minibatches: int = 1
    """Mini-batches per epoch (split over sequences)."""

    def __post_init__(self) -> None:
        one_of(self.loss_context, "algo.loss_context", ("prompt", "conditioned", "is"))
        raise_if(
            at_least(self, "algo", 1, "ppo_epochs", "minibatches") + at_least(self, "algo", 0, "clip_low", "clip_high")
        )
        problems = at_least(self, "algo", 0, "kl_coef", "adv_eps", "norm_constant")
        problems += positive(self, "algo", "is_clip")
        if self.off_policy == "weight_negatives" and self.loss_context == "is":
            problems.append(
                "algo.off_policy=weight_negatives with algo.loss_context=is would weight negatives twice "
                "(loss_context=is already weights every off-policy row); use algo.loss_context=prompt"
            )
        raise_if(problems)


@dataclass
class OptimConfig:
    """The optimizer (``optim.*``): AdamW on the trainable weights, its learning rate warmed up and scheduled over
    the run, gradients clipped by norm."""

    lr: float = 1e-4
    """Peak AdamW learning rate of the policy (the warm-started tiny model degrades its grammar at 1e-3)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up over this many steps (< ``train.steps``)."""
    lr_schedule: str = "constant"
    """After the warm-up: ``constant`` (verl's default), ``linear`` decay to 0 at ``train.steps`` (TRL's default) or
    ``cosine`` decay to 0 (registry ``sesa_cli.algos.LR_SCHEDULES``). A revived run decays over its new total of
    steps."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global norm before each step (``optim/grad_norm`` logs it before clipping)."""

    def __post_init__(self) -> None:
        problems = positive(self, "optim", "lr", "max_grad_norm")
        raise_if(problems + at_least(self, "optim", 0, "warmup_steps", "weight_decay"))
