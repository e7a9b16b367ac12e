"""Intervals over seeds (or instances): the percentile bootstrap of a mean, and of a difference of two means.

A group's value of a metric is the mean over its seeds; its interval is the 95% **percentile bootstrap** of that
mean: resample the seeds with replacement :data:`RESAMPLES` times, take the 2.5th and 97.5th percentiles of the
resampled means. The generator is local and seeded (:data:`BOOTSTRAP_SEED`), fresh for every call, so a report is
the same every time it is built and no global random state is read or moved. With few seeds the percentile
bootstrap is too narrow (with 2 seeds it is their range, with 5 it misses the true mean more often than 5% of the
time): the report says so next to every interval.

The difference of two groups (``B - A``) is bootstrapped the same way: **paired by seed** when both groups have a
value at the same seeds (the seed fixes the task's targets and the base model, and a revival's checkpoint, so the
seed-to-seed spread cancels), else **unpaired** (each group resampled on its own).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

RESAMPLES = 10_000
"""Bootstrap resamples for tables (curves use :data:`CURVE_RESAMPLES`)."""
CURVE_RESAMPLES = 2_000
"""Bootstrap resamples per step of a curve's band (a band needs less precision than a table cell)."""
BOOTSTRAP_SEED = 0
"""Seed of the local generator (``numpy.random.default_rng``) of every bootstrap."""
LEVEL = 0.95

METHOD = (
    f"{LEVEL:.0%} intervals: percentile bootstrap of the mean over seeds ({RESAMPLES:,} resamples, numpy generator "
    f"seeded {BOOTSTRAP_SEED}); differences are paired by seed when both groups ran the same seeds. With few seeds "
    "the bootstrap interval is narrower than the true uncertainty (with 2 seeds it is their range)."
)


def bootstrap_interval(
    values: np.ndarray, resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds and its bootstrap interval, per column of ``values`` (seeds, columns); NaN = no value there.

    Returns (mean, low, high), each (columns,). Every column is resampled over its own non-NaN seeds; columns that
    share the same seeds share the resampled seed indices (one draw per pattern of missing values, cached per number
    of seeds), so a column's interval does not depend on the other columns. Columns with fewer than two values get
    NaN bounds (and a NaN mean when empty).
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"values must be (seeds, columns), got shape {values.shape}")
    columns = values.shape[1]
    mean, low, high = np.full(columns, np.nan), np.full(columns, np.nan), np.full(columns, np.nan)
    present = ~np.isnan(values)
    patterns: dict[bytes, list[int]] = {}
    for column in range(columns):
        patterns.setdefault(present[:, column].tobytes(), []).append(column)
    tail = 100 * (1 - LEVEL) / 2
    for cols in patterns.values():
        rows = np.flatnonzero(present[:, cols[0]])
        if len(rows) == 0:
            continue
        block = values[np.ix_(rows, np.asarray(cols))]  # (n, c)
        mean[cols] = block.mean(axis=0)
        if len(rows) < 2:
            continue
        means = _resample_counts(len(rows), resamples, seed) @ block / len(rows)  # (resamples, c)
        low[cols], high[cols] = np.percentile(means, [tail, 100 - tail], axis=0)
    return mean, low, high


@functools.lru_cache(maxsize=64)
def _resample_counts(n: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, n): how often each of n seeds is drawn in each resample of size n (cached: a report asks for the
    same few n many times, and the draw depends on nothing else)."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    flat = (np.arange(resamples)[:, None] * n + draws).ravel()
    counts = np.bincount(flat, minlength=resamples * n).reshape(resamples, n).astype(np.float64)
    counts.flags.writeable = False
    return counts


def mean_interval(values: Sequence[float], resamples: int = RESAMPLES) -> tuple[float, float, float]:
    """(mean, low, high) of one group's per-seed values; NaN bounds for fewer than two seeds."""
    column = np.asarray([v for v in values if not is_missing(v)], dtype=np.float64)[:, None]
    mean, low, high = bootstrap_interval(column, resamples)
    return float(mean[0]), float(low[0]), float(high[0])


def difference_interval(
    a: dict[str, float], b: dict[str, float], resamples: int = RESAMPLES
) -> tuple[float, float, float, bool]:
    """(mean(b) - mean(a), low, high, paired) for per-seed values ``{seed: value}`` of two groups.

    Paired (bootstrap of the per-seed differences) when both have values at the same seeds; else unpaired (each group
    resampled on its own, the difference of the resampled means). NaN bounds when either group has fewer than two
    seeds (two runs of one seed are still paired: the difference of the same seed, without an interval;
    a report over two same-seed runs once headed its difference table "unpaired"); NaN throughout when either has none.
    """
    a = {s: v for s, v in a.items() if not is_missing(v)}
    b = {s: v for s, v in b.items() if not is_missing(v)}
    if not a or not b:
        return math.nan, math.nan, math.nan, False
    diff = float(np.mean(list(b.values())) - np.mean(list(a.values())))
    if set(a) == set(b) and len(a) >= 2:
        per_seed = np.asarray([b[s] - a[s] for s in sorted(a)])[:, None]
        _, low, high = bootstrap_interval(per_seed, resamples)
        return diff, float(low[0]), float(high[0]), True
    if len(a) < 2 or len(b) < 2:
        return diff, math.nan, math.nan, set(a) == set(b)
    # Different seeds: two independent resamplings (different generator seeds, or they would move in lockstep).
    va, vb = np.asarray(list(a.values())), np.asarray(list(b.values()))
    means_a = _resample_counts(len(va), resamples, BOOTSTRAP_SEED) @ va / len(va)
    means_b = _resample_counts(len(vb), resamples, BOOTSTRAP_SEED + 1) @ vb / len(vb)
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(means_b - means_a, [tail, 100 - tail])
    return diff, float(low), float(high), False


def is_missing(value: object) -> bool:
    """None or NaN: no value."""
    return value is None or (isinstance(value, float) and math.isnan(value))


GAP_LIMIT = 3.0
"""``policy/sampled_gap`` above this many standard deviations: the sampled success and the exact policy disagree
(the report marks the run; about 0.3% of agreeing evaluations pass it by chance)."""


PRUNED_LIMIT = 0.05
"""The most ``policy/pruned_mass`` (the probability the exact episode walk cut unexpanded, averaged over the walked
instances) at which an exact figure is read as the policy's value. Above it the walk saw too little of the policy:
every display shows the exact mass figures as the interval they lie in, ``[value, value + pruned]``
(:data:`BOUNDED`), marks every other ``policy/*`` figure with :data:`EXACT_MARK` (it describes the walked part of
the policy only), fails the sampled-gap check (:func:`gap_fails`: an interval that wide tests nothing) and a report
bases no sentence on them (sesa_cli.report.marks). The default walk keeps the default recipes under it at their
last step (``eval.walk_branches``; docs/metrics.md, "Exact figures and pruned mass")."""
PRUNED = "policy/pruned_mass"
BOUNDED = ("policy/target_mass", "policy/valid_mass")
"""The exact figures that are probabilities of the walked episodes: the true value lies in [value, value + pruned]."""
EXACT_MARK = "†"
"""What an exact figure over :data:`PRUNED_LIMIT` carries in every table that shows it."""
UNCHECKED = ("policy/pruned_mass", "policy/sampled_gap")
"""The ``policy/*`` keys that say how far the others can be trusted: never marked themselves."""


def over_pruned(row: Mapping[str, Any]) -> float | None:
    """``row``'s ``policy/pruned_mass`` where it is above :data:`PRUNED_LIMIT` (its exact figures then cover too
    little of the policy), else None."""
    pruned = row.get(PRUNED)
    return float(pruned) if isinstance(pruned, (int, float)) and pruned > PRUNED_LIMIT else None


def exact_text(key: str, value: float, row: Mapping[str, Any], shown: Callable[[float], str]) -> str:
    """``value`` of metric ``key`` as a table shows it, ``shown`` formatting a number: as it is, unless ``row`` (the
    evaluation ``value`` is from) walked too little of the policy (:func:`over_pruned`): then a mass figure is the
    interval it lies in (:data:`BOUNDED`), the sampled gap says its check fails, and any other ``policy/*`` figure
    carries :data:`EXACT_MARK`."""
    pruned = over_pruned(row)
    if pruned is None or not key.startswith("policy/") or key == PRUNED:
        return shown(value)
    if key in BOUNDED:
        return f"[{shown(value)}, {shown(min(1.0, value + pruned))}]"
    if key == "policy/sampled_gap":
        return f"{shown(value)} (fails: untestable)"
    return f"{shown(value)} {EXACT_MARK}"


def pruned_note(pruned: float) -> str:
    """The line under a table whose exact figures walked too little of the policy (:func:`exact_text`)."""
    return (
        f"{EXACT_MARK} the exact walk cut {pruned:.3g} of the policy's mass (more than {PRUNED_LIMIT:g}): the mass "
        "figures are shown as the interval they lie in, the other policy/* figures describe the walked part only, "
        'and the sampled-gap check cannot pass (docs/metrics.md, "Exact figures and pruned mass")'
    )


def gap_fails(gap: float, pruned: float) -> bool:
    """The sampled-gap check (``policy/sampled_gap``, ``policy/pruned_mass``): it fails where the sampled success
    lies more than :data:`GAP_LIMIT` standard deviations from the exact interval, and where the interval is too wide
    to test (pruned mass above :data:`PRUNED_LIMIT`): a pass there would say nothing."""
    return gap > GAP_LIMIT or pruned > PRUNED_LIMIT


def sampled_gap(success: Sequence[Sequence[bool]], target_mass: Sequence[float], pruned: Sequence[float]) -> float:
    """How far the sampled success on the instances the exact metrics cover lies from their exact success
    probability, in standard deviations of the sampled share (``policy/sampled_gap``; 0 when it agrees exactly).

    Args:
        success: per instance i, its n_i i.i.d. plain-prompt samples' success (the evaluation's draws).
        target_mass: per instance, T_i, the exact probability of success (``policy/target_mass`` before the mean).
        pruned: per instance, P_i, the mass the exact walk cut unexpanded (0 for a fixed solution list): the true
            success probability lies in [T_i, T_i + P_i].

    Returns d / sd, where d is the distance of the sampled share S = (1/I) Σ_i mean_j success_ij from the interval
    [(1/I) Σ T_i, (1/I) Σ (T_i + P_i)] and sd = sqrt(Σ_i q_i (1 − q_i) / n_i) / I the standard deviation S would
    have were the samples drawn from the exact policy, q_i the point of [T_i, T_i + P_i] nearest 1/2, kept within
    [1/(2 n_i), 1 − 1/(2 n_i)] (so that one odd sample of a policy at 0 or 1 is 1.4 sd off, not infinitely many).
    Read against :data:`GAP_LIMIT` (the normal approximation of the binomial mean). NaN without samples.
    """
    if not success or len(success) != len(target_mass) or len(success) != len(pruned):
        return math.nan
    n = np.array([len(s) for s in success], dtype=np.float64)
    if (n == 0).any():
        return math.nan
    low = np.asarray(target_mass, dtype=np.float64)
    high = low + np.asarray(pruned, dtype=np.float64)
    shares = np.array([np.mean(s) for s in success], dtype=np.float64)
    q = np.clip(np.clip(0.5, low, high), 0.5 / n, 1 - 0.5 / n)
    sd = math.sqrt(float(np.sum(q * (1 - q) / n))) / len(n)
    sampled = float(shares.mean())
    distance = max(0.0, float(low.mean()) - sampled, sampled - float(high.mean()))
    return distance / sd
