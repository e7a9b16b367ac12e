"""Evaluation and training metrics: pass@k, coverage@k, distinct@k, token entropy, rollout statistics, exact policy
metrics, chain health (sesa_cli.chain_health, handed on here; the collapse monitor that reads them is
sesa_cli.collapse).

Every function here is pure and exact (no sampling, no global state) and depends on numpy and the standard library
only: ``sesa diversity-report`` imports this module and must start without torch.

Reading pass@k and the other @k metrics
---------------------------------------
For a problem with ``n`` drawn samples of which ``c`` are correct, :func:`pass_at_k` is the unbiased estimator of
Chen et al. 2021 ("Evaluating Large Language Models Trained on Code"):

    pass@k = 1 − C(n−c, k) / C(n, k),

the probability that a *uniformly random k-subset of the n drawn samples* contains a correct one. Average it over
problems to report a benchmark number. The @k diversity metrics (:func:`distinct_at_k`, :func:`coverage_at_k`, ...)
are the same kind of quantity: exact expectations over random k-subsets of the n drawn samples, by linearity of
expectation a sum of per-key pass@k terms.

When the n samples are i.i.d. (the ``parallel`` sampler) this is an unbiased estimate of the pass@k of k fresh
i.i.d. draws from the policy. With a sequential sampler (SESA, arXiv 2510.15502) the samples of a group are *not*
i.i.d.: sample j is conditioned on samples 1..j−1 (and in sketch mode on their sketches). pass@k is then to be read
as "the expected best-of-k over random k-subsets of the n samples that were drawn together", a property of the whole
group of n, not the pass@k of k independent draws, and not what the policy would achieve if asked to draw only k
in sequence (those would be conditioned on a shorter history). For the latter, :func:`sequence_pass_at_k` gives the
success of the *first* k samples in draw order ("pass@k of the sequence"); report both for sequential samplers.
pass@n is the same under both readings (any sample of the group correct).

Rollout statistics and policy metrics
-------------------------------------
Everything computed on what a sampler drew (:func:`reward_stats`, :func:`group_diversity`, token entropy of the
drawn rows) is logged as ``rollout/...``: with a sequential sampler it describes the chain, not the policy a user
samples from the plain prompt. Where a task can enumerate its whole solution space (the path task's leaves),
:func:`policy_metrics` gives exact properties of the plain-prompt policy from the probability of every solution,
logged as ``policy/...``.

Not done here on purpose: max-over-k or bootstrap-with-replacement estimates (verl's ``best@k`` under-reports, verl
PR #7240), or pass@k from a single greedy sample.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sesa_cli.chain_health import ChainHealth, chain_health
from sesa_cli.intervals import mean_interval

__all__ = [
    "ChainHealth",
    "chain_health",
    "cover_at",
    "coverage_at_k",
    "distinct_at_k",
    "distinct_correct_at_k",
    "expected_distinct_at_k",
    "group_diversity",
    "mean_over_pools",
    "mean_token_entropy",
    "pass_at_k",
    "pass_at_k_curve",
    "policy_metrics",
    "power_of_two_ks",
    "reward_stats",
    "rollout_stats",
    "sequence_pass_at_k",
]


def as_int(value: Any, name: str) -> int:
    """``value`` as a Python int (numpy integers accepted).

    Raises:
        TypeError: for bools, floats and anything else that is not an integer.
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None


# --------------------------------------------------------------------------------------------------------- pass@k
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator (Chen et al. 2021) for one problem with ``n`` samples, ``c`` of them correct.

    pass@k = 1 − C(n−c, k) / C(n, k) = P(a uniformly random k-subset of the n samples holds ≥ 1 correct one).

    Computed without binomials in the product form of the HumanEval reference implementation,

        C(n−c, k) / C(n, k) = Π_{i=n−c+1}^{n} (1 − k/i),

    accumulated as a sum of ``log1p`` terms and turned back with ``expm1`` so that small values keep their relative
    precision; the result is accurate to ~1e-15 for n in the tens of thousands.

    Special cases: 1.0 when n − c < k (every k-subset holds a correct sample), 0.0 when c == 0. pass@1 = c/n;
    pass@n = 1[c > 0].

    Raises:
        ValueError: if k < 1, k > n, c < 0 or c > n.
        TypeError: if an argument is not an integer.
    """
    n, c, k = as_int(n, "n"), as_int(c, "c"), as_int(k, "k")
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, got k={k}")
    if k > n:
        raise ValueError(f"pass@k needs k <= n (draw at least k samples), got k={k}, n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got c={c}, n={n}")
    if c == 0:
        return 0.0
    if n - c < k:
        return 1.0
    # Here i ≥ n−c+1 > k, so every factor 1 − k/i lies in (0, 1) and log1p is finite.
    i = np.arange(n - c + 1, n + 1, dtype=np.float64)
    log_fail = float(np.sum(np.log1p(-k / i)))
    return min(1.0, max(0.0, -math.expm1(log_fail)))


COVER_TAUS = (0.5, 0.8)
"""The τ of Cover@τ the evaluation reports (``eval/cover@0.5``, ``eval/cover@0.8``)."""


def cover_at(correct: Sequence[int], samples: Sequence[int], tau: float) -> float:
    """Cover@τ (arXiv 2510.08325): the share of prompts solved in at least a fraction ``tau`` of their samples,
    (1/P) Σ_p 1[c_p / n_p >= τ], with ``correct[p]`` = c_p of ``samples[p]`` = n_p. Beside pass@k, which rewards a
    method that guesses (on a task of few answers, k guesses solve a prompt the policy does not know), Cover@τ asks
    that the policy solve the prompt reliably.

    Raises:
        ValueError: for no prompts, lengths that differ, τ outside (0, 1], or c_p outside [0, n_p], n_p < 1.
    """
    if not correct or len(correct) != len(samples):
        raise ValueError(f"cover@tau needs one count per prompt, got {len(correct)} counts and {len(samples)} sizes")
    if not 0 < tau <= 1:
        raise ValueError(f"cover@tau needs 0 < tau <= 1, got {tau}")
    hits = 0
    for c, n in zip(correct, samples, strict=True):
        c, n = as_int(c, "correct"), as_int(n, "samples")
        if n < 1 or not 0 <= c <= n:
            raise ValueError(f"cover@tau needs 0 <= c <= n and n >= 1, got c={c}, n={n}")
        hits += c >= tau * n
    return hits / len(correct)


def power_of_two_ks(n: int) -> list[int]:
    """The k values logged by default: 1, 2, 4, … ≤ n, plus n itself if it is not a power of two (prime-rl style).

    Raises:
        ValueError: if n < 1.
    """
    n = as_int(n, "n")
    if n < 1:
        raise ValueError(f"need n >= 1 samples, got n={n}")
    ks = [1 << e for e in range(n.bit_length()) if (1 << e) <= n]
    if ks[-1] != n:
        ks.append(n)
    return ks


def pass_at_k_curve(n: int, c: int, ks: Sequence[int] | None = None) -> dict[int, float]:
    """``{k: pass_at_k(n, c, k)}`` for each k in ``ks`` (default :func:`power_of_two_ks` ``(n)``), in the given order.

    Raises:
        ValueError: as :func:`pass_at_k`, for any k out of range.
    """
    ks = power_of_two_ks(n) if ks is None else ks
    return {as_int(k, "k"): pass_at_k(n, c, k) for k in ks}


def sequence_pass_at_k(correct: Sequence[bool], k: int) -> float:
    """The "pass@k of the sequence": 1.0 if any of the first ``k`` samples in draw order is correct, else 0.0.

    For sequential samplers this is the success of a sequence of k, as opposed to :func:`pass_at_k`, which averages
    over all k-subsets of the n samples drawn together (see the module docstring). For i.i.d. samples it is an
    unbiased but higher-variance estimate of the same quantity as :func:`pass_at_k`.

    Raises:
        ValueError: if k < 1 or k > len(correct).
    """
    k = as_int(k, "k")
    if not 1 <= k <= len(correct):
        raise ValueError(f"sequence pass@k needs 1 <= k <= n, got k={k}, n={len(correct)}")
    return 1.0 if any(bool(x) for x in correct[:k]) else 0.0


# ------------------------------------------------------------------------------------------- distinct and coverage
def expected_distinct_at_k(counts: Sequence[int], n: int, k: int) -> float:
    """Expected number of distinct keys in a uniformly random k-subset of ``n`` samples.

    ``counts[j]`` is how many of the n samples carry key j (samples without a key are simply not counted, so
    Σ counts ≤ n). By linearity of expectation over keys,

        E[#distinct keys in a k-subset] = Σ_j P(key j appears) = Σ_j pass_at_k(n, counts[j], k).

    At k = n this is the number of keys with a non-zero count; at k = 1 it is Σ counts / n.

    Raises:
        ValueError: if k is out of [1, n], a count is negative, or the counts add up to more than n.
    """
    n, k = as_int(n, "n"), as_int(k, "k")
    if not 1 <= k <= n:
        raise ValueError(f"distinct@k needs 1 <= k <= n, got k={k}, n={n}")
    counts = [as_int(c, "count") for c in counts]
    if any(c < 0 for c in counts):
        raise ValueError(f"key counts must be >= 0, got {counts}")
    if sum(counts) > n:
        raise ValueError(f"key counts add up to {sum(counts)} > n={n}")
    # Keys with the same count contribute the same term: group them (a group usually repeats a few keys).
    return math.fsum(m * pass_at_k(n, c, k) for c, m in Counter(counts).items() if c > 0)


def coverage_at_k(keys: Sequence[str | None], targets: Collection[str], k: int) -> float:
    """Expected fraction of the target keys hit by a uniformly random k-subset of the samples (path task).

    With n = len(keys), U = the number of distinct targets and n_t = #{samples whose key is t},

        coverage@k = (1/U) Σ_{t ∈ targets} pass_at_k(n, n_t, k).

    None keys (unparseable or invalid samples) and keys outside ``targets`` never count, but do count in n.

    Raises:
        ValueError: if there are no targets or k is out of [1, n].
    """
    target_set = set(targets)
    if not target_set:
        raise ValueError("coverage@k needs at least one target key")
    n, k = len(keys), as_int(k, "k")
    if not 1 <= k <= n:
        raise ValueError(f"coverage@k needs 1 <= k <= n, got k={k}, n={n}")
    hits = Counter(key for key in keys if key is not None and key in target_set)
    return math.fsum(pass_at_k(n, c, k) for c in hits.values()) / len(target_set)


def distinct_at_k(keys: Sequence[str | None], k: int) -> float:
    """Expected number of distinct non-None keys in a uniformly random k-subset of the n = len(keys) samples.

    = :func:`expected_distinct_at_k` over the counts of each non-None key; None keys count in n only.

    Raises:
        ValueError: if k is out of [1, n].
    """
    counts = Counter(key for key in keys if key is not None)
    return expected_distinct_at_k(list(counts.values()), len(keys), k)


def distinct_correct_at_k(keys: Sequence[str | None], correct: Sequence[bool], k: int) -> float:
    """Expected number of distinct keys of *correct* samples in a uniformly random k-subset of the n samples.

    = Σ_{key} pass_at_k(n, #{correct samples with that key}, k), over non-None keys; incorrect samples and None keys
    count in n only.

    Raises:
        ValueError: if ``keys`` and ``correct`` differ in length or k is out of [1, n].
    """
    if len(keys) != len(correct):
        raise ValueError(f"keys and correct must have the same length, got {len(keys)} and {len(correct)}")
    counts = Counter(key for key, ok in zip(keys, correct, strict=True) if ok and key is not None)
    return expected_distinct_at_k(list(counts.values()), len(keys), k)


# ----------------------------------------------------------------------------------------- per-step training stats
def mean_token_entropy(entropies: npt.ArrayLike, mask: npt.ArrayLike) -> float:
    """Masked mean of per-token entropies of the sampling distribution: Σ H·m / Σ m, in nats if H is.

    Args:
        entropies: per-token entropies H, any shape, e.g. ``(batch, seq)``; numpy array or nested lists.
        mask: same shape; 1 (or True) on generated tokens, 0 on prompt and padding. Non-binary weights are used
            as weights.

    Returns 0.0 if the mask sums to zero. Sums are taken in float64.

    Raises:
        ValueError: if the shapes differ.
    """
    h = np.asarray(entropies, dtype=np.float64)
    m = np.asarray(mask, dtype=np.float64)
    if h.shape != m.shape:
        raise ValueError(f"entropies and mask must have the same shape, got {h.shape} and {m.shape}")
    total = float(m.sum())
    if total == 0.0:
        return 0.0
    # Padding positions may hold NaN/inf and 0·inf = NaN, so zero them before weighting by the mask.
    return float((np.where(m != 0, h, 0.0) * m).sum() / total)


def episode_turns(mask: Sequence[bool] | None) -> int:
    """Turns the policy took in one episode: the maximal runs of sampled tokens (``mask`` True) in its transcript,
    which alternate with the environment's teacher-forced feedback (``mask`` False). ``None`` (a single-turn
    completion, every token sampled) is one turn."""
    if mask is None:
        return 1
    return sum(1 for i, sampled in enumerate(mask) if sampled and (i == 0 or not mask[i - 1]))


def reward_stats(rewards: npt.ArrayLike) -> dict[str, float]:
    """Reward statistics of one step.

    Args:
        rewards: shape ``(groups, group_size)``, one row per prompt.

    Returns:
        ``reward_mean``: mean over all groups × group_size rewards;
        ``reward_std``: population standard deviation (ddof = 0) over all rewards;
        ``frac_zero_std``: fraction of groups whose rewards are all exactly equal (zero std, so zero group-relative
        advantage and no learning signal). Tested as max == min per row, which, unlike ``std == 0``, does not
        depend on floating-point rounding in the mean.

    Raises:
        ValueError: if ``rewards`` is not 2-D or is empty.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 2 or r.size == 0:
        raise ValueError(f"rewards must be a non-empty (groups, group_size) array, got shape {r.shape}")
    return {
        "reward_mean": float(r.mean()),
        "reward_std": float(r.std()),
        "frac_zero_std": float(np.mean(r.max(axis=1) == r.min(axis=1))),
    }


def rollout_stats(
    rewards: Sequence[float],
    success: Sequence[bool],
    valid: Sequence[bool],
    token_entropies: Sequence[float],
    lengths: Sequence[int],
    turns: Sequence[int] | None = None,
    grader_timeouts: Sequence[bool] = (),
) -> dict[str, float]:
    """Statistics of one pool of n drawn samples (a training step's batch, or one evaluation instance's samples).

    Args:
        rewards, success, valid, lengths: one entry per sample: its reward, whether it is correct, whether it has a
            solution key, and how many tokens the policy sampled for it.
        token_entropies: the entropy (nats) of the sampling distribution at every token the policy sampled, of all
            the samples together.
        turns: per sample, the turns of its episode (multi-turn tasks, :func:`episode_turns`); None = single-turn.
        grader_timeouts: per sample, whether the grader gave up on it (scored 0 unverified, sesa_cli/tasks/math.py).

    Returns:
        ``reward_mean`` = mean reward; ``success``, ``valid`` = shares of the n samples; ``entropy`` = mean over all
        sampled tokens of the pool (each token counts once, so long samples weigh more; 0 when there is none);
        ``response_len`` = mean sampled tokens per sample; ``turns`` (multi-turn only) = mean turns per episode;
        ``grader_timeouts`` = how many, a count (see :func:`mean_over_pools`).

    Raises:
        ValueError: if there is no sample.
    """
    if not len(rewards):
        raise ValueError("rollout statistics need at least one sample")
    out: dict[str, float] = {
        "reward_mean": float(np.mean(rewards)),
        "success": float(np.mean(success)),
        "valid": float(np.mean(valid)),
        "entropy": float(np.mean(token_entropies)) if len(token_entropies) else 0.0,
        "response_len": float(np.mean(lengths)),
    }
    if turns is not None:
        out["turns"] = float(np.mean(turns))
    out["grader_timeouts"] = sum(bool(t) for t in grader_timeouts)
    return out


COUNTS = ("grader_timeouts",)
"""Keys of :func:`rollout_stats` that are counts: summed over pools, not averaged."""


def mean_over_pools(per_pool: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-pool statistics (e.g. one dict per evaluation instance) combined: the mean over pools of every key,
    except the :data:`COUNTS`, which are summed. Keys missing from a pool are averaged over the pools that have
    them."""
    values: dict[str, list[float]] = {}
    for stats in per_pool:
        for key, value in stats.items():
            values.setdefault(key, []).append(float(value))
    return {key: float(sum(v)) if key in COUNTS else float(np.mean(v)) for key, v in values.items()}


def group_diversity(keys: Sequence[str | None], correct: Sequence[bool], group_size: int) -> dict[str, float]:
    """Per-group diversity of one step, averaged over groups.

    Args:
        keys: flat solution keys, laid out group after group (``groups * group_size`` entries); None = no key.
        correct: flat success flags, same layout.
        group_size: samples per group.

    Returns:
        ``distinct``: mean over groups of #distinct non-None keys in the group;
        ``distinct_correct``: mean over groups of #distinct non-None keys among the group's correct samples.

    Raises:
        ValueError: if the lengths differ, are zero, or are not a multiple of ``group_size``.
    """
    group_size = as_int(group_size, "group_size")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if len(keys) != len(correct):
        raise ValueError(f"keys and correct must have the same length, got {len(keys)} and {len(correct)}")
    if len(keys) == 0 or len(keys) % group_size:
        raise ValueError(f"need a positive multiple of group_size={group_size} samples, got {len(keys)}")
    n_groups = len(keys) // group_size
    distinct, distinct_correct = 0, 0
    for g in range(n_groups):
        sl = slice(g * group_size, (g + 1) * group_size)
        gk, gc = keys[sl], correct[sl]
        distinct += len({key for key in gk if key is not None})
        distinct_correct += len({key for key, ok in zip(gk, gc, strict=True) if ok and key is not None})
    return {"distinct": distinct / n_groups, "distinct_correct": distinct_correct / n_groups}


# ------------------------------------------------------------------------------------------- exact policy metrics
def policy_metrics(
    probs: npt.ArrayLike, target_mask: npt.ArrayLike, k: int, min_prob: float = 0.01
) -> dict[str, float]:
    """Exact properties of a policy on one instance, from the probability of every valid solution.

    Args:
        probs: (S,) p_s = π(s | x), the probability that one sample from the plain prompt x is solution s, for every
            valid solution s of the instance (the whole solution space; each s once). Σ p_s ≤ 1: the rest of the
            mass is on invalid or unfinished answers.
        target_mask: (S,) True where s is correct (a target).
        k: the sample count of ``coverage@k``.
        min_prob: the probability a target needs to count in ``solutions_above_1pct``.

    Returns, with V = Σ_s p_s, T = Σ_{s target} p_s and U the number of targets:

        ``valid_mass``           V, the probability that a sample is a valid solution;
        ``target_mass``          T, the exact success probability of one sample;
        ``effective_solutions``  exp(−Σ_t r_t ln r_t) with r_t = p_t / T over the targets: the effective number of
                                 correct solutions the success mass is spread over (1 = all on one target, U = spread
                                 evenly over every target); 0 when T = 0;
        ``solutions_above_1pct`` #{targets t : p_t ≥ min_prob};
        ``solution_entropy``     −Σ_s q_s ln q_s with q_s = p_s / V over the valid solutions, in nats (0 when V = 0):
                                 the exact entropy of the answer distribution given a valid answer, ln S at most;
        ``coverage@k``           (1/U) Σ_t (1 − (1 − p_t)^k), the expected fraction of the targets hit by k i.i.d.
                                 samples from x (unlike a count over drawn samples, it is not a multiple of 1/U).

    Probabilities are taken in float64; (1 − p)^k is computed as exp(k · log1p(−p)) so that small p keep their
    precision. They come from the model: a probability that is not finite (a model whose weights went NaN) makes
    every value NaN, and rounding just outside [0, 1] (a log-probability summed to +1e-9) is clipped.

    Raises:
        ValueError: if the shapes differ, a probability is outside [0, 1] beyond rounding, Σ p > 1 beyond rounding
            (a solution listed twice), there is no target, or k < 1: how the caller built the arguments.
    """
    p = np.asarray(probs, dtype=np.float64)
    target = np.asarray(target_mask, dtype=bool)
    k = as_int(k, "k")
    if p.ndim != 1 or p.shape != target.shape:
        raise ValueError(f"probs and target_mask must be 1-D of the same shape, got {p.shape} and {target.shape}")
    if not target.any():
        raise ValueError("policy metrics need at least one target solution")
    if k < 1:
        raise ValueError(f"coverage@k needs k >= 1, got k={k}")
    if not np.all(np.isfinite(p)):
        names = ("valid_mass", "target_mass", "effective_solutions", "solutions_above_1pct", "solution_entropy")
        return {**dict.fromkeys(names, math.nan), f"coverage@{k}": math.nan}
    if np.any(p < -1e-6) or np.any(p > 1 + 1e-6):
        raise ValueError("probs must be probabilities in [0, 1]")
    p = np.clip(p, 0.0, 1.0)
    if p.sum() > 1 + 1e-6:
        raise ValueError(f"probs add up to {p.sum():.6g} > 1: each solution must appear once")

    def entropy(weights: np.ndarray) -> float:
        total = weights.sum()
        if total <= 0:
            return 0.0
        q = weights[weights > 0] / total
        return float(-(q * np.log(q)).sum())

    pt = p[target]
    target_mass = float(pt.sum())
    with np.errstate(divide="ignore"):  # p_t = 1: log1p(−1) = −inf, and 1 − exp(−inf) = 1 exactly
        coverage = float(np.mean(-np.expm1(k * np.log1p(-pt))))
    return {
        "valid_mass": float(p.sum()),
        "target_mass": target_mass,
        "effective_solutions": math.exp(entropy(pt)) if target_mass > 0 else 0.0,
        "solutions_above_1pct": float((pt >= min_prob).sum()),
        "solution_entropy": entropy(p),
        f"coverage@{k}": coverage,
    }


def estimated_effective_solutions(keys: Sequence[str | None], correct: Sequence[bool]) -> float:
    """A plug-in estimate, from n i.i.d. plain-prompt samples of one instance, of the policy's effective number of
    correct solutions (``policy_metrics``' ``effective_solutions``, where the solution space cannot be enumerated):
    exp(-Σ_s f_s ln f_s) with f_s the share of the correct samples whose solution key is s; 0 with no correct sample.

    An estimate, biased low: a solution the n samples missed counts 0, and with c correct samples it is at most c
    (n = 16 cannot show more than 16). Compare it between runs of the same protocol, not with the exact value.
    """
    if len(keys) != len(correct):
        raise ValueError(f"keys ({len(keys)}) and correct ({len(correct)}) must have one entry per sample")
    counts = Counter(k for k, c in zip(keys, correct, strict=True) if c and k is not None)
    total = sum(counts.values())
    if total == 0:
        return 0.0
    shares = np.asarray(list(counts.values()), dtype=np.float64) / total
    return float(np.exp(-(shares * np.log(shares)).sum()))


def policy_estimate(keys: Sequence[Sequence[str | None]], correct: Sequence[Sequence[bool]]) -> dict[str, float]:
    """``estimate/effective_solutions`` (:func:`estimated_effective_solutions` averaged over instances) with the 95%
    percentile-bootstrap interval of that mean over the instances (sesa_cli.intervals), as ``..._low`` and
    ``..._high``; ``keys[i]``/``correct[i]``: instance i's i.i.d. samples."""
    per_instance = [estimated_effective_solutions(k, c) for k, c in zip(keys, correct, strict=True)]
    mean, low, high = mean_interval(per_instance)
    return {
        "effective_solutions": mean,
        "effective_solutions_low": low,
        "effective_solutions_high": high,
    }
