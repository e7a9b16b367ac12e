"""The learner (sesa_cli.learner): one update against the same update written out by hand, and the seams a method
plugs into (a term's reward bonus, a loss that reads the entropies).

The hand-written update uses the pure building blocks (completion_logps, compute_advantages, compute_loss), each
tested against its formula elsewhere, and composes them as docs/extending.md says the learner does: the mini-batches
of a random order drawn from the run's generator, the old log-probs the sampler recorded (every row is on-policy
here), each mini-batch's objective plus ``coef`` times each term's loss over its rows. The optimizer step is held
back, so both compute every mini-batch at the same weights, and their losses and last gradients are compared within
float rounding (the same operations, up to the order of a few sums: rtol 1e-5)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import pytest
import torch

from sesa_cli import algos
from sesa_cli.config import AlgoConfig
from sesa_cli.losses import POLICY_LOSSES, PolicyLoss, build_loss
from sesa_cli.rollout.scoring import build_batch, completion_logps, select_rows
from sesa_cli.runs import RunDir
from sesa_cli.terms import TERMS, Term, TermSettings, register_term
from sesa_cli.trainer import Trainer


def _trainer(path_setup, tmp_path, **algo_kw) -> Trainer:
    cfg, task, policy = path_setup
    algo = replace(cfg.algo, **{"terms": {}, "minibatches": 2, "entropy_coef": 0.01, **algo_kw})
    cfg = replace(
        cfg, sampler=replace(cfg.sampler, name="parallel"), algo=algo, task=replace(cfg.task, num_targets=32)
    )
    return Trainer(cfg, type(task)(cfg.task, cfg.seed), copy.deepcopy(policy), RunDir(tmp_path / "run"))


def test_one_update_is_the_objective_plus_its_terms_by_hand(path_setup, tmp_path):
    trainer = _trainer(path_setup, tmp_path, terms={"found": {"coef": 0.5, "rows": "all"}})
    learner, cfg = trainer.learner, trainer.cfg
    groups, _ = trainer._draw_batch()
    order = torch.Generator()
    order.set_state(trainer.generator.get_state())  # the update's mini-batch order comes next from it
    rows = [r for g in groups for r in g]
    assert any(r.score.success for r in rows)  # half the leaves are targets: the found term has rows
    learner.optimizer.step = lambda: None
    stats = learner.step(groups, 0)
    grads = [p.grad.clone() for p in learner.trainable]

    # by hand, on a copy of the weights the update started from (they did not move)
    model, pad, temp = (
        copy.deepcopy(trainer.model),
        int(trainer.policy.tokenizer.pad_token_id),
        cfg.sampler.temperature,
    )
    batch = build_batch([r.prompt_ids for r in rows], [r.completion.ids for r in rows], pad)
    old = torch.zeros_like(batch.response_mask)
    for i, r in enumerate(rows):
        old[i, : len(r.completion.logps)] = torch.tensor(r.completion.logps)
    rewards = torch.tensor([[r.score.reward for r in g] for g in groups])
    advantages = algos.compute_advantages(rewards, cfg.algo).flatten()
    found: dict[tuple[tuple[int, ...], str], list[int]] = {}
    for r in rows:  # one completion of every distinct solution drawn with success, the first one drawn
        if r.score.success and r.score.key is not None:
            found.setdefault((tuple(r.prompt_ids), r.score.key), r.completion.ids)
    found_batch = build_batch([list(p) for p, _ in found], list(found.values()), pad)
    totals, nlls = [], []
    for chunk in torch.randperm(len(rows), generator=order).chunk(2):
        sub = select_rows(batch, chunk)
        logps, ents = completion_logps(model, sub, temp)
        loss, _ = algos.compute_loss(logps, old[chunk], advantages[chunk], sub.response_mask, cfg.algo,
                                     entropies=ents, norm_constant=cfg.task.max_new_tokens)  # fmt: skip
        found_logps, _ = completion_logps(model, found_batch, temp)
        nll = -(found_logps * found_batch.response_mask).sum(1).mean()
        loss = loss + 0.5 * nll
        model.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), cfg.optim.max_grad_norm)
        totals.append(float(loss.detach()))
        nlls.append(float(nll.detach()))
    assert stats["loss/found_solutions"] == len(found)
    assert stats["loss/total"] == pytest.approx(sum(totals) / 2, rel=1e-5)
    assert stats["loss/found_nll"] == pytest.approx(sum(nlls) / 2, rel=1e-5)
    mine = [p.grad for p in model.parameters() if p.requires_grad]
    assert len(mine) == len(grads)
    for by_hand, learned in zip(mine, grads, strict=True):
        torch.testing.assert_close(learned, by_hand, rtol=1e-5, atol=1e-7)


@dataclass
class _BonusSettings(TermSettings):
    pass


def test_a_terms_reward_bonus_moves_the_advantages_and_never_the_rollout_metrics(path_setup, tmp_path, monkeypatch):
    """The seam of an exploration bonus (issue 52's outcome-based bonus, the unlikeliness reward): a term's
    ``rewards`` adds to each row's reward before the advantages; the step's rollout/* metrics keep the task's."""

    class FirstRowBonus(Term):
        Settings = _BonusSettings

        def rewards(self, rows):
            return [1.0 if i == 0 else 0.0 for i in range(len(rows))]

    monkeypatch.delitem(TERMS, "first_row_bonus", raising=False)
    register_term("first_row_bonus")(FirstRowBonus)
    try:
        plain = _trainer(path_setup, tmp_path / "plain")
        bonus = _trainer(path_setup, tmp_path / "bonus", terms={"first_row_bonus": 1.0})
        groups, _ = plain._draw_batch()
        without, with_bonus = plain.learner.inputs(groups), bonus.learner.inputs(groups)
    finally:
        TERMS.pop("first_row_bonus", None)
    rewards = torch.tensor([[r.score.reward for r in g] for g in groups])
    rewards[0, 0] += 1.0
    expected = algos.compute_advantages(rewards, bonus.cfg.algo).flatten()
    torch.testing.assert_close(with_bonus.advantages, expected)
    assert not torch.equal(with_bonus.advantages, without.advantages)


def test_a_loss_that_reads_the_entropies_gets_them(path_setup, tmp_path):
    """The seam of a token mask by entropy (the high-entropy forking tokens): a policy loss that declares
    ``needs_entropies`` gets every row's per-token entropies, even with no entropy bonus, and no row is skipped."""
    seen = []

    class EntropyProbe(PolicyLoss):
        needs_entropies = True

        def compute(self, x):
            seen.append(x.entropies)
            return build_loss(AlgoConfig())(x.logps, x.old_logps, x.advantages, x.response_mask)

    POLICY_LOSSES.register("entropy_probe")(EntropyProbe)
    try:
        trainer = _trainer(path_setup, tmp_path, loss="entropy_probe", entropy_coef=0.0, minibatches=1)
        groups, _ = trainer._draw_batch()
        inputs = trainer.learner.inputs(groups)
        inputs.advantages[1:] = 0.0  # rows a zero-at-zero loss would skip: this one must see them all
        inputs.advantages[0] = 1.0  # (a batch with no signal at all takes no step: the test below)
        trainer.learner.update(inputs)
    finally:
        POLICY_LOSSES.pop("entropy_probe", None)
    (entropies,) = seen
    assert entropies is not None
    assert entropies.shape[0] == len(inputs.advantages)  # every row, none skipped
    assert not entropies.requires_grad
    assert bool((entropies >= 0).all())


def test_a_batch_without_policy_gradient_signal_takes_no_step_on_the_bonus_alone(path_setup, tmp_path):
    """Every advantage 0 and no term's rows leaves the entropy bonus alone in the loss, which Adam would
    turn into a learning-rate-sized step; the update takes none and says so. One non-zero advantage steps."""
    trainer = _trainer(path_setup, tmp_path, entropy_coef=0.01)
    groups, _ = trainer._draw_batch()
    before = [p.detach().clone() for p in trainer.learner.trainable]
    inputs = trainer.learner.inputs(groups)
    inputs.advantages[:] = 0.0
    stats = trainer.learner.update(inputs)
    assert stats["optim/no_signal"] == 1.0
    assert "optim/grad_norm" not in stats
    assert all(torch.equal(a, p) for a, p in zip(before, trainer.learner.trainable, strict=True))
    inputs.advantages[0] = 1.0
    stats = trainer.learner.update(inputs)
    assert stats["optim/no_signal"] == 0.0
    assert stats["optim/grad_norm"] > 0
    assert not all(torch.equal(a, p) for a, p in zip(before, trainer.learner.trainable, strict=True))
