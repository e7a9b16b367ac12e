"""algo.off_policy: what each off-policy strategy does to the rows drawn off the context they are scored in.

The batch is built by hand: two groups of four path answers with chosen rewards, contexts and behaviour log-probs, so
which rows are off-policy and which advantages change is known before the trainer sees it.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch

from sesa_cli import algos
from sesa_cli.advantages import Outcomes
from sesa_cli.algos import off_policy_strategy
from sesa_cli.algos.off_policy import distinct_shares
from sesa_cli.commands.registered import check_registered
from sesa_cli.config import AlgoConfig, ConfigError
from sesa_cli.deprecations import rename_overrides
from sesa_cli.rollout.rollouts import Completion, Expansion, Rollout, Sketch
from sesa_cli.rollout.scoring import Scorer, build_batch, completion_logps
from sesa_cli.runs import RunDir
from sesa_cli.tasks.base import Score
from sesa_cli.trainer import Trainer

REWARDS = [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
# Group 0 is a sequential chain: item 0 drawn from the plain prompt, items 1-3 after the earlier ones. Group 1 is
# two-stage: every solution drawn from a sketch's solve prompt, none from the plain prompt.
OFF = [False, True, True, True, True, True, True, True]
# Behaviour log-prob shift (nats, added to the first token's plain-prompt log-prob) of each row: the recorded
# pi(y|ctx) is then pi(y|x) * exp(shift), so the importance weight pi(y|x)/pi(y|ctx) is exp(-shift) exactly.
SHIFT = [0.0, math.log(2.0), 0.0, -math.log(3.0), 0.0, 0.0, math.log(4.0), 0.0]
IS_CLIP = 2.0


def _trainer(path_setup, tmp_path, off_policy: str, **algo_kw) -> Trainer:
    cfg, task, policy = path_setup
    cfg = replace(
        cfg,
        sampler=replace(cfg.sampler, name="sequential"),
        algo=replace(cfg.algo, off_policy=off_policy, is_clip=IS_CLIP, **algo_kw),
    )
    return Trainer(cfg, task, copy.deepcopy(policy), RunDir(tmp_path / "run"))


def _groups(trainer: Trainer) -> list[list[Rollout]]:
    """The hand-built batch (see the module constants); behaviour log-probs from the trainer's own model."""
    policy, task = trainer.policy, trainer.task
    prompt = trainer.sampler.encode_prompt(task.prompt(None))
    answers = [task.leaves[i] + task.stop for i in range(8)]
    ids = [policy.encode(a) for a in answers]
    batch = build_batch([prompt] * 8, ids, int(policy.tokenizer.pad_token_id))
    with torch.no_grad():
        plain, _ = completion_logps(trainer.model, batch, trainer.cfg.sampler.temperature)
    groups: list[list[Rollout]] = [[], []]
    for i in range(8):
        g = i // 4
        if g == 0:  # chain: item k continues the plain prompt and items 0..k-1
            context = prompt + [t for earlier in ids[:i] for t in earlier]
        else:  # two-stage: a solve prompt per sketch
            context = policy.encode_prompt(f"P{task.leaves[i].split('/')[0]}:")
        logps = plain[i, : len(ids[i])].tolist()
        logps[0] += SHIFT[i]
        comp = Completion(ids[i], logps, [0.0] * len(ids[i]), True)
        reward = REWARDS[g][i % 4]
        score = Score(reward, reward > 0, task.leaves[i])
        groups[g].append(Rollout(g, None, prompt, context, comp, answers[i], score))
    return groups


def _advantages_seen(trainer: Trainer, groups, monkeypatch) -> tuple[torch.Tensor, dict[str, float]]:
    """(the advantages compute_loss received, the update's stats); the weights are left unchanged."""
    seen = []
    real = algos.compute_loss
    monkeypatch.setattr(algos, "compute_loss", lambda *a, **k: seen.append(a[2].clone()) or real(*a, **k))
    trainer.learner.optimizer.step = lambda: None
    stats = trainer.learner.step(groups, 0)
    return torch.cat(seen), stats


def _paper(trainer: Trainer) -> torch.Tensor:
    """The estimator's advantages of the batch, (8,): what the trainer computed before off_policy existed."""
    return algos.compute_advantages(torch.tensor(REWARDS), trainer.cfg.algo).flatten()


def test_paper_passes_the_estimators_advantages_unchanged(path_setup, tmp_path, monkeypatch):
    trainer = _trainer(path_setup, tmp_path, off_policy="paper")
    inputs = trainer.learner.inputs(_groups(trainer))
    assert inputs.off_policy.tolist() == OFF
    seen, stats = _advantages_seen(trainer, _groups(trainer), monkeypatch)
    assert torch.equal(seen, _paper(trainer))  # bit-identical: the paper's loss is what it always was
    assert stats["loss/off_policy_frac"] == 7 / 8
    assert "loss/adv_changed_frac" not in stats


def test_drop_negatives_zeroes_the_off_policy_negatives_only(path_setup, tmp_path, monkeypatch):
    trainer = _trainer(path_setup, tmp_path, off_policy="drop_negatives")
    seen, stats = _advantages_seen(trainer, _groups(trainer), monkeypatch)
    paper = _paper(trainer)
    # Negative rows: 1 and 3 (group 0), 4, 6 and 7 (group 1); row 0 is on-policy but positive, so every negative is
    # off-policy here and all five drop. Positives (rows 0, 2, 5) are untouched.
    expected = paper.clone()
    expected[[1, 3, 4, 6, 7]] = 0.0
    assert (paper[[1, 3, 4, 6, 7]] < 0).all()
    assert torch.equal(seen, expected)
    assert stats["loss/adv_changed_frac"] == 5 / 8


def test_weight_negatives_scales_off_policy_negatives_by_the_truncated_ratio(path_setup, tmp_path, monkeypatch):
    trainer = _trainer(path_setup, tmp_path, off_policy="weight_negatives")
    seen, stats = _advantages_seen(trainer, _groups(trainer), monkeypatch)
    paper = _paper(trainer)
    # weight = min(2, exp(-shift)): row 1 -> 1/2, row 3 -> min(2, 3) = 2, row 6 -> 1/4, rows 4 and 7 -> 1.
    expected = paper.clone()
    for row, weight in ((1, 0.5), (3, 2.0), (4, 1.0), (6, 0.25), (7, 1.0)):
        expected[row] = paper[row] * weight
    torch.testing.assert_close(seen, expected, atol=1e-5, rtol=0)
    assert torch.equal(seen[[0, 2, 5]], paper[[0, 2, 5]])  # positives exactly as computed
    # Rows 4 and 7 have weight 1 up to float noise of the rescoring, so which of them "changed" is noise; 1, 3, 6 did.
    assert 3 / 8 <= stats["loss/adv_changed_frac"] <= 5 / 8
    assert stats["loss/neg_weight_mean"] == pytest.approx((0.5 + 2.0 + 1.0 + 0.25 + 1.0) / 5, abs=1e-5)


def test_on_policy_baseline_takes_the_mean_of_the_on_policy_rows(path_setup, tmp_path, monkeypatch):
    trainer = _trainer(path_setup, tmp_path, off_policy="on_policy_baseline")
    seen, stats = _advantages_seen(trainer, _groups(trainer), monkeypatch)
    paper = _paper(trainer)
    # Group 0: baseline = r_0 = 1 (its only on-policy row), std of the whole group = 0.5773503 (+1e-6):
    # [0, -1, 0, -1] / std. Group 1 has no on-policy row: the estimator's own baseline, counted.
    std = torch.tensor(REWARDS[0]).std().item() + 1e-6
    torch.testing.assert_close(seen[:4], torch.tensor([0.0, -1.0, 0.0, -1.0]) / std)
    assert torch.equal(seen[4:], paper[4:])
    assert stats["loss/baseline_fallback_frac"] == 0.5
    assert stats["loss/adv_changed_frac"] == 4 / 8


@pytest.mark.parametrize("variant", ["drop_negatives", "weight_negatives", "on_policy_baseline"])
def test_with_conditioned_scoring_no_row_is_off_policy_and_every_variant_is_the_paper(
    path_setup, tmp_path, monkeypatch, variant
):
    groups_seen = {}
    for name in ("paper", variant):
        trainer = _trainer(path_setup, tmp_path / name, off_policy=name, loss_context="conditioned")
        groups = _groups(trainer)
        assert not trainer.learner.inputs(groups).off_policy.any()
        groups_seen[name] = _advantages_seen(trainer, groups, monkeypatch)
    assert torch.equal(groups_seen["paper"][0], groups_seen[variant][0])
    assert groups_seen[variant][1]["loss/off_policy_frac"] == 0.0
    assert groups_seen[variant][1].get("loss/adv_changed_frac", 0.0) == 0.0


def test_sketch_rows_are_never_off_policy(path_setup, tmp_path):
    trainer = _trainer(path_setup, tmp_path, off_policy="drop_negatives", train_sketches=True)
    groups = _groups(trainer)
    for group in groups:  # one sketch per group, shared by its solutions
        sketch = Sketch("", [1, 2], Completion([5, 6], [-0.1, -0.2], [0.0, 0.0], True), 0)
        for r in group:
            r.origin = Expansion(sketch)
    inputs = trainer.learner.inputs(groups)
    assert inputs.kinds == ["solution"] * 8 + ["sketch"] * 2  # rows say what they are, whatever their place
    assert inputs.solution.tolist() == [True] * 8 + [False] * 2
    assert inputs.off_policy.tolist() == [*OFF, False, False]  # the two sketch rows, scored where drawn
    assert inputs.contexts[8:] == [[1, 2], [1, 2]]


def test_a_sketch_that_repeats_an_earlier_one_of_its_chain_is_never_pushed_up(path_setup, tmp_path):
    trainer = _trainer(path_setup, tmp_path, off_policy="paper", train_sketches=True)
    groups = _groups(trainer)
    # group 0's four solutions (rewards 1, 0, 1, 0) expand the sketches A, C, A, D: the third repeats the first and
    # drew a rewarded solution; group 1's expand A, B, C, D: a sketch of another group's chain is no repeat.
    ids = {"A": [5, 6], "B": [7], "C": [8], "D": [9]}
    for group, names in zip(groups, ("ACAD", "ABCD"), strict=True):
        for k, (r, name) in enumerate(zip(group, names, strict=True)):
            comp = Completion(ids[name], [-0.1] * len(ids[name]), [0.0] * len(ids[name]), True)
            r.origin = Expansion(Sketch(name, [1, 2], comp, k))
    inputs = trainer.learner.inputs(groups)
    solution = inputs.advantages[:8].tolist()
    sketches = inputs.advantages[8:].tolist()
    assert len(sketches) == 8  # one row per drafted sketch, in chain order
    assert solution[2] > 0
    assert sketches[2] == 0.0  # the repeat of A is not pushed up, though its solution was rewarded
    keep = [0, 1, 3, 4, 5, 6, 7]
    assert [sketches[i] for i in keep] == pytest.approx([solution[i] for i in keep])


def test_a_sketch_no_solution_carried_out_is_never_pushed_up(path_setup, tmp_path):
    trainer = _trainer(path_setup, tmp_path, off_policy="paper", train_sketches=True)
    groups = _groups(trainer)
    # every solution expands its own sketch; in group 0 the rewarded first solution did not carry its sketch out
    # (followed False), the third did; in group 1 the task cannot tell (followed None) for all four
    for g, group in enumerate(groups):
        for k, r in enumerate(group):
            sketch = Sketch(str(k), [1, 2 + g], Completion([5 + k], [-0.1], [0.0], True), k)
            r.origin = Expansion(sketch, followed=(k != 0) if g == 0 else None)
    inputs = trainer.learner.inputs(groups)
    solution = inputs.advantages[:8].tolist()
    sketches = inputs.advantages[8:].tolist()
    assert solution[0] > 0
    assert solution[2] > 0
    assert sketches[0] == 0.0  # its solution won without carrying it out: no credit
    assert sketches[2] == pytest.approx(solution[2])  # carried out and rewarded: pushed up
    assert [sketches[i] for i in (1, 3)] == pytest.approx([solution[i] for i in (1, 3)])  # negatives stay
    assert sketches[4:] == pytest.approx(solution[4:])  # followed None: the task cannot tell, the sketch keeps it


def test_weight_negatives_with_importance_weighted_loss_is_refused(path_setup):
    cfg = path_setup[0]
    with pytest.raises(ConfigError, match="weight negatives twice"):
        replace(cfg, algo=replace(cfg.algo, off_policy="weight_negatives", loss_context="is"))
    with pytest.raises(ConfigError, match=r"unknown algo\.off_policy 'nope'; valid: distinct_solutions, "):
        check_registered(replace(cfg, algo=replace(cfg.algo, off_policy="nope")))


def test_the_registry_is_the_list_of_strategies_and_the_old_key_still_works():
    renamed, notices = rename_overrides(["sampler.off_policy=paper", "seed=1"])
    assert renamed == ["algo.off_policy=paper", "seed=1"]
    assert notices == ["deprecated: sampler.off_policy -> algo.off_policy (the old name goes in the next release)"]


def test_distinct_solutions_shares_the_positive_push_out_per_distinct_solution(path_setup, tmp_path, monkeypatch):
    trainer = _trainer(path_setup, tmp_path, off_policy="distinct_solutions")
    groups = _groups(trainer)
    # Group 1 rewards [0, 1, 1, 0], and row 6 draws the same solution as row 2 (group 0): the same prompt, the same
    # key. Rewarded rows: 0 (on-policy), 2, 5 and 6 (off-policy).
    second = groups[0][2]
    groups[1][2] = replace(groups[1][2], completion=second.completion, text=second.text, score=second.score)
    rewards = torch.tensor([REWARDS[0], [0.0, 1.0, 1.0, 0.0]])
    seen, stats = _advantages_seen(trainer, groups, monkeypatch)
    paper = algos.compute_advantages(rewards, trainer.cfg.algo).flatten()
    expected = torch.where(torch.tensor(OFF) & (paper < 0), 0.0, paper)  # drop_negatives
    # rows 2 and 6 are one solution drawn twice off-policy: half of each row's advantage; row 5 keeps its own; the
    # three are rescaled to their total. Row 0, on-policy, keeps its advantage.
    shares = torch.tensor([paper[2] / 2, paper[5], paper[6] / 2])
    shares *= (paper[2] + paper[5] + paper[6]) / shares.sum()
    expected[[2, 5, 6]] = shares
    torch.testing.assert_close(seen, expected)
    assert seen[0] == paper[0]
    assert float(seen[[2, 5, 6]].sum()) == pytest.approx(float(paper[[2, 5, 6]].sum()))
    # the twice-drawn solution gets as much push as the mean of its two rows, not their sum
    assert float(seen[2] + seen[6]) / float(seen[5]) == pytest.approx(float((paper[2] + paper[6]) / 2 / paper[5]))
    assert stats["loss/distinct_rewarded_frac"] == 2 / 3


def test_distinct_solutions_leaves_parallel_sampling_alone(path_setup, tmp_path, monkeypatch):
    groups_seen = {}
    for name in ("paper", "distinct_solutions"):
        trainer = _trainer(path_setup, tmp_path / name, off_policy=name, loss_context="conditioned")
        groups = _groups(trainer)
        groups[1][2] = replace(groups[1][2], score=groups[0][2].score)  # a repeated rewarded solution
        groups_seen[name] = _advantages_seen(trainer, groups, monkeypatch)[0]
    assert torch.equal(groups_seen["paper"], groups_seen["distinct_solutions"])  # no off-policy row: plain GRPO


@pytest.mark.parametrize(("strategy", "dominant_rises"), [("drop_negatives", True), ("distinct_solutions", False)])
def test_distinct_solutions_moves_a_softmax_policy_off_its_dominant_solution(strategy, dominant_rises):
    """A hand-set policy over four solutions, p = (0.7, 0.1, 0.1, 0.1): one group drew solution 0 five times (the
    first draw on-policy), solutions 1 and 2 once each and the unrewarded solution 3 once. One gradient step on
    -sum_i A_i log p(y_i) with each strategy's advantages: drop_negatives pushes every rewarded row alike, so the
    solution drawn five times gains; distinct_solutions pushes each solution found off-policy alike (solution 0's
    on-policy row keeps its own push), so mass moves from the dominant one to the two the group also found."""
    logits = torch.log(torch.tensor([0.7, 0.1, 0.1, 0.1])).requires_grad_()
    drawn = [0, 0, 0, 0, 0, 1, 2, 3]
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]])
    off = torch.tensor([[False] + [True] * 7])
    chosen = off_policy_strategy(AlgoConfig(off_policy=strategy))
    adv, _ = chosen.advantages(Outcomes(rewards), off)
    solution = torch.ones(8, dtype=torch.bool)
    adv, _ = chosen.rows(adv.flatten(), off.flatten(), None, solution, [((1,), str(y)) for y in drawn])
    loss = -(adv * torch.log_softmax(logits, 0)[drawn]).sum()
    loss.backward()
    with torch.no_grad():
        after = torch.softmax(logits - 0.1 * logits.grad, 0)
    assert (float(after[0]) > 0.7) == dominant_rises
    assert float(after[1]) > 0.1  # both strategies raise the other two found solutions
    assert float(after[2]) > 0.1
    assert float(after[3]) < float(after[1])  # and the unrewarded one less than them


def test_distinct_shares_counts_over_the_gathered_batch_and_applies_to_the_own_rows():
    """Two replicas' rewarded off-policy rows (solution, advantage), two prompts: solution L of prompt 1 is drawn
    twice by the first replica and once by the second. Each replica's shares, counted over the gathered batch, are
    exactly what the batch's rows get in one process, and differ from counting its own shard alone."""
    p, q = (1,), (2,)
    first = [((p, "L"), 1.0), ((p, "L"), 0.5), ((p, "A"), 0.5), ((q, "M"), 2.0)]
    second = [((p, "L"), 1.0), ((p, "B"), 1.0), ((q, "M"), 1.0)]
    batch = first + second
    whole = distinct_shares(batch, batch)
    assert torch.equal(torch.cat([distinct_shares(first, batch), distinct_shares(second, batch)]), whole)
    # prompt 1: L drawn 3 times -> (1 + 0.5 + 1) / 3 between its rows, A and B whole; the prompt's total 4.0 kept
    split = torch.tensor([1 / 3, 0.5 / 3, 0.5, 1 / 3, 1.0])
    scaled = split * 4.0 / float(split.sum())
    # prompt 2: M drawn twice -> halves, rescaled to the prompt's total 3.0: the advantages as they were
    torch.testing.assert_close(whole, torch.stack([*scaled[:3], torch.tensor(2.0), *scaled[3:], torch.tensor(1.0)]))
    assert float(whole[[0, 1, 2, 4, 5]].sum()) == pytest.approx(4.0)
    # the second replica alone sees L once and M once: nothing to share out, unlike the batch
    assert torch.equal(distinct_shares(second, second), torch.tensor([1.0, 1.0, 1.0]))
    assert not torch.allclose(distinct_shares(second, batch), torch.tensor([1.0, 1.0, 1.0]))


def test_distinct_solutions_on_replicas_gives_each_its_rows_what_one_process_gives_them():
    """Two replicas of DistinctSolutions, each holding four rows of the batch, their gather played by hand (what each
    sends, concatenated in rank order): every replica's advantages and distinct_rewarded_frac are one process's on
    the whole batch; counting its own shard alone, the second replica's would not be."""
    key = [None if k is None else ((1,), k) for k in ("L", "L", "A", "B", "L", "C", None, "C")]
    adv = torch.tensor([0.5, 1.0, -0.5, 0.25, 1.0, 0.75, 1.0, -1.0])
    off = torch.tensor([True, True, True, False, True, True, True, True])
    algo = AlgoConfig(off_policy="distinct_solutions")
    solution = torch.ones(8, dtype=torch.bool)
    whole, whole_stats = off_policy_strategy(algo).rows(adv, off, None, solution, key)
    shards = (slice(0, 4), slice(4, 8))
    sent: list[list] = []
    for rows in shards:  # what each replica sends: its rewarded off-policy rows

        def send(mine: list) -> list:
            sent.append(mine)
            return mine

        off_policy_strategy(algo, gather=send).rows(adv[rows], off[rows], None, solution[rows], key[rows])
    # row 2's negative is dropped, row 3 is on-policy, row 6 has no solution key
    assert sent == [[(key[0], 0.5), (key[1], 1.0)], [(key[4], 1.0), (key[5], 0.75)]]
    for rows in shards:
        replica = off_policy_strategy(algo, gather=lambda mine: [*sent[0], *sent[1]])
        mine, stats = replica.rows(adv[rows], off[rows], None, solution[rows], key[rows])
        assert torch.equal(mine, whole[rows])
        # rewarded off-policy rows of the batch: L three times, C once
        assert stats["loss/distinct_rewarded_frac"] == whole_stats["loss/distinct_rewarded_frac"] == 2 / 4
    alone, _ = off_policy_strategy(algo).rows(adv[4:], off[4:], None, solution[4:], key[4:])
    assert not torch.equal(alone, whole[4:])


def test_the_old_policy_is_scored_on_the_off_policy_rows_only(monkeypatch):
    # rows 0 and 2 were drawn in the context they are scored in: their sampled log-probs are the old policy's
    batch = build_batch([[1, 2], [1, 2, 3], [1], [4]], [[5, 6], [7], [8, 9, 9], [5]], 0)
    behaviour = torch.full(batch.response_mask.shape, -1.0) * batch.response_mask
    off = torch.tensor([False, True, False, True])
    seen = []

    def score(self, model, sub):
        seen.append(sub.input_ids.tolist())
        return torch.full(sub.response_mask.shape, -2.0), None

    monkeypatch.setattr(Scorer, "__call__", score)
    scorer, bf16_scorer = Scorer(0, 1.0), Scorer(0, 1.0, dtype="bfloat16")
    old = scorer.old_logps(None, batch, behaviour, off, several_updates=True, weighted=True)
    assert len(seen) == 1
    assert seen[0][0][:4] == [1, 2, 3, 7]
    assert seen[0][1][:2] == [4, 5]
    assert old is not None
    torch.testing.assert_close(old[[0, 2]], behaviour[[0, 2]])
    assert (old[[1, 3]] == -2.0).all()
    # nothing off-policy: no forward at all; bf16: every row recomputed; one update and no weights: none needed
    assert scorer.old_logps(None, batch, behaviour, off & False, several_updates=True, weighted=False) is behaviour
    assert len(seen) == 1
    bf16 = bf16_scorer.old_logps(None, batch, behaviour, off, several_updates=True, weighted=False)
    assert bf16 is not None
    assert (bf16 == -2.0).all()
    assert scorer.old_logps(None, batch, behaviour, off, several_updates=False, weighted=False) is None
