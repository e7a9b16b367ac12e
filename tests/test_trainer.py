"""The trainer: an update moves the policy towards rewarded samples; loss contexts agree where they must."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from sesa_cli.algos import lr_scale
from sesa_cli.config import ConfigError
from sesa_cli.rollout.rollouts import Expansion
from sesa_cli.rollout.scoring import build_batch, completion_logps, join_rows, select_rows
from sesa_cli.runs import RunDir
from sesa_cli.tasks.path import PathTask
from sesa_cli.trainer import Trainer
from tests.conftest import policy_objective
from tests.levels import LEVELS


def _trainer(path_setup, tmp_path, task_kw=None, lr=1e-4, algo_kw=None, model_kw=None, **sampler_kw):
    cfg, task, policy = path_setup
    import copy

    policy = copy.deepcopy(policy)
    # A small step (one Adam step moves every weight by about lr, so a large lr can overshoot any direction). The
    # policy-gradient update alone: the path recipe's found-solutions term (its own tests: tests/test_found.py) off.
    cfg = replace(
        cfg,
        sampler=replace(cfg.sampler, **sampler_kw),
        optim=replace(cfg.optim, lr=lr),
        algo=replace(cfg.algo, **{"terms": {}, **(algo_kw or {})}),
        model=replace(cfg.model, **(model_kw or {})),
    )
    if task_kw:
        cfg = replace(cfg, task=replace(cfg.task, **task_kw))
        task = PathTask(cfg.task, cfg.seed)
    return Trainer(cfg, task, policy, RunDir(tmp_path / "run"))


def _mean_logp(trainer, rows) -> float:
    batch = build_batch([r.prompt_ids for r in rows], [r.completion.ids for r in rows], 0)
    with torch.no_grad():
        logps, _ = completion_logps(trainer.model, batch)
    return float(((logps * batch.response_mask).sum(1)).mean())


@pytest.mark.parametrize("sampler", ["parallel", "sequential"])
def test_update_raises_the_logprob_of_rewarded_samples(path_setup, tmp_path, sampler):
    # Half the (64-leaf test) world is a target so every batch has rewarded and unrewarded samples.
    # sequential with whole-path chains: the first item of a chain is on-policy, so its negatives stay (every
    # stage-II solution of the two-stage form is off-policy, and drop_negatives leaves it no negative advantage)
    stage1 = {"stage1": "solution"} if sampler == "sequential" else {}
    trainer = _trainer(path_setup, tmp_path, task_kw={"num_targets": 32}, name=sampler, **stage1)
    groups, _ = trainer._draw_batch()
    rows = [r for g in groups for r in g]
    LEVELS["rewarded_rows"].check(sum(r.score.reward > 0 for r in rows))
    assert any(r.score.reward == 0 for r in rows)
    learner = trainer.learner
    inputs = learner.inputs(groups)
    # The rows the loss pushes up and down: positive and negative advantages as the update applies them (with
    # the default algo.off_policy=drop_negatives an unrewarded chain row after the first gets 0).
    assert not learner.off_policy.needs_weights  # (no importance weights needed here)
    adv, _ = learner.off_policy.rows(inputs.advantages, inputs.off_policy, None, inputs.solution, inputs.solutions)
    good = [r for r, a in zip(rows, adv.tolist(), strict=True) if a > 0]
    bad = [r for r, a in zip(rows, adv.tolist(), strict=True) if a < 0]
    assert good
    assert bad
    assert all(r.score.reward > 0 for r in good)
    assert all(r.score.reward == 0 for r in bad)
    before_good, before_bad = _mean_logp(trainer, good), _mean_logp(trainer, bad)
    before = policy_objective(trainer.model, rows, adv.tolist())
    stats = learner.update(inputs)
    assert torch.isfinite(torch.tensor(stats["loss/total"]))
    # the surrogate the update ascends goes up, and the rewarded rows gain on the unrewarded ones
    assert policy_objective(trainer.model, rows, adv.tolist()) > before
    assert _mean_logp(trainer, good) - before_good > _mean_logp(trainer, bad) - before_bad


def test_identical_contexts_give_weight_one_and_equal_gradients(path_setup, tmp_path):
    grads = {}
    for mode in ("prompt", "conditioned", "is"):
        trainer = _trainer(
            path_setup, tmp_path / mode, task_kw={"num_targets": 32}, algo_kw={"loss_context": mode}, name="parallel"
        )
        trainer.generator.manual_seed(0)
        groups, _ = trainer._draw_batch()
        inputs = trainer.learner.inputs(groups)
        trainer.learner.optimizer.step = lambda: None  # keep the weights: compare the gradients of one step
        stats = trainer.learner.update(inputs)
        if mode == "is":
            assert stats["loss/is_weight_mean"] == 1.0
            assert stats["loss/is_weight_max"] == 1.0
        grads[mode] = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    assert torch.allclose(grads["prompt"], grads["conditioned"], atol=1e-6)
    assert torch.allclose(grads["prompt"], grads["is"], atol=1e-6)


def test_sequential_is_weights_are_truncated(path_setup, tmp_path):
    trainer = _trainer(path_setup, tmp_path, algo_kw={"loss_context": "is", "is_clip": 1.5}, name="sequential")
    groups, _ = trainer._draw_batch()
    stats = trainer.learner.step(groups, 0)
    assert 0 < stats["loss/is_weight_mean"] <= stats["loss/is_weight_max"] <= 1.5


def test_a_mini_batch_is_cut_to_its_longest_row_and_scores_the_same(path_setup):
    policy = path_setup[2]
    contexts = [[1, 2, 3], [1, 2, 3, 4, 5, 6, 7, 8, 9], [4, 5]]
    completions = [[6, 7], [8, 9, 6], [7]]
    batch = build_batch(contexts, completions, 0)
    sub = select_rows(batch, torch.tensor([2, 0]))
    assert sub.input_ids.shape[1] == 5  # the longer of rows 2 and 0 (3 + 2 tokens), not the batch's 12
    with torch.no_grad():
        full, _ = completion_logps(policy.model, batch)
        cut, _ = completion_logps(policy.model, sub)
    assert torch.allclose(cut * sub.response_mask, full[[2, 0]] * sub.response_mask, atol=1e-5)


def test_mini_batches_reuse_the_sampled_logps_only_where_they_are_the_old_policys(path_setup, tmp_path, monkeypatch):
    from sesa_cli.rollout import scoring

    calls = []
    real = scoring.completion_logps
    monkeypatch.setattr(
        scoring, "completion_logps", lambda *a, **k: calls.append(torch.is_grad_enabled()) or real(*a, **k)
    )
    for sampler, reused in (("parallel", True), ("sequential", False)):
        calls.clear()
        trainer = _trainer(path_setup, tmp_path / sampler, algo_kw={"minibatches": 2}, name=sampler)
        groups, _ = trainer._draw_batch()
        inputs = trainer.learner.inputs(groups)
        inputs.advantages = torch.ones_like(inputs.advantages)  # no row skipped: every mini-batch is scored
        trainer.learner.update(inputs)
        # two graded mini-batch passes, plus one no-grad pass for the old log-probs unless they were reused
        assert calls.count(False) == (0 if reused else 1), sampler
        assert calls.count(True) == 2


def test_the_rollout_filter_trains_on_the_most_disputed_groups_and_reports_the_whole_batch(path_setup, tmp_path):
    trainer = _trainer(
        path_setup, tmp_path, task_kw={"num_targets": 32}, name="parallel", filters={"rollout_filter": 0.5}
    )
    trainer.generator.manual_seed(0)
    groups, _ = trainer._draw_batch()
    trained = []
    real = trainer.learner.inputs
    trainer.learner.inputs = lambda gs: trained.append(gs) or real(gs)
    trainer._draw_batch = lambda: (groups, 0)
    row = trainer.train_step()
    std = [float(torch.tensor([r.score.reward for r in g]).std(unbiased=False)) for g in groups]
    k = len(groups) // 2
    assert len(set(std)) > 1  # groups differ, so the ranking below can fail
    assert row["train/kept_groups"] == k == len(trained[0])
    kept = [std[i] for i, g in enumerate(groups) if any(g is t for t in trained[0])]
    dropped = [std[i] for i, g in enumerate(groups) if not any(g is t for t in trained[0])]
    assert min(kept) >= max(dropped)
    # the batch metrics still cover every group, not only the trained ones
    assert row["rollout/success"] == pytest.approx(
        sum(r.score.success for g in groups for r in g) / sum(map(len, groups))
    )


def test_lr_schedules_warm_up_then_decay_over_the_run(path_setup, tmp_path):
    learner = _trainer(path_setup, tmp_path).learner

    def scales(schedule: str) -> list[float]:
        learner.cfg = replace(
            learner.cfg,
            train=replace(learner.cfg.train, steps=10),
            optim=replace(learner.cfg.optim, warmup_steps=2, lr_schedule=schedule),
        )
        return [round(learner.lr(step) / learner.cfg.optim.lr, 4) for step in range(12)]

    assert scales("constant") == [0.5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    assert scales("linear") == [0.5, 1, 1, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0, 0]
    assert scales("cosine") == [0.5, 1, 1, 0.9619, 0.8536, 0.6913, 0.5, 0.3087, 0.1464, 0.0381, 0, 0]
    with pytest.raises(ConfigError, match=r"unknown optim\.lr_schedule 'step'; valid: constant, cosine, linear"):
        lr_scale(5, 10, 0, "step")


@pytest.mark.parametrize("minibatches", [1, 2])
def test_skipping_zero_advantage_rows_gives_the_full_passs_loss_and_gradient(path_setup, tmp_path, minibatches):
    results = {}
    for mode in ("skip", "full"):
        trainer = _trainer(
            path_setup, tmp_path / mode, task_kw={"num_targets": 32}, algo_kw={"minibatches": minibatches},
            name="parallel",
        )  # fmt: skip
        learner = trainer.learner
        trainer.generator.manual_seed(0)
        groups, _ = trainer._draw_batch()
        inputs = learner.inputs(groups)
        inputs.advantages[:12] = 0.0  # a zero-std group and a half, wherever the mini-batches cut them
        if mode == "full":
            learner.scorer.minibatch = lambda model, sub, live, old_sub, extras=(): (*completion_logps(model, sub), [])
        learner.optimizer.step = lambda: None  # keep the weights: compare the last mini-batch's gradient
        stats = learner.update(inputs)
        grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters()])
        results[mode] = (stats["loss/total"], grad)
    assert results["skip"][0] == pytest.approx(results["full"][0], abs=1e-6)
    assert results["full"][1].abs().sum() > 0
    assert torch.allclose(results["skip"][1], results["full"][1], atol=1e-6)


def test_a_mini_batch_of_zero_advantages_only_steps_on_zero_gradients(path_setup, tmp_path):
    trainer = _trainer(path_setup, tmp_path, name="parallel", algo_kw={"minibatches": 2, "ppo_epochs": 1})
    groups, _ = trainer._draw_batch()
    inputs = trainer.learner.inputs(groups)
    inputs.advantages[:] = 0.0
    inputs.advantages[0] = 1.0  # the batch has a signal (a batch without any takes no step), one mini-batch none
    grads: list[bool] = []  # per optimizer step: whether any gradient is non-zero (the weights are held still)
    trainer.learner.optimizer.step = lambda: grads.append(any(p.grad.any() for p in trainer.learner.trainable))
    trainer.learner.update(inputs)
    assert sorted(grads) == [False, True]  # the mini-batch of zero advantages adds exactly 0 to the gradient


def test_checkpoint_round_trip_restores_optimizer_and_step(path_setup, tmp_path):
    trainer = _trainer(path_setup, tmp_path, name="parallel")
    trainer.run.log_metrics(trainer.train_step())
    ckpt = trainer.save_checkpoint()
    assert (ckpt / "model.safetensors").is_file()
    assert (ckpt / "optimizer.pt").is_file()
    other = _trainer(path_setup, tmp_path / "b", name="parallel")
    other.load_checkpoint(ckpt)
    assert other.step == 1
    assert other.next_instance == trainer.next_instance
    a, b = trainer.learner.optimizer.state_dict()["state"], other.learner.optimizer.state_dict()["state"]
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k]["exp_avg"], b[k]["exp_avg"])


def test_ctrl_c_saves_a_checkpoint_before_exiting(path_setup, tmp_path):
    trainer = _trainer(path_setup, tmp_path, name="parallel")

    def interrupt(step, row):
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        trainer.fit(on_step=interrupt)
    ckpt = trainer.run.checkpoint_dir(2)
    assert (ckpt / "trainer_state.json").is_file()
    assert (ckpt / "model.safetensors").is_file()
    assert not list(trainer.run.checkpoints.glob("*.tmp"))


def test_a_sequential_step_logs_chain_health_and_a_parallel_one_does_not(path_setup, tmp_path):
    keys = {"chain/valid", "chain/valid_last", "chain/distinct", "chain/cut", "chain/followed"}
    row = _trainer(path_setup, tmp_path / "seq", name="sequential", stage1="sketch").train_step()
    assert keys <= set(row)
    assert all(0 <= row[k] <= 1 for k in keys - {"chain/distinct"})
    row = _trainer(path_setup, tmp_path / "sol", name="sequential", stage1="solution").train_step()
    assert keys - {"chain/followed"} <= set(row)
    assert "chain/followed" not in row
    row = _trainer(path_setup, tmp_path / "par", name="parallel").train_step()
    assert not [k for k in row if k.startswith("chain/")]


def test_follow_term_targets_every_stage_two_row_and_raises_its_logprob(path_setup, tmp_path):
    """algo.terms.follow: every stage-II row whose sketch names a region is trained towards that region's first token
    after its solve prompt, whether or not it followed (a run whose stage II stopped following is pulled back); with
    every advantage 0, the term alone moves the policy, and it raises those log-probs. The targets are already likely
    (log-prob about -0.01), so the step is kept small: Adam's first step moves every weight by about lr whatever its
    gradient, and at lr 1e-4 that second-order move outweighed the first-order gain on one batch (-0.0094 -> -0.0105);
    at 1e-6 the log-prob rises by 3e-5, far above float drift."""
    trainer = _trainer(path_setup, tmp_path, lr=1e-6, algo_kw={"terms": {"follow": 1.0}}, name="sequential",
                       stage1="sketch")  # fmt: skip
    task, policy = trainer.task, trainer.policy
    groups, _ = trainer._draw_batch()
    rows = [r for g in groups for r in g]
    inputs = trainer.learner.inputs(groups)
    (term,) = trainer.learner.terms
    follow = term.rows(inputs.rollouts)
    assert follow is not None
    assert follow.owners is not None
    targets = dict(zip(follow.owners, zip(follow.contexts, follow.completions, strict=True), strict=True))
    for i, r in enumerate(rows):
        assert isinstance(r.origin, Expansion)
        region = task.sketch_key(r.inst, r.origin.sketch.text)
        if region is None:
            assert i not in targets
            continue
        ctx, (tok,) = targets[i]
        assert ctx == r.context_ids
        assert tok == policy.encode(region + "/")[0]
        if r.origin.followed:  # a row that followed starts with that token
            assert r.completion.ids[0] == tok
    assert targets
    inputs = replace(inputs, advantages=torch.zeros_like(inputs.advantages))
    batch = build_batch([ctx for ctx, _ in targets.values()], [tok for _, tok in targets.values()], 0)

    def follow_logp() -> float:
        with torch.no_grad():
            logps, _ = completion_logps(trainer.model, batch)
        return float(logps[:, 0].mean())

    before = follow_logp()
    stats = trainer.learner.update(inputs)
    assert stats["loss/follow_nll"] > 0
    assert follow_logp() > before


@pytest.mark.parametrize("padding_free", [False, True])
def test_rows_joined_into_one_pass_score_as_in_a_pass_of_their_own(path_setup, padding_free):
    """join_rows: a mini-batch's rows and the follow term's (narrower, one-token completions) in one forward pass
    give every row the log-probs and entropies of its own batch's pass, up to float rounding."""
    _, _, policy = path_setup
    vocab = len(policy.tokenizer)
    rng = random.Random(0)
    completions = [[rng.randrange(4, vocab) for _ in range(rng.randint(5, 20))] for _ in range(12)]
    rows = build_batch(
        [[rng.randrange(4, vocab) for _ in range(rng.randint(3, 8))] for _ in range(12)],
        completions,
        0,
        [[rng.random() < 0.7 for _ in c] for c in completions],  # teacher-forced tokens, as an episode's
    )
    follow = build_batch([[rng.randrange(4, vocab) for _ in range(rng.randint(6, 14))] for _ in range(5)],
                         [[rng.randrange(4, vocab)] for _ in range(5)], 0)  # fmt: skip
    joined = join_rows([rows, follow], 0)
    assert joined.input_ids.shape == (17, max(rows.input_ids.shape[1], follow.input_ids.shape[1]))
    with torch.no_grad():
        out = {id(b): completion_logps(policy.model, b, padding_free=padding_free) for b in (rows, follow, joined)}
    start = 0
    for part in (rows, follow):
        n, t = part.targets.shape
        mask = part.response_mask
        assert not joined.response_mask[start : start + n, t:].any()
        for own, together in zip(out[id(part)], out[id(joined)], strict=True):
            torch.testing.assert_close(together[start : start + n, :t] * mask, own * mask, rtol=1e-5, atol=1e-5)
        start += n


@pytest.mark.parametrize("padding_free", [False, True])
def test_the_follow_term_scored_in_its_mini_batchs_pass_is_its_rows_mean_nll(path_setup, tmp_path, padding_free):
    """The follow term's rows are scored with their mini-batch (in its forward pass when the scorer shares passes,
    padding-free; in a pass of their own when padded): each mini-batch's ``follow_nll`` is the mean
    -log pi(target | solve prompt) over the follow rows of its own solution rows, as a pass of their own gives it."""
    trainer = _trainer(path_setup, tmp_path, algo_kw={"terms": {"follow": 1.0}, "minibatches": 2},
                       model_kw={"padding_free": padding_free}, name="sequential", stage1="sketch")  # fmt: skip
    learner = trainer.learner
    assert learner.scorer.shares_passes == padding_free
    inputs = learner.inputs(trainer._draw_batch()[0])
    follow = learner.terms[0].rows(inputs.rollouts)
    assert follow is not None
    assert follow.owners is not None
    assert len(follow.owners) > 2
    learner.optimizer.step = lambda: None  # the same weights for every mini-batch
    order = torch.Generator()
    order.set_state(trainer.generator.get_state())  # the update's mini-batch order
    chunks = torch.randperm(len(inputs.contexts), generator=order).chunk(2)
    with torch.no_grad():
        nll = -completion_logps(trainer.model, build_batch(follow.contexts, follow.completions, 0))[0][:, 0]
    rows = torch.tensor(follow.owners)
    expected = [float(nll[torch.isin(rows, chunk)].mean()) for chunk in chunks if torch.isin(rows, chunk).any()]
    stats = learner.update(inputs)
    assert stats["loss/follow_nll"] == pytest.approx(sum(expected) / len(expected), rel=1e-5)


def test_sketch_response_is_what_a_followed_solution_starts_with(frozenlake_setup, path_setup):
    """Task.sketch_response: FrozenLake's is the first turn that plays the plan, the path task's the region's hop
    (a path that starts with it follows the sketch); none for a sketch that is not valid."""
    _, lake, _ = frozenlake_setup
    inst = lake.instance("val", 0)
    plan = lake.random_plan(inst, random.Random(0))
    m = lake.cfg.max_actions_per_turn
    assert lake.sketch_response(inst, lake.sketch(plan)) == lake.response(plan[:m])
    assert lake.sketch_response(inst, "not a plan") is None
    _, path, _ = path_setup
    inst = path.instance("val", 0)
    region = next(iter(path.tree))
    response = path.sketch_response(inst, region + path.stop)
    assert response == region + "/"
    assert path.follows_sketch(inst, region + path.stop, response + "x/y" + path.stop, None)
    assert path.sketch_response(inst, "nowhere" + path.stop) is None
