"""Evaluation and training metrics: pass@k, coverage@k, distinct@k, token entropy, reward stats, chain health,
collapse monitor.

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

Not done here on purpose: max-over-k or bootstrap-with-replacement estimates (verl's ``best@k`` under-reports, verl
PR #7240), or pass@k from a single greedy sample.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Collection, Sequence
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

    A step is *collapse-like* when both hold:

    * ``distinct_correct <= max_distinct_correct``: the mean number of distinct correct solutions per group is at
      most 1.25 by default, i.e. groups find one solution, however many samples they draw;
    * ``entropy < min_entropy``: the mean token entropy of the sampling distribution is below 0.05 nats by default,
      i.e. sampling is near-deterministic (for comparison, a fair choice between two tokens is ln 2 ≈ 0.69 nats).

    Either alone is not collapse: one correct solution with high entropy is a hard task still being explored, and low
    entropy with several distinct correct solutions per group is a confident policy that still covers the solution
    set. The monitor reports collapse once ``window`` consecutive updates were collapse-like, so a single noisy step
    does not trigger it. NaN inputs count as not collapse-like.

    Usage: call :meth:`update` once per logged step; the trainer marks the checkpoint when it returns True.
    """

    window: int = 5
    """Consecutive collapse-like updates needed before flagging (>= 1)."""
    max_distinct_correct: float = 1.25
    """Collapse-like if the mean distinct-correct keys per group is at most this. 1.25 rather than 1.0: measured on
    the path task (8 groups of 8), collapsed parallel GRPO runs log 1.0 or 1.125 (one group in eight stumbles on a
    second target), healthy early training 1.5-2.4; a bound of exactly 1.0 missed one of three collapsed seeds."""
    min_entropy: float = 0.05
    """Collapse-like if the mean token entropy (nats) is strictly below this (near-deterministic sampling)."""
    streak: int = field(default=0, init=False)
    """Current run of consecutive collapse-like updates."""
    first_flag_step: int | None = field(default=None, init=False)
    """The first step at which :meth:`update` returned True, or None if it never has."""

    def __post_init__(self) -> None:
        if _as_int(self.window, "window") < 1:
            raise ValueError(f"CollapseMonitor.window must be >= 1, got {self.window}")

    def update(self, step: int, distinct_correct: float, entropy: float) -> bool:
        """Record one step's mean distinct-correct keys per group and mean token entropy.

        Returns True (collapsed) if this and the previous ``window − 1`` updates were all collapse-like.
        """
        collapse_like = distinct_correct <= self.max_distinct_correct and entropy < self.min_entropy
        self.streak = self.streak + 1 if collapse_like else 0
        collapsed = self.streak >= self.window
        if collapsed and self.first_flag_step is None:
            self.first_flag_step = int(step)
        return collapsed

    @property
    def collapsed(self) -> bool:
        """Whether the last update was flagged."""
        return self.streak >= self.window

    def state_dict(self) -> dict[str, int | None]:
        """JSON-serialisable state for checkpoints (the thresholds come from the config, not the checkpoint)."""
        return {"streak": self.streak, "first_flag_step": self.first_flag_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the state saved by :meth:`state_dict`."""
        self.streak = int(state["streak"])
        first = state.get("first_flag_step")
        self.first_flag_step = None if first is None else int(first)
