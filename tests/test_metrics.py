"""Unit tests of sesa_cli.metrics: every @k metric against brute force over all k-subsets."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction
from itertools import combinations, pairwise

import numpy as np
import pytest

from sesa_cli.collapse import CollapseMonitor
from sesa_cli.metrics import (
    chain_health,
    coverage_at_k,
    distinct_at_k,
    distinct_correct_at_k,
    episode_turns,
    expected_distinct_at_k,
    group_diversity,
    mean_over_pools,
    mean_token_entropy,
    pass_at_k,
    pass_at_k_curve,
    policy_metrics,
    power_of_two_ks,
    reward_stats,
    rollout_stats,
    sequence_pass_at_k,
)


def subset_mean(n: int, k: int, value) -> Fraction:
    """Exact mean of ``value(subset)`` over all k-subsets of range(n)."""
    subsets = list(combinations(range(n), k))
    return sum((Fraction(value(s)) for s in subsets), Fraction(0)) / len(subsets)


# ------------------------------------------------------------------------------------------------------- pass@k
def test_pass_at_k_matches_brute_force_over_all_subsets():
    """Acceptance check: the estimator is the exact mean over all k-subsets, every n <= 10, c <= n, 1 <= k <= n."""
    for n in range(1, 11):
        for c in range(n + 1):
            correct = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                expected = subset_mean(n, k, lambda s, correct=correct: any(correct[i] for i in s))
                got = pass_at_k(n, c, k)
                assert abs(got - float(expected)) <= 1e-12, (n, c, k, got, expected)


@pytest.mark.parametrize(("n", "c", "k"), [(10_000, 1, 1), (10_000, 3, 7), (10_000, 5000, 2), (10_000, 9, 4000)])
def test_pass_at_k_exact_for_large_n(n, c, k):
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12, abs=1e-15)


def test_pass_at_k_closed_forms_and_edges():
    assert pass_at_k(7, 3, 1) == pytest.approx(3 / 7, abs=1e-15)
    assert pass_at_k(7, 1, 7) == 1.0
    assert pass_at_k(7, 0, 7) == 0.0
    assert pass_at_k(5, 2, 4) == 1.0  # n - c = 3 < k: every 4-subset holds a correct sample
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(1, 1, 1) == 1.0
    assert pass_at_k(np.int64(8), np.int64(2), np.int64(2)) == pytest.approx(1 - 15 / 28)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 1, 0), (5, 1, -1), (5, 1, 6), (5, -1, 2), (5, 6, 2), (0, 0, 1)])
def test_pass_at_k_rejects_invalid(n, c, k):
    with pytest.raises(ValueError, match="pass@k"):
        pass_at_k(n, c, k)


def test_pass_at_k_rejects_non_integers():
    with pytest.raises(TypeError):
        pass_at_k(5.0, 1, 1)
    with pytest.raises(TypeError):
        pass_at_k(5, True, 1)


def test_pass_at_k_large_n_is_stable_and_monotone():
    n = 5000
    for c in (0, 1, 2, 17, 250, 2500, 4999, 5000):
        values = [pass_at_k(n, c, k) for k in range(1, n + 1, 37)] + [pass_at_k(n, c, n)]
        assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values)
        assert all(a <= b for a, b in pairwise(values))
        assert values[-1] == (1.0 if c else 0.0)
    assert pass_at_k(n, 1, 1) == pytest.approx(1 / n, rel=1e-12)


def test_power_of_two_ks_and_curve():
    assert power_of_two_ks(1) == [1]
    assert power_of_two_ks(8) == [1, 2, 4, 8]
    assert power_of_two_ks(10) == [1, 2, 4, 8, 10]
    with pytest.raises(ValueError, match="n >= 1"):
        power_of_two_ks(0)
    curve = pass_at_k_curve(10, 2)
    assert list(curve) == [1, 2, 4, 8, 10]
    assert curve[1] == pytest.approx(0.2)
    assert curve[10] == 1.0
    assert pass_at_k_curve(10, 2, ks=[3]) == {3: pass_at_k(10, 2, 3)}
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k_curve(4, 1, ks=[1, 8])


def test_sequence_pass_at_k_uses_draw_order():
    correct = [False, False, True, False]
    assert [sequence_pass_at_k(correct, k) for k in range(1, 5)] == [0.0, 0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="sequence"):
        sequence_pass_at_k(correct, 5)


# ----------------------------------------------------------------------------------------- distinct and coverage
KEY_LISTS = [
    ["a", "a", "b", None, "c", "a", None, "d"],
    ["x", "x", "x", "x", "x"],
    [None, None, "p", "q", "p", "r", "q"],
    ["a"],
    [None, None, None],
]


@pytest.mark.parametrize("keys", KEY_LISTS)
def test_distinct_at_k_matches_brute_force(keys):
    n = len(keys)
    for k in range(1, n + 1):
        expected = subset_mean(n, k, lambda s, keys=keys: len({keys[i] for i in s} - {None}))
        assert distinct_at_k(keys, k) == pytest.approx(float(expected), abs=1e-12)
    assert distinct_at_k(keys, n) == len(set(keys) - {None})


def test_expected_distinct_at_k_matches_brute_force():
    counts, n = [3, 1, 2, 2, 1], 11  # two samples carry no key
    keys = [j for j, c in enumerate(counts) for _ in range(c)] + [None] * (n - sum(counts))
    for k in range(1, n + 1):
        expected = subset_mean(n, k, lambda s: len({keys[i] for i in s} - {None}))
        assert expected_distinct_at_k(counts, n, k) == pytest.approx(float(expected), abs=1e-12)
    assert expected_distinct_at_k(counts, n, 1) == pytest.approx(sum(counts) / n)
    assert expected_distinct_at_k([], 3, 2) == 0.0
    assert expected_distinct_at_k([0, 2], 3, 2) == pytest.approx(pass_at_k(3, 2, 2))


@pytest.mark.parametrize(("counts", "n", "k"), [([2, 2], 3, 1), ([-1], 3, 1), ([1], 3, 0), ([1], 3, 4), ([], 0, 1)])
def test_expected_distinct_at_k_rejects_invalid(counts, n, k):
    with pytest.raises(ValueError, match=r"distinct|count"):
        expected_distinct_at_k(counts, n, k)


@pytest.mark.parametrize(
    ("keys", "targets"),
    [
        (["a", "a", "b", None, "z", "c", None, "a"], {"a", "b", "c", "d"}),  # "z" is not a target, "d" never hit
        (["p", "q", "p", "p"], ["p", "q", "q"]),  # duplicate targets count once
        ([None, "x", None], {"x"}),
    ],
)
def test_coverage_at_k_matches_brute_force(keys, targets):
    n, target_set = len(keys), set(targets)
    for k in range(1, n + 1):
        expected = subset_mean(n, k, lambda s, keys=keys: Fraction(len({keys[i] for i in s} & target_set)))
        expected /= len(target_set)
        assert coverage_at_k(keys, targets, k) == pytest.approx(float(expected), abs=1e-12)


def test_coverage_at_k_edges():
    assert coverage_at_k(["a", "b"], {"a", "b"}, 2) == 1.0
    assert coverage_at_k([None, "z"], {"a"}, 2) == 0.0
    with pytest.raises(ValueError, match="target"):
        coverage_at_k(["a"], set(), 1)
    with pytest.raises(ValueError, match="k <= n"):
        coverage_at_k(["a"], {"a"}, 2)


@pytest.mark.parametrize(
    ("keys", "correct"),
    [
        (["a", "a", "b", None, "c", "b", "d"], [True, False, True, True, False, True, True]),
        (["a", "b", "c"], [False, False, False]),
        (["x", None, "x", "y", "y", "z"], [True, True, True, False, True, True]),
    ],
)
def test_distinct_correct_at_k_matches_brute_force(keys, correct):
    n = len(keys)
    for k in range(1, n + 1):
        expected = subset_mean(
            n, k, lambda s, keys=keys, correct=correct: len({keys[i] for i in s if correct[i]} - {None})
        )
        assert distinct_correct_at_k(keys, correct, k) == pytest.approx(float(expected), abs=1e-12)


def test_distinct_correct_at_k_rejects_length_mismatch():
    with pytest.raises(ValueError, match="same length"):
        distinct_correct_at_k(["a", "b"], [True], 1)


# ------------------------------------------------------------------------------------------- per-step statistics
def test_mean_token_entropy_with_ragged_mask():
    entropies = [[0.5, 1.0, 2.0, 9.0], [1.5, float("nan"), float("nan"), float("inf")]]  # padding may be NaN/inf
    mask = [[1, 1, 1, 0], [1, 0, 0, 0]]
    assert mean_token_entropy(entropies, mask) == pytest.approx((0.5 + 1.0 + 2.0 + 1.5) / 4)
    assert mean_token_entropy(np.asarray(entropies), np.asarray(mask, dtype=bool)) == pytest.approx(1.25)
    assert mean_token_entropy([[1.0, 2.0]], [[0, 0]]) == 0.0
    assert mean_token_entropy(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0
    with pytest.raises(ValueError, match="same shape"):
        mean_token_entropy([[1.0, 2.0]], [[1, 1, 1]])


def test_reward_stats_hand_worked():
    rewards = [[1.0, 1.0, 1.0], [0.0, 1.0, 0.5], [0.1, 0.1, 0.1], [0.0, 0.0, 0.0]]
    stats = reward_stats(rewards)
    flat = np.asarray(rewards).ravel()
    assert stats["reward_mean"] == pytest.approx(4.8 / 12)
    assert stats["reward_std"] == pytest.approx(math.sqrt(np.mean((flat - 0.4) ** 2)))
    assert stats["frac_zero_std"] == 0.75  # rows 0, 2 and 3 are constant; 0.1 must not fail on mean round-off
    assert reward_stats([[0.0, 1.0]]) == {"reward_mean": 0.5, "reward_std": 0.5, "frac_zero_std": 0.0}
    for bad in ([1.0, 2.0], [[]]):
        with pytest.raises(ValueError, match="groups, group_size"):
            reward_stats(bad)


def test_rollout_stats_hand_worked():
    # three samples: the second invalid, the third correct and cut off by the grader
    stats = rollout_stats(
        rewards=[1.0, 0.0, 0.5],
        success=[True, False, False],
        valid=[True, False, True],
        token_entropies=[0.5, 1.0, 2.0, 0.5],  # 2 + 1 + 1 sampled tokens: each token counts once
        lengths=[2, 1, 1],
        turns=[1, 3, 2],
        grader_timeouts=[False, False, True],
    )
    expected = {"reward_mean": 0.5, "success": 1 / 3, "valid": 2 / 3, "entropy": 1.0, "response_len": 4 / 3}
    assert stats == {**expected, "turns": 2.0, "grader_timeouts": 1}
    single = rollout_stats([0.0], [False], [False], [], [0])
    assert single == {
        **dict.fromkeys(("reward_mean", "success", "valid", "entropy", "response_len"), 0.0),
        "grader_timeouts": 0,
    }
    with pytest.raises(ValueError, match="at least one sample"):
        rollout_stats([], [], [], [], [])


def test_pools_are_averaged_and_counts_summed():
    pools = [{"success": 1.0, "grader_timeouts": 2, "pass@2": 1.0}, {"success": 0.5, "grader_timeouts": 1}]
    assert mean_over_pools(pools) == {"success": 0.75, "grader_timeouts": 3.0, "pass@2": 1.0}


def test_episode_turns_count_the_runs_of_sampled_tokens():
    # response, feedback, response, feedback, response (the last turn ended the episode: no feedback after it)
    assert episode_turns([True, True, False, True, False, False, True]) == 3
    assert episode_turns([True]) == 1
    assert episode_turns(None) == 1  # single turn: every token sampled
    assert episode_turns([]) == 0


def test_group_diversity_hand_worked():
    keys = ["a", "a", "b", None, "x", "y", "z", "x", None, None, None, None]
    correct = [True, True, False, True, True, False, True, True, True, False, True, False]
    # group 0: keys {a, b} -> 2, correct {a} -> 1 (None never counts)
    # group 1: keys {x, y, z} -> 3, correct {x, z} -> 2
    # group 2: no keys -> 0, 0
    assert group_diversity(keys, correct, 4) == {"distinct": 5 / 3, "distinct_correct": 1.0}
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_diversity(keys[:-1], correct[:-1], 4)
    with pytest.raises(ValueError, match="same length"):
        group_diversity(keys, correct[:-1], 4)
    with pytest.raises(ValueError, match="group_size"):
        group_diversity(keys, correct, 0)


# ------------------------------------------------------------------------------------------- exact policy metrics
def test_policy_metrics_by_hand():
    # 5 valid solutions; targets are the first three. V = 0.9, T = 0.5 + 0.2 + 0.1 = 0.8.
    probs = [0.5, 0.2, 0.1, 0.05, 0.05]
    target = [True, True, True, False, False]
    m = policy_metrics(probs, target, k=2)
    r = np.array([0.5, 0.2, 0.1]) / 0.8
    q = np.array(probs) / 0.9
    assert m["valid_mass"] == pytest.approx(0.9)
    assert m["target_mass"] == pytest.approx(0.8)
    assert m["effective_solutions"] == pytest.approx(math.exp(-(r * np.log(r)).sum()))
    assert m["solutions_above_1pct"] == 3.0
    assert m["solution_entropy"] == pytest.approx(-(q * np.log(q)).sum())
    # coverage@2: mean over the 3 targets of 1 - (1 - p)^2 = (0.75 + 0.36 + 0.19) / 3
    assert m["coverage@2"] == pytest.approx((0.75 + 0.36 + 0.19) / 3)
    assert set(m) == {
        "valid_mass",
        "target_mass",
        "effective_solutions",
        "solutions_above_1pct",
        "solution_entropy",
        "coverage@2",
    }


def test_policy_metrics_extremes():
    # All mass on one target: one effective solution, zero entropy, coverage of 1 target in U = 4.
    one = policy_metrics([0.0, 1.0, 0.0, 0.0, 0.0], [True, True, True, True, False], k=64)
    assert one["effective_solutions"] == pytest.approx(1.0)
    assert one["solution_entropy"] == 0.0
    assert one["coverage@64"] == pytest.approx(0.25)
    assert one["solutions_above_1pct"] == 1.0
    # Mass spread evenly over U targets: U effective solutions, entropy ln S over the S valid solutions.
    even = policy_metrics([0.25] * 4, [True] * 4, k=1)
    assert even["effective_solutions"] == pytest.approx(4.0)
    assert even["solution_entropy"] == pytest.approx(math.log(4))
    assert even["coverage@1"] == pytest.approx(0.25)  # k = 1: coverage is the mean target probability
    # No mass on targets: no effective solution, nothing covered; a threshold is inclusive.
    none = policy_metrics([0.0, 0.0, 0.5], [True, True, False], k=8)
    assert none["effective_solutions"] == 0.0
    assert none["target_mass"] == 0.0
    assert none["coverage@8"] == 0.0
    assert policy_metrics([0.01, 0.0099], [True, True], k=1)["solutions_above_1pct"] == 1.0


def test_policy_metrics_coverage_keeps_precision_for_tiny_probabilities():
    # 1 - (1 - 1e-12)^64 = 6.4e-11 to 10 digits; the naive power loses it to rounding.
    m = policy_metrics([1e-12, 0.5], [True, False], k=64)
    assert m["coverage@64"] == pytest.approx(64e-12, rel=1e-9)


@pytest.mark.parametrize(
    ("probs", "target", "k", "match"),
    [
        ([0.5, 0.5], [False, False], 4, "target"),
        ([0.6, 0.6], [True, False], 4, "add up"),
        ([-0.1, 0.5], [True, False], 4, "probabilities"),
        ([0.5], [True, False], 4, "shape"),
        ([0.5, 0.1], [True, False], 0, "k >= 1"),
    ],
)
def test_policy_metrics_rejects_bad_input(probs, target, k, match):
    with pytest.raises(ValueError, match=match):
        policy_metrics(probs, target, k)


# ----------------------------------------------------------------------------------------------- collapse monitor
def rollout_row(distinct_correct: float, entropy: float) -> dict[str, float]:
    return {"rollout/distinct_correct": distinct_correct, "rollout/entropy": entropy}


def run_stream(monitor: CollapseMonitor, stream) -> list[bool]:
    return [monitor.update(step, rollout_row(dc, h)) for step, (dc, h) in enumerate(stream)]


def test_collapse_monitor_flags_collapsed_stream_at_first_full_window():
    monitor = CollapseMonitor(window=5)
    healthy, collapsed = (3.0, 0.8), (1.0, 0.01)
    flags = run_stream(monitor, [healthy] * 3 + [collapsed] * 8)
    # collapse-like from step 3, so the 5th consecutive one is step 7
    assert flags == [False] * 7 + [True] * 4
    assert monitor.first_flag_step == 7
    assert monitor.collapsed
    monitor.update(11, rollout_row(*healthy))
    assert not monitor.collapsed
    assert monitor.first_flag_step == 7  # the first flag is kept after recovery


def test_chain_health_of_hand_built_chains():
    keys = [["a", "b", "a", None], ["a", None, "c", "d"]]
    cut = [[False, False, False, True], [False, True, False, False]]
    followed = [[[True], [False], [None], [False]], [[True], [False], [True], [None]]]
    h = chain_health(keys, cut, followed)
    assert h.chains == 2
    assert h.sketches  # judged against their solutions: the items are sketches
    assert h.valid == [1.0, 0.5, 1.0, 0.5]
    assert h.new == [1.0, 0.5, 0.5, 0.5]  # chain 1 repeats "a" at position 3
    assert h.distinct == sum(h.new) == 2.5  # {a, b} and {a, c, d}
    assert h.cut == [0.0, 0.5, 0.0, 0.5]
    assert h.followed == [1.0, 0.0, 1.0, 0.0]  # None judgements are left out
    assert h.followed_all == pytest.approx(3 / 6)
    assert h.scalars() == {"valid": 0.75, "valid_last": 0.5, "distinct": 2.5, "cut": 0.25, "followed": 0.5}


def test_chain_health_without_judgements_has_no_followed_share():
    h = chain_health([["x", "x"]], [[False, False]])
    assert not h.sketches
    assert h.new == [1.0, 0.0]
    assert h.followed == [None, None]
    assert "followed" not in h.scalars()
    assert "followed" not in chain_health([["x"]], [[False]], [[[None]]]).scalars()


RAGGED = [
    ([["a"], ["a", "b"]], [[False], [False, False]], None, "same"),
    ([["a"]], [[False, True]], None, "same"),
    ([["a"]], [[False]], [[[True]], [[True]]], "judgements"),
]


@pytest.mark.parametrize(("keys", "cut", "followed", "message"), RAGGED)
def test_chain_health_rejects_ragged_input(keys, cut, followed, message):
    with pytest.raises(ValueError, match=message):
        chain_health(keys, cut, followed)


def test_collapse_monitor_needs_consecutive_steps():
    monitor = CollapseMonitor(window=3)
    flags = run_stream(monitor, [(1.0, 0.01)] * 2 + [(2.0, 0.01)] + [(0.5, 0.0)] * 2)
    assert not any(flags)
    assert monitor.first_flag_step is None


@pytest.mark.parametrize(
    "point",
    [
        (3.0, 0.8),  # healthy
        (1.0, 0.8),  # one solution per group but still exploring
        (0.0, 0.9),  # nothing correct, high entropy
        (3.0, 0.01),  # near-deterministic but several distinct correct solutions
        (1.0, 0.05),  # entropy threshold is strict
        (1.5, 0.01),
        (float("nan"), float("nan")),
    ],
)
def test_collapse_monitor_never_flags_when_a_condition_fails(point):
    monitor = CollapseMonitor()
    assert not any(run_stream(monitor, [point] * 50))
    assert monitor.first_flag_step is None


def policy_row(effective_solutions: float, solution_entropy: float) -> dict[str, float]:
    return {"policy/effective_solutions": effective_solutions, "policy/solution_entropy": solution_entropy}


def test_collapse_monitor_reads_policy_metrics_where_the_task_has_them():
    monitor = CollapseMonitor(window=2, max_effective_solutions=1.5, max_solution_entropy=0.5, policy=True)
    # The rollout statistics look healthy (a sequential chain drawing many targets), the exact policy does not:
    # the policy metrics decide.
    chain = rollout_row(4.0, 0.9)
    assert not monitor.update(1, {**chain, **policy_row(3.0, 0.2)})
    assert not monitor.update(2, {**chain, **policy_row(1.5, 0.5)})  # both at their thresholds: collapse-like
    assert monitor.update(3, {**chain, **policy_row(1.2, 0.1)})
    assert monitor.first_flag_step == 3
    # ...and the other way round: collapsed-looking rollouts, a diverse policy.
    other = CollapseMonitor(window=1, policy=True)
    collapsed_chain = rollout_row(1.0, 0.0)
    assert not other.update(1, {**collapsed_chain, **policy_row(6.0, 0.1)})
    assert not other.update(2, {**collapsed_chain, **policy_row(1.0, 2.0)})  # one target found, still exploring
    assert not other.update(3, {**collapsed_chain, **policy_row(float("nan"), 0.1)})
    # A row without the policy metrics is not a measurement: the rollout statistics are never read instead.
    assert not other.update(4, collapsed_chain)
    assert CollapseMonitor(window=1).update(4, collapsed_chain)  # a monitor without policy metrics reads them


def test_collapse_monitor_counts_steps_between_sparse_measurements():
    # Policy metrics every 5 steps: a collapse-like measurement at 30 starts the run (streak 1, nothing known of
    # 26-29); at 35 it spans steps 30-35 (6 >= window 5) and is flagged. Unmeasured steps change nothing.
    monitor = CollapseMonitor(window=5, policy=True)
    healthy, collapsed = policy_row(4.0, 3.0), policy_row(1.0, 0.1)
    assert not monitor.update(25, healthy)
    assert not monitor.update(30, collapsed)
    assert monitor.streak == 1
    assert not any(monitor.update(step, rollout_row(1.0, 0.0)) for step in range(31, 35))
    assert monitor.streak == 1
    assert monitor.update(35, collapsed)
    assert monitor.streak == 6
    assert monitor.first_flag_step == 35
    assert monitor.update(36, rollout_row(3.0, 0.9))  # still collapsed: no new measurement
    assert not monitor.update(40, healthy)


def test_collapse_monitor_state_round_trips_through_json():
    monitor = CollapseMonitor(window=4)
    run_stream(monitor, [(1.0, 0.01)] * 3)
    state = json.loads(json.dumps(monitor.state_dict()))
    resumed = CollapseMonitor(window=4)
    resumed.load_state_dict(state)
    assert resumed.update(3, rollout_row(1.0, 0.01))  # the streak survived the checkpoint
    assert resumed.first_flag_step == 3

    state = json.loads(json.dumps(resumed.state_dict()))
    again = CollapseMonitor(window=4)
    again.load_state_dict(state)
    assert again.state_dict() == {"streak": 4, "last_step": 3, "first_flag_step": 3}
    old = CollapseMonitor(window=4)  # a checkpoint written before last_step existed
    old.load_state_dict({"streak": 3, "first_flag_step": None})
    assert old.update(9, rollout_row(1.0, 0.01))


def test_collapse_monitor_rejects_bad_window():
    with pytest.raises(ValueError, match="window"):
        CollapseMonitor(window=0)


# ---------------------------------------------------------------------------------------------------- import cost
def test_metrics_import_does_not_pull_torch():
    code = "import sys, sesa_cli.metrics; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_estimated_effective_solutions_are_the_plug_in_exp_entropy_of_the_correct_keys():
    from sesa_cli.metrics import estimated_effective_solutions

    assert estimated_effective_solutions(["a", "b", "a", "b"], [True] * 4) == pytest.approx(2.0)
    assert estimated_effective_solutions(["a", "a", "b", "c"], [True, True, False, False]) == pytest.approx(1.0)
    assert estimated_effective_solutions(["a", "b"], [False, False]) == 0.0
    assert estimated_effective_solutions([None, "a"], [True, True]) == pytest.approx(1.0)  # no key: not a solution
    # at most the number of correct samples, whatever the policy's true spread: an estimate biased low
    assert estimated_effective_solutions([str(i) for i in range(16)], [True] * 16) == pytest.approx(16.0)
    with pytest.raises(ValueError, match="one entry per sample"):
        estimated_effective_solutions(["a"], [True, False])


def test_the_policy_estimate_is_the_mean_over_instances_with_its_bootstrap_interval():
    from sesa_cli.metrics import policy_estimate

    keys = [["a", "b"], ["a", "a"], ["a", "b"], ["c", "c"]]
    est = policy_estimate(keys, [[True, True]] * 4)
    assert est["effective_solutions"] == pytest.approx(1.5)
    assert 1.0 <= est["effective_solutions_low"] <= 1.5 <= est["effective_solutions_high"] <= 2.0
    same = policy_estimate([["a", "b"]] * 3, [[True, True]] * 3)
    assert same["effective_solutions_low"] == same["effective_solutions_high"] == pytest.approx(2.0)
