"""Every metric key sesa writes, declared once: its pattern, what it means and where its formula is.

The trainer and evaluation emit these keys (a test fails on any key they write that is not declared), the live
view takes its labels from :attr:`MetricKey.label`, the diversity report names its plots and tables with
:func:`key` (an undeclared pattern raises at import), and ``docs/metrics.md`` is generated from it
(sesa_cli.metrics_page; a test keeps it current). Renamed keys map to their current name in :data:`RENAMED`, so run
dirs written before a rename still read.

The prefix says what a number describes (one name per concept): ``rollout/`` what a sampler drew at a
training step (with a sequential sampler, the chain, not the plain-prompt policy), ``eval/`` validation samples drawn
i.i.d. from the plain prompt (or by the sampler ``sesa eval`` was given), ``policy/`` the plain-prompt policy itself,
computed exactly, ``estimate/`` a plug-in estimate of a ``policy/`` quantity from drawn samples (named so: it is
not exact), ``chain/`` the chains of a sequential sampler, ``loss/`` the update's objective and its
off-policy handling, ``optim/`` the optimizer step, ``train/`` the training procedure, ``compute/`` what training has spent so far
(sesa_cli.compute), ``time/`` wall time.

A method's own metrics (a policy loss's share of tokens it acts on, a loss term's value) are declared by the method
itself: its class carries its :class:`MetricKey` entries (``metrics``), which its registration passes to
:func:`declare` (sesa_cli.registry), so a plug-in's metrics are declared too; :func:`find` and the docs page read
both. Torch-free: the report and ``sesa --help`` import it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "METRIC_KEYS",
    "RENAMED",
    "MetricKey",
    "better",
    "current_name",
    "declare",
    "declared",
    "family",
    "find",
    "key",
    "label",
    "undeclared",
]


Better = Literal["higher", "lower", ""]


@dataclass(frozen=True)
class MetricKey:
    """One key, or a family of keys: ``{k}`` stands for a sample count (``eval/pass@{k}``)."""

    pattern: str
    meaning: str
    formula: str = ""
    """Where the formula is written out (a function's docstring, a config field)."""
    label: str = ""
    """Short label in the live training view; empty = not shown there."""
    better: Better = "higher"
    """Which way is good: ``higher``, ``lower``, or ``""`` (no direction: a diagnostic, a count, a setting). The
    report's best value over a run's steps is its maximum, its minimum, or not shown (:func:`better`)."""


_M = "sesa_cli.metrics"
METRIC_KEYS: tuple[MetricKey, ...] = (
    MetricKey("step", "Optimizer steps taken when the row was written (0 = the base, before any update).", better=""),
    # ---------------------------------------------------------------------------------------------------- rollout
    MetricKey("rollout/reward_mean", "Mean reward of the step's rollouts.", f"{_M}.rollout_stats", "reward"),
    MetricKey("rollout/reward_std", "Population std of the step's rewards.", f"{_M}.reward_stats", better=""),
    MetricKey(
        "rollout/frac_zero_std",
        "Share of groups whose rewards are all equal (no signal under a group baseline).",
        f"{_M}.reward_stats",
        better="lower",
    ),
    MetricKey("rollout/success", "Share of the step's rollouts that are correct.", f"{_M}.rollout_stats", "success"),
    MetricKey(
        "rollout/valid",
        "Share of the step's rollouts with a solution key (parse and validity).",
        f"{_M}.rollout_stats",
    ),
    MetricKey(
        "rollout/entropy",
        "Mean token entropy (nats) of the sampling distribution over every sampled token of the step.",
        f"{_M}.rollout_stats",
        "H",
        better="",
    ),
    MetricKey("rollout/response_len", "Mean sampled tokens per rollout.", f"{_M}.rollout_stats", better=""),
    MetricKey("rollout/turns", "Agent tasks: mean turns per episode.", f"{_M}.episode_turns", better=""),
    MetricKey(
        "rollout/grader_timeouts",
        "Rollouts the math grader gave up on (scored 0), a count.",
        "sesa_cli.tasks.math",
        better="lower",
    ),
    MetricKey("rollout/distinct", "Mean distinct solution keys per group.", f"{_M}.group_diversity"),
    MetricKey(
        "rollout/distinct_correct",
        "Mean distinct correct solution keys per group.",
        f"{_M}.group_diversity",
        "dc/grp",
    ),
    MetricKey(
        "rollout/answer_mi",
        "Mutual information (nats) between the prompt and the answer (solution key) over the step's rollouts, the "
        "prompts taken uniformly: how much the answers depend on the prompt; near 0 with a high "
        "rollout/answer_cond_entropy is RAGEN-2's template collapse. A plug-in estimate; steps with one prompt omit it.",
        "sesa_cli.collapse.input_dependence",
    ),
    MetricKey(
        "rollout/answer_mi_max",
        "log of the step's distinct prompts: the bound of rollout/answer_mi.",
        "sesa_cli.collapse.input_dependence",
        better="",
    ),
    MetricKey(
        "rollout/answer_cond_entropy",
        "Entropy (nats) of the answers (solution keys) of one prompt's rollouts, averaged over the step's prompts.",
        "sesa_cli.collapse.input_dependence",
        better="",
    ),
    MetricKey(
        "rollout/coverage",
        "Tasks with targets: share of the targets the step's rollouts hit.",
        "sesa_cli.trainer.Trainer.train_step",
        "cov",
    ),
    MetricKey(
        "rollout/targets_found",
        "Tasks with targets: distinct targets any rollout of the run has hit so far.",
        "sesa_cli.trainer.Trainer.train_step",
    ),
    # ----------------------------------------------------------------------------------------------------- chain
    MetricKey("chain/valid", "Sequential sampler: share of chain items that are valid.", f"{_M}.ChainHealth"),
    MetricKey(
        "chain/valid_last", "Sequential sampler: share of chains whose last item is valid.", f"{_M}.ChainHealth"
    ),
    MetricKey("chain/distinct", "Sequential sampler: mean distinct valid items per chain.", f"{_M}.ChainHealth"),
    MetricKey(
        "chain/cut",
        "Sequential sampler: share of chain items cut at their length limit.",
        f"{_M}.ChainHealth",
        better="lower",
    ),
    MetricKey(
        "chain/followed",
        "Two-stage sampler: share of judged stage-II solutions that follow their sketch.",
        f"{_M}.ChainHealth",
    ),
    MetricKey("chain/chains", "sesa eval: chains the chain health was measured on.", f"{_M}.ChainHealth", better=""),
    MetricKey("chain/valid_by_position", "sesa eval: chain/valid per chain position.", f"{_M}.ChainHealth", better=""),
    MetricKey(
        "chain/new_by_position",
        "sesa eval: share of chains whose item is valid and new, per position.",
        f"{_M}.ChainHealth",
        better="",
    ),
    MetricKey("chain/cut_by_position", "sesa eval: chain/cut per chain position.", f"{_M}.ChainHealth", better=""),
    MetricKey(
        "chain/followed_by_position", "sesa eval: chain/followed per chain position.", f"{_M}.ChainHealth", better=""
    ),
    # ------------------------------------------------------------------------------------------------------ eval
    MetricKey(
        "eval/reward_mean", "Mean reward of the validation samples (mean over instances).", f"{_M}.rollout_stats"
    ),
    MetricKey(
        "eval/success",
        "Share of validation samples that are correct (pass@1, mean over instances).",
        f"{_M}.rollout_stats",
    ),
    MetricKey(
        "eval/valid",
        "Share of validation samples with a solution key (agent tasks: episodes of valid replies only).",
        f"{_M}.rollout_stats",
    ),
    MetricKey(
        "eval/exact_instances_success",
        "Share of the validation samples on the instances the exact policy/* metrics cover (the first "
        "eval.policy_instances) that succeed: the sampled counterpart of policy/target_mass.",
        "sesa_cli.exact.PolicySnapshot.against_samples",
    ),
    MetricKey(
        "eval/entropy",
        "Token entropy of the validation samples (per instance over its tokens, then the mean over instances).",
        f"{_M}.rollout_stats",
        better="",
    ),
    MetricKey("eval/response_len", "Mean sampled tokens per validation sample.", f"{_M}.rollout_stats", better=""),
    MetricKey("eval/turns", "Agent tasks: mean turns per validation episode.", f"{_M}.episode_turns", better=""),
    MetricKey(
        "eval/grader_timeouts",
        "Validation samples the math grader gave up on, a count.",
        "sesa_cli.tasks.math",
        better="lower",
    ),
    MetricKey(
        "eval/pass@{k}", "Unbiased pass@k over the n samples of an instance, mean over instances.", f"{_M}.pass_at_k"
    ),
    MetricKey(
        "eval/distinct@{k}",
        "Expected distinct solution keys in a random k-subset of the n samples.",
        f"{_M}.distinct_at_k",
    ),
    MetricKey(
        "eval/distinct_correct@{k}",
        "Expected distinct correct keys in a random k-subset of the n samples.",
        f"{_M}.distinct_correct_at_k",
    ),
    MetricKey(
        "eval/coverage@{k}",
        "Tasks with targets: expected share of the targets hit by a random k-subset.",
        f"{_M}.coverage_at_k",
    ),
    MetricKey(
        "eval/cover@0.5",
        "Cover@0.5 (arXiv 2510.08325): share of validation instances solved by at least half of their samples; beside "
        "pass@k, it does not reward a policy that solves a prompt by guessing among few answers.",
        f"{_M}.cover_at",
    ),
    MetricKey(
        "eval/cover@0.8",
        "Cover@0.8: share of validation instances solved by at least 0.8 of their samples.",
        f"{_M}.cover_at",
    ),
    MetricKey(
        "eval/greedy_success",
        "Success of one greedy answer per instance (verl's do_sample=False).",
        "sesa_cli.evaluation.greedy_summary",
    ),
    MetricKey("eval/greedy_reward", "Reward of one greedy answer per instance.", "sesa_cli.evaluation.greedy_summary"),
    MetricKey(
        "eval/samples",
        "sesa eval: samples per instance (eval.samples).",
        "sesa_cli.config.EvalProtocolConfig",
        better="",
    ),
    MetricKey(
        "eval/instances",
        "sesa eval: validation instances (eval.instances).",
        "sesa_cli.config.EvalProtocolConfig",
        better="",
    ),
    MetricKey("ckpt", "sesa eval: the checkpoint evaluated (null = the base model).", better=""),
    # ---------------------------------------------------------------------------------------------------- policy
    MetricKey(
        "policy/valid_mass",
        "Exact probability that a plain-prompt sample is a valid solution (agent tasks: an episode of valid "
        "replies only; the rest ends on an invalid reply, a failure, or was pruned).",
        f"{_M}.policy_metrics",
    ),
    MetricKey(
        "policy/sampled_gap",
        "How far eval/exact_instances_success lies from the exact success probability of those instances "
        "([policy/target_mass, + policy/pruned_mass]), in standard deviations of the sampled share; above 3 the exact "
        "metrics do not describe what the policy samples (the report marks the run). The check also fails where "
        "policy/pruned_mass is above 0.05: the interval is then too wide to test (sesa_cli.intervals.gap_fails).",
        "sesa_cli.intervals.sampled_gap",
        better="lower",
    ),
    MetricKey(
        "policy/target_mass",
        "Exact success probability of one plain-prompt sample.",
        f"{_M}.policy_metrics",
        "pi success",
    ),
    MetricKey(
        "policy/effective_solutions",
        "exp(entropy) of the success mass over the targets: how many targets it is spread over.",
        f"{_M}.policy_metrics",
        "pi eff.sol",
    ),
    MetricKey("policy/solutions_above_1pct", "Targets with probability >= 0.01.", f"{_M}.policy_metrics"),
    MetricKey(
        "estimate/effective_solutions",
        "Where the solution space cannot be enumerated (Countdown, slippery maps): a plug-in estimate, from the "
        "evaluation's i.i.d. plain-prompt samples, of the effective number of correct solutions per instance, averaged "
        "over instances; biased low (at most the correct samples per instance). Not policy/effective_solutions.",
        f"{_M}.estimated_effective_solutions",
    ),
    MetricKey(
        "estimate/effective_solutions_low",
        "Lower end of the 95% percentile-bootstrap interval of estimate/effective_solutions over the instances.",
        f"{_M}.policy_estimate",
        better="",
    ),
    MetricKey(
        "estimate/effective_solutions_high",
        "Upper end of that interval.",
        f"{_M}.policy_estimate",
        better="",
    ),
    MetricKey(
        "policy/pruned_mass",
        "Agent tasks walked episode by episode: probability of the branches the walk cut unexpanded (below "
        "eval.walk_min_prob, or beyond eval.walk_branches live at once); the exact mass figures lie in [value, value + "
        "it]. Above 0.05 every exact figure is shown as that interval or marked, never bare, and the sampled-gap check "
        "fails (sesa_cli.intervals.PRUNED_LIMIT).",
        "sesa_cli.rollout.episode_tree",
        "pi pruned",
        better="lower",
    ),
    MetricKey(
        "policy/solution_entropy",
        "Entropy (nats) of the answer distribution given a valid answer.",
        f"{_M}.policy_metrics",
    ),
    MetricKey(
        "policy/coverage@{k}",
        "Expected share of the targets hit by k i.i.d. plain-prompt samples, exactly.",
        f"{_M}.policy_metrics",
    ),
    # ------------------------------------------------------------------------------------------------------ loss
    MetricKey(
        "loss/total",
        "The loss backpropagated: policy term + KL penalty - entropy bonus.",
        "sesa_cli.algos.compute_loss",
        better="",
    ),
    MetricKey(
        "loss/pg",
        "The aggregated (and importance-weighted) policy-gradient term.",
        "sesa_cli.algos.compute_loss",
        better="",
    ),
    MetricKey(
        "loss/clip_frac",
        "Share of tokens where PPO's clipped term is the one taken (every policy loss writes it; 0 where it does not "
        "clip).",
        "sesa_cli.losses.base.clipped_surrogate",
        better="",
    ),
    MetricKey("loss/approx_kl", "k3 estimate of KL(old || pi), token mean.", "sesa_cli.algos.compute_loss", better=""),
    MetricKey("loss/ratio_mean", "Token mean of pi / old.", "sesa_cli.algos.compute_loss", better=""),
    MetricKey(
        "loss/kl",
        "Token mean of the algo.kl_estimator estimate of KL(pi || reference).",
        "sesa_cli.algos.kl_penalty",
        better="",
    ),
    MetricKey(
        "loss/entropy",
        "Token mean of the policy's entropy (algo.entropy_coef > 0).",
        "sesa_cli.algos.compute_loss",
        better="",
    ),
    MetricKey(
        "loss/off_policy_frac",
        "Share of solution rows scored in a context other than the one that drew them.",
        "sesa_cli.update.loss_inputs",
        better="",
    ),
    MetricKey(
        "loss/is_weight_mean",
        "loss_context=is: mean truncated importance weight of the solution rows.",
        "sesa_cli.update.importance_weights",
        better="",
    ),
    MetricKey(
        "loss/is_weight_max",
        "loss_context=is: largest truncated importance weight of the solution rows.",
        "sesa_cli.update.importance_weights",
        better="",
    ),
    MetricKey(
        "loss/adv_changed_frac",
        "algo.off_policy strategies: share of solution rows whose advantage changed.",
        "sesa_cli.algos.off_policy",
        better="",
    ),
    MetricKey(
        "loss/neg_weight_mean",
        "weight_negatives: mean weight of the off-policy negative rows.",
        "sesa_cli.algos.off_policy.WeightNegatives",
        better="",
    ),
    MetricKey(
        "loss/distinct_rewarded_frac",
        "distinct_solutions: distinct rewarded solutions per rewarded off-policy row of the whole batch (1 = no repeats).",
        "sesa_cli.algos.off_policy.DistinctSolutions",
        better="",
    ),
    MetricKey(
        "loss/baseline_fallback_frac",
        "on_policy_baseline: share of groups with no on-policy row.",
        "sesa_cli.algos.no_on_policy_groups",
        better="",
    ),
    # ------------------------------------------------------------------------------------------- optim and train
    MetricKey(
        "optim/lr",
        "Learning rate of the step: optim.lr x the warm-up and optim.lr_schedule multiplier.",
        "sesa_cli.algos.lr_scale",
        better="",
    ),
    MetricKey(
        "optim/no_signal",
        "1 when the step took no optimizer step: no row of its batch had a non-zero advantage and no loss term "
        "brought rows, so its loss held only the entropy bonus and KL penalty (not stepped on alone: the optimizer "
        "would turn them into learning-rate-sized steps); 0 otherwise.",
        "sesa_cli.learner.Learner.update",
        better="",
    ),
    MetricKey(
        "optim/nonfinite_losses",
        "Mini-batches of the step whose loss was not finite: each skipped its optimizer step (train.max_nonfinite "
        "in a row stop the run). A run with any is counted lost by the report (sesa_cli.report.marks).",
        "sesa_cli.learner.Learner.update",
        better="lower",
    ),
    MetricKey(
        "optim/grad_norm",
        "Gradient norm before clipping to optim.max_grad_norm (mean over mini-batches).",
        "sesa_cli.update.optimizer_step",
        better="",
    ),
    MetricKey(
        "train/resample_rounds",
        "A batch filter that refills (sampler.filters.dynamic_sampling, DAPO): extra sampling rounds of the step.",
        better="",
    ),
    MetricKey(
        "train/kept_groups",
        "A batch filter that does not refill (sampler.filters.rollout_filter): groups trained on.",
        better="",
    ),
    MetricKey(
        "collapse/flag",
        "1 when the collapse monitor flags the step.",
        "sesa_cli.collapse.CollapseMonitor",
        better="lower",
    ),
    MetricKey("revive/parent", "1 on the rows a revived run copied from its parent's history.", better=""),
    # --------------------------------------------------------------------------------------------------- compute
    MetricKey(
        "compute/train_flops",
        "FLOPs training has spent up to this step (cumulative; a resumed or revived run continues its checkpoint's): "
        "the sampling forwards, the update's forwards and its backward (2x the forwards with gradient); evaluations "
        "and exact-policy scoring excluded. Counted from the model's shapes; run.json's compute block has the phases.",
        "sesa_cli.compute.ComputeLedger.train_flops",
        better="",
    ),
    MetricKey(
        "compute/sampled_tokens",
        "Tokens the policy sampled in training draws up to this step (cumulative; sketches, chain items, a refilling "
        "filter's extra rounds included; teacher-forced feedback excluded).",
        "sesa_cli.compute.ComputeLedger.sampled_tokens",
        better="",
    ),
    MetricKey(
        "compute/scored_tokens",
        "Token positions the update ran forward and backward up to this step (cumulative; padding included where the "
        "scoring pass computes it: model.padding_free=false).",
        "sesa_cli.compute.ComputeLedger.scored_tokens",
        better="",
    ),
    # ------------------------------------------------------------------------------------------------------ time
    MetricKey("time/sample_s", "Seconds spent drawing the step's rollouts.", better="lower"),
    MetricKey("time/update_s", "Seconds spent in the update.", better="lower"),
    MetricKey("time/policy_s", "Seconds spent scoring the exact policy metrics.", better="lower"),
    MetricKey("time/step_s", "Seconds of the whole step.", "", "s/step", better="lower"),
)

RENAMED: dict[str, str] = {
    **{
        f"train/{name}": f"rollout/{name}"
        for name in (
            "reward_mean",
            "reward_std",
            "frac_zero_std",
            "success",
            "valid",
            "distinct",
            "distinct_correct",
            "entropy",
            "response_len",
            "coverage",
            "targets_found",
        )
    },
    "eval/reward": "eval/reward_mean",
    "eval/n": "eval/samples",
    "is/weight_mean": "loss/is_weight_mean",
    "is/weight_max": "loss/is_weight_max",
    "loss/loss": "loss/total",
    "loss/pg_loss": "loss/pg",
    "loss/grad_norm": "optim/grad_norm",
    "train/lr": "optim/lr",
}
"""Old metric key -> current one. Statistics of what the sampler drew were ``train/*`` before they were named
``rollout/*``; then each remaining concept got one name (``is/weight_mean`` was also logged as
``loss/is_weight_mean``)."""


def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(pattern).replace(re.escape("{k}"), r"\d+") + "$")


_PATTERNS = [(entry, _regex(entry.pattern)) for entry in METRIC_KEYS]
_BY_PATTERN = {entry.pattern: entry for entry in METRIC_KEYS}
_DECLARED: dict[str, tuple[MetricKey, str]] = {}
"""The methods' own keys (:func:`declare`): pattern -> (declaration, the method that declared it)."""


def declare(entries: Iterable[MetricKey], by: str) -> None:
    """Declare a method's metric keys (called by its registration, sesa_cli.registry.Registry.register); ``by``
    names the method in messages. A key declared twice, by sesa's table or by another method, raises ``ValueError``:
    one name per concept."""
    for entry in entries:
        if entry.pattern in _BY_PATTERN:
            owner = _DECLARED.get(entry.pattern, (None, "sesa_cli.metric_keys"))[1]
            raise ValueError(f"{by} declares metric key {entry.pattern!r}, already declared by {owner}")
        if not entry.meaning.endswith("."):
            raise ValueError(f"{by}: the meaning of metric key {entry.pattern!r} must be a sentence")
        _DECLARED[entry.pattern] = (entry, by)
        _BY_PATTERN[entry.pattern] = entry
        _PATTERNS.append((entry, _regex(entry.pattern)))


def declared() -> list[tuple[MetricKey, str]]:
    """The methods' own keys declared so far, with the method that declared each, in pattern order."""
    return [_DECLARED[pattern] for pattern in sorted(_DECLARED)]


def find(name: str) -> MetricKey | None:
    """The declaration a key matches (``eval/pass@16`` matches ``eval/pass@{k}``), sesa's or a method's, or None."""
    for entry, regex in _PATTERNS:
        if regex.match(name):
            return entry
    return None


def key(pattern: str, **fields: int) -> str:
    """A declared pattern as a key: ``key("eval/pass@{k}", k=16)`` -> ``"eval/pass@16"``; ``key("rollout/success")``
    -> itself. Raises ``KeyError`` for a pattern not declared (:data:`METRIC_KEYS`, or a registered method's), so
    code that names a key fails at import when the key is renamed."""
    if pattern not in _BY_PATTERN:
        raise KeyError(f"metric key {pattern!r} is not declared in sesa_cli.metric_keys.METRIC_KEYS")
    return pattern.format(**fields) if fields else pattern


def family(pattern: str) -> str:
    """The base of a declared ``@{k}`` family: ``family("eval/pass@{k}")`` -> ``"eval/pass"``."""
    if not key(pattern).endswith("@{k}"):
        raise KeyError(f"metric key {pattern!r} is not an @{{k}} family")
    return pattern.removesuffix("@{k}")


def label(name: str) -> str:
    """The live view's label of a declared key; ``KeyError`` if it has none."""
    entry = _BY_PATTERN[key(name)]
    if not entry.label:
        raise KeyError(f"metric key {name!r} has no live label in sesa_cli.metric_keys")
    return entry.label


def better(name: str) -> Better:
    """Which way ``name`` (a key, ``eval/pass@16``, or an old name) is good: its declaration's
    :attr:`MetricKey.better`; ``""`` for a key declared nowhere (a plug-in's own: no guess)."""
    entry = find(current_name(name))
    return entry.better if entry is not None else ""


def undeclared(names: Iterable[str]) -> list[str]:
    """The keys of ``names`` that match no declaration (sorted)."""
    return sorted({name for name in names if find(name) is None})


def current_name(name: str) -> str:
    """The current name of a metric key (itself, or its :data:`RENAMED` successor)."""
    return RENAMED.get(name, name)
