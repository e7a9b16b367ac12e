"""Samplers: what context each rollout of a group was drawn from."""

from __future__ import annotations

from dataclasses import replace

import torch

from sesa_cli.rollout.rollouts import ChainItem, Expansion, Plain
from sesa_cli.rollout.samplers import make_sampler
from tests.conftest import chained_context, sketch_of


def _sampler(path_setup, **kw):
    cfg, task, policy = path_setup
    return make_sampler(replace(cfg.sampler, **kw), task, policy), task, policy


def test_parallel_draws_every_rollout_from_the_plain_prompt(path_setup):
    sampler, task, _policy = _sampler(path_setup, name="parallel", group_size=4)
    groups = sampler.sample([None, None], torch.Generator().manual_seed(0))
    assert [len(g) for g in groups] == [4, 4]
    x = sampler.encode_prompt(task.prompt(None))
    assert all(r.context_ids == x == r.prompt_ids for g in groups for r in g)


def test_kth_solution_is_conditioned_on_exactly_the_earlier_ones(path_setup):
    sampler, task, policy = _sampler(path_setup, name="sequential", stage1="solution", group_size=5)
    groups = sampler.sample([None, None, None], torch.Generator().manual_seed(0))
    x = sampler.encode_prompt(task.prompt(None))
    between = policy.encode(task.between) if task.between else []
    stop = policy.encode(task.stop)
    for group in groups:
        for k, r in enumerate(group):
            # an earlier item cut at its length limit is closed with the task's stop (tests/test_chains.py)
            earlier = [e.completion.ids + (stop if e.stop_forced else []) for e in group[:k]]
            assert r.context_ids == chained_context(x, earlier, between)
            assert r.prompt_ids == x


def test_kth_sketch_context_holds_exactly_the_earlier_sketches(path_setup):
    sampler, task, policy = _sampler(
        path_setup, name="sequential", stage1="sketch", group_size=4, solutions_per_sketch=2, sketch_max_tokens=8
    )
    groups = sampler.sample([None, None], torch.Generator().manual_seed(0))
    head = sampler.encode_prompt(task.sketch_head(None))
    for group in groups:
        assert len(group) == 8  # G sketches x m solutions
        assert all(isinstance(r.origin, Expansion) for r in group)
        sketches = [sketch_of(group[i]) for i in range(0, 8, 2)]
        for k in range(4):
            r = group[2 * k]
            assert sketch_of(group[2 * k + 1]) is sketches[k]  # one sketch, m solutions expanding it
            assert sketches[k].position == k
            expected = list(head)
            for s in sketches[:k]:
                expected += s.completion.ids + ([] if s.completion.stopped else policy.encode(task.stop))
            assert sketches[k].context_ids == expected
            # both solutions of a sketch expand it from the same solve prompt
            assert group[2 * k].context_ids == group[2 * k + 1].context_ids
            assert r.context_ids == sampler.encode_prompt(task.solve_prompt(None, sketches[k].text))


def test_scores_come_from_the_task(path_setup):
    sampler, task, _ = _sampler(path_setup, name="parallel", group_size=8)
    for group in sampler.sample([None], torch.Generator().manual_seed(3)):
        for r in group:
            assert r.score == task.score(None, r.text)


def test_every_sampler_draws_n_per_instance_and_says_whether_it_drew_chains(path_setup):
    # evaluation calls draw and chain_health on whatever sampler it has (no isinstance switch)
    parallel, task, _policy = _sampler(path_setup, name="parallel", group_size=4)
    groups = parallel.draw([None, None], 6, torch.Generator().manual_seed(0))
    assert [len(g) for g in groups] == [6, 6]
    x = parallel.encode_prompt(task.prompt(None))
    assert all(r.context_ids == x for g in groups for r in g)  # i.i.d. from the plain prompt
    assert parallel.chain_health(groups) is None
    sequential, _, _ = _sampler(path_setup, name="sequential", stage1="solution", group_size=4)
    groups = sequential.draw([None, None], 6, torch.Generator().manual_seed(0))
    assert [len(g) for g in groups] == [6, 6]  # a chain of 4, then the first 2 of another
    assert groups[0][4].context_ids == x  # the second chain starts afresh
    health = sequential.chain_health(groups)
    assert health is not None
    assert health.chains == 2  # one whole chain per instance; the cut one is left out
    assert not health.sketches


def test_parallel_rows_follow_the_chain_and_are_drawn_from_the_plain_prompt(path_setup):
    for stage1 in ("sketch", "solution"):
        sampler, task, _policy = _sampler(
            path_setup, name="sequential", stage1=stage1, group_size=5, parallel_rows=2, sketch_max_tokens=8
        )
        x = sampler.encode_prompt(task.prompt(None))
        for group in sampler.sample([None, None], torch.Generator().manual_seed(0)):
            assert len(group) == 5
            chain, iid = group[:3], group[3:]
            assert all(r.context_ids == x == r.prompt_ids and isinstance(r.origin, Plain) for r in iid)  # on-policy
            assert all(r.context_ids != x for r in chain[1:])  # later chain items are conditioned
            assert [r.origin.position for r in chain] == [0, 1, 2]
            if stage1 == "sketch":
                assert all(isinstance(r.origin, Expansion) and r.context_ids != x for r in chain)
                head = sampler.encode_prompt(task.sketch_head(None))
                assert sketch_of(chain[0]).context_ids == head
            else:
                assert all(isinstance(r.origin, ChainItem) for r in chain)
                assert chain[2].origin.conditioned_on == (chain[0].text, chain[1].text)
            assert sampler.rows_per_group == len(group)
        # chain health reads the chains only: 3 items per chain, in every group of a longer evaluation draw
        groups = sampler.draw([None, None], 10, torch.Generator().manual_seed(1))
        health = sampler.chain_health(groups)
        assert health is not None
        assert len(health.valid) == 3
        assert health.chains == 2 * 2  # two instances x 10 samples = two groups of 5 each, one chain per group


def test_a_group_counts_its_chain_items_expansions_and_iid_rows(path_setup):
    """The rollouts of one group (what `sesa train` counts per step): the chain's items times the solutions per sketch,
    plus the i.i.d. rows; every row says which it is."""
    sampler, _, _ = _sampler(path_setup, name="sequential", stage1="sketch", group_size=4, parallel_rows=1,
                             solutions_per_sketch=2, sketch_max_tokens=8)  # fmt: skip
    (group,) = sampler.sample([None], torch.Generator().manual_seed(0))
    assert sampler.rows_per_group == len(group) == 3 * 2 + 1
    assert [type(r.origin).__name__ for r in group] == ["Expansion"] * 6 + ["Plain"]
    assert [r.origin.position for r in group] == [0, 0, 1, 1, 2, 2, 0]
