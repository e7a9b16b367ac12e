"""Batch filters (``sampler.filters``): the registry, each filter's rule on hand-built groups, their settings."""

from __future__ import annotations

import pytest

from sesa_cli.config import ConfigError
from sesa_cli.rollout.filters import FILTERS, build_filters
from sesa_cli.rollout.filters.dynamic_sampling import informative
from sesa_cli.rollout.filters.rollout_filter import top_std_groups
from sesa_cli.rollout.rollouts import Completion, Rollout
from sesa_cli.tasks.base import Score


def _groups(rewards: list[list[float]]) -> list[list[Rollout]]:
    comp = Completion([1], [0.0], [0.0], True)
    return [[Rollout(g, None, [0], [0], comp, "", Score(r, r > 0, None)) for r in group] for g, group in
            enumerate(rewards)]  # fmt: skip


def test_dynamic_sampling_drops_the_groups_whose_rewards_are_all_equal() -> None:
    rewards = [[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.5]]
    assert informative(rewards) == [False, True, False, False]
    assert informative([[0.1, 0.1 + 1e-12]]) == [True]  # exact: float noise is a difference
    (dapo,) = build_filters({"dynamic_sampling": True})
    assert dapo.refills
    assert dapo.max_rounds == 4
    assert dapo.keep(_groups(rewards)) == [False, True, False, False]
    assert build_filters({"dynamic_sampling": {"max_rounds": 8}})[0].max_rounds == 8


def test_top_std_groups_keeps_the_most_disputed_groups() -> None:
    # population stds: 0, 0.5, 0.433, 0, 0.5 -> the two largest are groups 1 and 4 (a tie, both kept); with k=3 the
    # next is group 2; the zero-std groups 0 and 3 go first
    rewards = [[1.0, 1, 1, 1], [0, 1, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0], [1, 0, 1, 0]]
    assert top_std_groups(rewards, 0.4) == [False, True, False, False, True]
    assert top_std_groups(rewards, 0.6) == [False, True, True, False, True]
    assert all(top_std_groups(rewards, 1.0))
    # int(0.1 * 5) = 0 still keeps one group; between equal stds the earlier group wins
    assert top_std_groups(rewards, 0.1) == [False, True, False, False, False]
    assert top_std_groups([[0.0] * 4] * 3, 0.5) == [True, False, False]
    # the same rewards in another order tie exactly (the std is computed exactly), so the earlier group is kept
    assert top_std_groups([[0.1, 0.7, 0.2, 0.3], [0.3, 0.2, 0.7, 0.1], [0.0, 0.0, 0.0, 0.1]], 0.34) == [True, False,
                                                                                                       False]  # fmt: skip
    with pytest.raises(ValueError, match="ratio"):
        top_std_groups(rewards, 0.0)
    (ragen,) = build_filters({"rollout_filter": 0.4})
    assert not ragen.refills
    assert ragen.keep(_groups(rewards)) == [False, True, False, False, True]


def test_filters_are_configured_by_name_and_a_filter_keeping_everything_is_off() -> None:
    assert sorted(FILTERS) == ["dynamic_sampling", "rollout_filter"]
    assert build_filters({}) == []
    assert build_filters({"rollout_filter": 1.0, "dynamic_sampling": False}) == []  # ratio 1 keeps every group
    assert [f.name for f in build_filters({"rollout_filter": {}, "dynamic_sampling": None})] == ["rollout_filter"]
    with pytest.raises(ConfigError, match=r"unknown sampler\.filters 'dapo'; valid: dynamic_sampling, rollout_filter"):
        build_filters({"dapo": True})
    with pytest.raises(ConfigError, match=r"sampler\.filters\.rollout_filter\.share is not a setting; valid: ratio"):
        build_filters({"rollout_filter": {"share": 0.5}})
    with pytest.raises(ConfigError, match=r"sampler\.filters\.rollout_filter\.ratio=0\.0 must be in"):
        build_filters({"rollout_filter": 0.0})
