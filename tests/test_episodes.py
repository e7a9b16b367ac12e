"""Multi-turn rollouts: episodes are the task's own transcript, observations stay out of the loss, both samplers."""

from __future__ import annotations

from dataclasses import replace

import torch

from sesa_cli.rollout.samplers import make_sampler
from sesa_cli.rollout.scoring import build_batch, completion_logps
from tests.conftest import chained_context, policy_objective, sketch_of
from tests.levels import LEVELS


def _sampler(setup, **kw):
    """A sampler of ``setup``'s config with ``kw`` replaced; its groups are sequential throughout unless
    ``parallel_rows`` is given (the FrozenLake recipe's 4 i.i.d. rows need G > 4)."""
    cfg, task, policy = setup
    return make_sampler(replace(cfg.sampler, **{"parallel_rows": 0, **kw}), task, policy), task, policy


def _segments(policy, comp):
    """The trajectory split into (is_policy, text) runs."""
    out: list[tuple[bool, list[int]]] = []
    for tok, m in zip(comp.ids, comp.mask, strict=True):
        if out and out[-1][0] == m:
            out[-1][1].append(tok)
        else:
            out.append((m, [tok]))
    return [(m, policy.decode(ids)) for m, ids in out]


def test_episode_is_the_tasks_transcript(frozenlake_setup):
    sampler, task, policy = _sampler(frozenlake_setup, name="parallel", group_size=8)
    instances = [task.instance("train", i) for i in range(3)]
    groups = sampler.sample(instances, torch.Generator().manual_seed(0))
    multi_turn = 0
    for inst, group in zip(instances, groups, strict=True):
        for r in group:
            segs = _segments(policy, r.completion)
            responses = [text for m, text in segs if m]
            assert segs[0][0]  # the trajectory starts with a response
            text, score = task.transcript(inst, responses)
            # context + trajectory is exactly the runner text of the task (prompt, responses, feedback)
            assert policy.decode(r.context_ids + r.completion.ids) == text
            assert r.score == score
            # the policy mask covers exactly the responses; feedback is never a policy token
            assert r.completion.n_sampled == sum(len(policy.encode(t)) for t in responses)
            assert all(lp == 0.0 for lp, m in zip(r.completion.logps, r.completion.mask, strict=True) if not m)
            assert len(r.completion.policy_entropies) == r.completion.n_sampled
            multi_turn += len(responses) > 1
    LEVELS["multi_turn_episodes"].check(multi_turn)


def test_feedback_is_exactly_the_environment_text(frozenlake_setup):
    sampler, task, policy = _sampler(frozenlake_setup, name="parallel", group_size=8)
    inst = task.instance("train", 7)
    for r in sampler.sample([inst], torch.Generator().manual_seed(1))[0]:
        env = task.make_env(inst)
        for is_policy, text in _segments(policy, r.completion):
            if is_policy:
                turn = env.step(text)
            else:
                assert text == turn.feedback  # a feedback run always follows a response
        assert env.done


def test_loss_mask_excludes_observations(frozenlake_setup):
    sampler, _task, policy = _sampler(frozenlake_setup, name="parallel", group_size=8)
    rows = [r for g in sampler.sample([_task.instance("train", 1)], torch.Generator().manual_seed(2)) for r in g]
    batch = build_batch(
        [r.prompt_ids for r in rows],
        [r.completion.ids for r in rows],
        policy.tokenizer.pad_token_id,
        [r.completion.mask for r in rows],
    )
    for i, r in enumerate(rows):
        n = len(r.completion.ids)
        assert batch.response_mask[i, :n].tolist() == [float(m) for m in r.completion.mask]
        assert batch.response_mask[i, n:].sum() == 0
    assert any(not all(r.completion.mask) for r in rows)


def test_sampled_logps_are_the_scoring_passs_logps(frozenlake_setup):
    # The trainer takes the sampler's log-probs as the old policy's when every row is scored in the context that
    # drew it (float32): they must be what a full forward pass over the episode gives, observations masked.
    sampler, task, policy = _sampler(frozenlake_setup, name="parallel", group_size=8)
    insts = [task.instance("train", i) for i in range(3)]
    rows = [r for g in sampler.sample(insts, torch.Generator().manual_seed(5)) for r in g]
    batch = build_batch(
        [r.context_ids for r in rows],
        [r.completion.ids for r in rows],
        policy.tokenizer.pad_token_id,
        [r.completion.mask for r in rows],
    )
    with torch.no_grad():
        scored, _ = completion_logps(policy.model, batch)
    sampled = torch.zeros_like(scored)
    for i, r in enumerate(rows):
        sampled[i, : len(r.completion.logps)] = torch.tensor(r.completion.logps)
    mask = batch.response_mask
    assert mask.sum() > 0
    assert torch.allclose(sampled * mask, scored * mask, atol=1e-4)


def test_sequential_episode_k_continues_after_the_earlier_episodes(frozenlake_setup):
    sampler, task, policy = _sampler(frozenlake_setup, name="sequential", stage1="solution", group_size=3)
    instances = [task.instance("train", i) for i in range(2)]
    groups = sampler.sample(instances, torch.Generator().manual_seed(0))
    between = policy.encode(task.between) if task.between else []
    stop = policy.encode(task.stop)
    for inst, group in zip(instances, groups, strict=True):
        x = sampler.encode_prompt(task.prompt(inst))
        for k, r in enumerate(group):
            # an episode whose last reply was cut (an invalid reply: it ended the episode) is closed with the stop
            earlier = [e.completion.ids + (stop if e.stop_forced else []) for e in group[:k]]
            assert r.context_ids == chained_context(x, earlier, between)
            assert r.prompt_ids == x
            responses = [t for m, t in _segments(policy, r.completion) if m]
            assert r.score == task.transcript(inst, responses)[1]


def test_agent_sketches_are_plans_placed_in_the_first_turn(frozenlake_setup):
    # stage1=sketch explicitly: auto gives FrozenLake whole episodes (its base does not follow plans; the README)
    sampler, task, policy = _sampler(frozenlake_setup, name="sequential", stage1="sketch", group_size=4)
    inst = task.instance("train", 3)
    (group,) = sampler.sample([inst], torch.Generator().manual_seed(0))
    head = sampler.encode_prompt(task.sketch_head(inst))
    for k, r in enumerate(group):
        expected = list(head)
        for earlier in group[:k]:
            expected += sketch_of(earlier).completion.ids + (policy.encode(task.stop) if earlier.stop_forced else [])
        assert sketch_of(r).context_ids == expected
        assert r.context_ids == sampler.encode_prompt(task.solve_prompt(inst, sketch_of(r).text))
        assert r.prompt_ids == sampler.encode_prompt(task.prompt(inst))


def test_update_raises_the_logprob_of_successful_episodes(frozenlake_setup, tmp_path):
    """The RL signal through multi-turn episodes: one update raises the surrogate it ascends and makes the policy
    tokens of rewarded episodes more likely relative to those of unrewarded ones (observations never enter the loss).
    The rewards are set by hand (half of each group), so the test does not depend on how often the base succeeds."""
    import copy

    from sesa_cli.runs import RunDir
    from sesa_cli.tasks.base import Score
    from sesa_cli.trainer import Trainer

    cfg, task, policy = frozenlake_setup
    cfg = replace(cfg, sampler=replace(cfg.sampler, name="parallel"), optim=replace(cfg.optim, lr=1e-4))
    trainer = Trainer(cfg, task, copy.deepcopy(policy), RunDir(tmp_path / "run"))
    drawn, _ = trainer._draw_batch()
    groups = [
        [
            replace(r, score=Score(reward=float(i % 2 == 0), success=i % 2 == 0, key=r.score.key))
            for i, r in enumerate(g)
        ]
        for g in drawn
    ]
    rows = [r for g in groups for r in g]
    good = [r for r in rows if r.score.success]
    bad = [r for r in rows if not r.score.success]
    assert any(r.completion.mask is not None and not all(r.completion.mask) for r in rows)  # observations present
    inputs = trainer.learner.inputs(groups)
    adv = inputs.advantages.tolist()

    def mean_logp(rows) -> float:
        return policy_objective(trainer.model, rows, [1.0] * len(rows))

    before_good, before_bad, before = mean_logp(good), mean_logp(bad), policy_objective(trainer.model, rows, adv)
    trainer.learner.update(inputs)
    assert policy_objective(trainer.model, rows, adv) > before
    assert mean_logp(good) - before_good > mean_logp(bad) - before_bad
