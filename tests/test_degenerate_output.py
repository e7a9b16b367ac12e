"""What a model writes is untrusted input (issue 31 case 11): every metric and chain statistic is defined for
degenerate output (no parseable item, empty chains, all-invalid groups, NaN probabilities) and says so in its value
(NaN, a count of 0), never raising. Hand-built inputs; hypothesis draws the shapes."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sesa_cli import metrics as M

KEYS = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]), st.text(max_size=3))


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[list[str | None]], list[list[bool]], list[list[list[bool | None]]] | None]:
    n = draw(st.integers(0, 5))
    g = draw(st.integers(0, 6))
    keys = [[draw(KEYS) for _ in range(g)] for _ in range(n)]
    cut = [[draw(st.booleans()) for _ in range(g)] for _ in range(n)]
    m = draw(st.integers(1, 3))
    judged = st.lists(st.one_of(st.none(), st.booleans()), min_size=m, max_size=m)
    followed = draw(st.one_of(st.none(), st.just([[draw(judged) for _ in range(g)] for _ in range(n)])))
    return keys, cut, followed


@settings(max_examples=200, deadline=None)
@given(chains())
def test_chain_health_is_defined_for_any_chains(drawn):
    keys, cut, followed = drawn
    health = M.chain_health(keys, cut, followed)
    items = len(keys) * (len(keys[0]) if keys else 0)
    scalars = health.scalars()
    if items == 0:  # nothing to measure: said by chains = 0 and NaN, not by an exception
        assert health.chains == 0
        assert health.valid == []
        assert all(math.isnan(v) for v in scalars.values())
    else:
        assert health.chains == len(keys)
        assert all(0 <= v <= 1 for v in [*health.valid, *health.new, *health.cut])
        assert 0 <= scalars["valid"] <= 1
        assert 0 <= scalars["distinct"] <= len(keys[0])


def test_chains_with_no_parseable_item_count_zero_valid_and_zero_distinct():
    health = M.chain_health([[None, None, None]] * 4, [[True, False, True]] * 4)
    assert health.chains == 4
    assert health.valid == [0.0, 0.0, 0.0]
    assert health.new == [0.0, 0.0, 0.0]
    assert health.scalars() == {"valid": 0.0, "valid_last": 0.0, "distinct": 0.0, "cut": 2 / 3}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.floats(0, 1), st.just(math.nan), st.just(math.inf)), min_size=1, max_size=8),
    st.data(),
)
def test_policy_metrics_are_nan_when_the_model_gave_no_probability(probs, data):
    target = data.draw(st.lists(st.booleans(), min_size=len(probs), max_size=len(probs)).filter(any))
    p = np.asarray(probs)
    if np.isfinite(p).all():
        p = p / max(1.0, p.sum())  # a valid policy: mass <= 1
    out = M.policy_metrics(p, target, k=4)
    assert set(out) == {"valid_mass", "target_mass", "effective_solutions", "solutions_above_1pct",
                        "solution_entropy", "coverage@4"}  # fmt: skip
    if not np.isfinite(p).all():
        assert all(math.isnan(v) for v in out.values())
    else:
        assert all(math.isfinite(v) for v in out.values())


def test_policy_metrics_clip_rounding_just_outside_a_probability():
    out = M.policy_metrics([1 + 1e-9, 0.0], [True, False], k=2)  # exp of a log-prob summed to +1e-9
    assert out["target_mass"] == 1.0
    assert out["coverage@2"] == 1.0


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 8), st.integers(1, 4), st.data())
def test_sample_metrics_of_all_invalid_groups_are_zero_not_errors(group, groups, data):
    n = group * groups
    keys = data.draw(st.lists(st.none(), min_size=n, max_size=n))
    correct = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    assert M.group_diversity(keys, correct, group) == {"distinct": 0.0, "distinct_correct": 0.0}
    for k in M.power_of_two_ks(n):
        assert M.distinct_at_k(keys, k) == 0.0
        assert M.distinct_correct_at_k(keys, correct, k) == 0.0
        assert M.coverage_at_k(keys, ["t1", "t2"], k) == 0.0
    entropies = data.draw(st.lists(st.one_of(st.floats(0, 5), st.just(math.nan)), max_size=6))
    stats = M.rollout_stats([0.0] * n, [False] * n, [False] * n, entropies, [0] * n, None, [False] * n)
    assert stats["valid"] == 0.0
    assert stats["success"] == 0.0
    assert stats["grader_timeouts"] == 0


def test_an_empty_chain_health_prints_dashes_and_writes_null():
    import json

    from rich.console import Console

    from sesa_cli.commands.eval import chain_metrics, chain_table
    from sesa_cli.runs import json_text

    health = M.chain_health([], [])
    console = Console(width=200, record=True)
    console.print(chain_table(health))
    text = console.export_text()
    assert "0 chains of 0" in text
    assert "–" in text
    assert "nan" not in text
    written = json.loads(json_text(chain_metrics(health)))
    assert written["chain/chains"] == 0
    assert written["chain/valid"] is None
    assert written["chain/valid_by_position"] == []
