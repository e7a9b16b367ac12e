"""Evaluation and training metrics: pass@k, coverage@k, distinct@k, token entropy, reward stats, exact policy
metrics, chain health, collapse monitor.

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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "ChainHealth",
    "CollapseMonitor",
    "chain_health",
    "coverage_at_k",
    "distinct_at_k",
    "distinct_correct_at_k",
    "expected_distinct_at_k",
    "group_diversity",
    "mean_token_entropy",
    "pass_at_k",
    "pass_at_k_curve",
    "policy_metrics",
    "power_of_two_ks",
    "reward_stats",
    "sequence_pass_at_k",
]


def _as_int(value: Any, name: str) -> int:
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
    n, c, k = _as_int(n, "n"), _as_int(c, "c"), _as_int(k, "k")
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


def power_of_two_ks(n: int) -> list[int]:
    """The k values logged by default: 1, 2, 4, … ≤ n, plus n itself if it is not a power of two (prime-rl style).

    Raises:
        ValueError: if n < 1.
    """
    n = _as_int(n, "n")
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
    return {_as_int(k, "k"): pass_at_k(n, c, k) for k in ks}


def sequence_pass_at_k(correct: Sequence[bool], k: int) -> float:
    """The "pass@k of the sequence": 1.0 if any of the first ``k`` samples in draw order is correct, else 0.0.

    For sequential samplers this is the success of a sequence of k, as opposed to :func:`pass_at_k`, which averages
    over all k-subsets of the n samples drawn together (see the module docstring). For i.i.d. samples it is an
    unbiased but higher-variance estimate of the same quantity as :func:`pass_at_k`.

    Raises:
        ValueError: if k < 1 or k > len(correct).
    """
    k = _as_int(k, "k")
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
    n, k = _as_int(n, "n"), _as_int(k, "k")
    if not 1 <= k <= n:
        raise ValueError(f"distinct@k needs 1 <= k <= n, got k={k}, n={n}")
    counts = [_as_int(c, "count") for c in counts]
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
    n, k = len(keys), _as_int(k, "k")
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
    group_size = _as_int(group_size, "group_size")
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
    precision.

    Raises:
        ValueError: if the shapes differ, a probability is outside [0, 1] or not finite, Σ p > 1 beyond rounding,
            there is no target, or k < 1.
    """
    p = np.asarray(probs, dtype=np.float64)
    target = np.asarray(target_mask, dtype=bool)
    k = _as_int(k, "k")
    if p.ndim != 1 or p.shape != target.shape:
        raise ValueError(f"probs and target_mask must be 1-D of the same shape, got {p.shape} and {target.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
        raise ValueError("probs must be finite probabilities in [0, 1]")
    if p.sum() > 1 + 1e-6:
        raise ValueError(f"probs add up to {p.sum():.6g} > 1: each solution must appear once")
    if not target.any():
        raise ValueError("policy metrics need at least one target solution")
    if k < 1:
        raise ValueError(f"coverage@k needs k >= 1, got k={k}")

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


# --------------------------------------------------------------------------------------------------- chain health
@dataclass(frozen=True)
class ChainHealth:
    """What the chains of a sequential sampler looked like, per chain position (index k = the (k+1)-th item).

    An item is a stage-I sketch (two-stage sampling) or a whole solution (``stage1=solution``). These are statistics
    of what the sampler drew, not properties of the policy.
    """

    valid: list[float]
    """Share of chains whose item k is valid (a sketch the task accepts; a solution with a key)."""
    new: list[float]
    """Share of chains whose item k is valid and differs from every earlier item of its chain. Summed over the
    positions it is :attr:`distinct`."""
    cut: list[float]
    """Share of chains whose item k hit its length limit without its stop."""
    followed: list[float | None]
    """Two-stage: share of the stage-II solutions expanding item k that follow it, over those the task can judge;
    None where none was judged (or for solution chains)."""
    followed_all: float | None
    """Two-stage: share of all judged stage-II solutions that follow their sketch; None if none was judged."""
    distinct: float
    """Mean number of distinct valid items per chain."""
    chains: int
    """Number of chains."""

    def scalars(self) -> dict[str, float]:
        """``valid`` and ``cut`` over all items, ``valid_last`` at the last position, ``distinct`` per chain, and
        ``followed`` over all judged solutions (only when some were judged)."""
        out = {
            "valid": float(np.mean(self.valid)),
            "valid_last": self.valid[-1],
            "distinct": self.distinct,
            "cut": float(np.mean(self.cut)),
        }
        if self.followed_all is not None:
            out["followed"] = self.followed_all
        return out


def chain_health(
    keys: Sequence[Sequence[str | None]],
    cut: Sequence[Sequence[bool]],
    followed: Sequence[Sequence[Sequence[bool | None]]] | None = None,
) -> ChainHealth:
    """Per-position health of ``len(keys)`` chains of equal length G.

    Args:
        keys: ``keys[c][k]``, the key of item k of chain c; None = invalid.
        cut: ``cut[c][k]``, True if that item hit its length limit without its stop.
        followed: two-stage only: ``followed[c][k]``, one judgement per stage-II solution expanding item k (True =
            follows it, None = the task cannot tell).

    Raises:
        ValueError: if there are no chains, the chains differ in length, or ``cut``/``followed`` do not match
            ``keys`` in shape.
    """
    if not keys or not keys[0]:
        raise ValueError("chain health needs at least one non-empty chain")
    g = len(keys[0])
    if any(len(chain) != g for chain in keys) or len(cut) != len(keys) or any(len(c) != g for c in cut):
        raise ValueError(f"every chain needs the same {g} items in keys and cut")
    if followed is not None and (len(followed) != len(keys) or any(len(f) != g for f in followed)):
        raise ValueError(f"followed needs one list of judgements per item of each of the {len(keys)} chains")
    n = len(keys)
    valid = np.zeros(g)
    new = np.zeros(g)
    for chain in keys:
        seen: set[str] = set()
        for k, key in enumerate(chain):
            if key is not None:
                valid[k] += 1
                if key not in seen:
                    new[k] += 1
                    seen.add(key)
    cuts = np.asarray(cut, dtype=np.float64).mean(axis=0)
    per_pos: list[float | None] = [None] * g
    hits, judged = 0, 0
    if followed is not None:
        for k in range(g):
            marks = [bool(f) for chain in followed for f in chain[k] if f is not None]
            if marks:
                per_pos[k] = sum(marks) / len(marks)
                hits, judged = hits + sum(marks), judged + len(marks)
    return ChainHealth(
        valid=(valid / n).tolist(),
        new=(new / n).tolist(),
        cut=cuts.tolist(),
        followed=per_pos,
        followed_all=hits / judged if judged else None,
        distinct=float(new.sum() / n),
        chains=n,
    )


# ------------------------------------------------------------------------------------------------ collapse monitor
@dataclass
class CollapseMonitor:
    """Flags training steps where the diversity of the policy has died (issue "collapse detection").

    It reads one of two kinds of metrics rows:

    * **exact policy metrics** (``policy=True``: the task can enumerate its solutions, see :func:`policy_metrics`):
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
        if _as_int(self.window, "window") < 1:
            raise ValueError(f"CollapseMonitor.window must be >= 1, got {self.window}")

    def collapse_like(self, row: Mapping[str, Any]) -> bool | None:
        """Whether one step's metrics row looks collapsed; None if it does not measure what the monitor reads."""

        def value(key: str) -> float:
            v = row.get(key)
            return float(v) if isinstance(v, (int, float)) else math.nan

        if self.policy:
            if "policy/effective_solutions" not in row:
                return None
            return (
                value("policy/effective_solutions") <= self.max_effective_solutions
                and value("policy/solution_entropy") <= self.max_solution_entropy
            )
        return (
            value("rollout/distinct_correct") <= self.max_distinct_correct
            and value("rollout/entropy") < self.min_entropy
        )

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
