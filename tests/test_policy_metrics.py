"""Exact policy metrics: the solution-space hook, teacher-forced solution probabilities, and where they are logged."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace

import pytest
import torch

from sesa_cli.exact import ExactPolicy, PolicySnapshot
from sesa_cli.rollout.samplers import ParallelSampler
from sesa_cli.runs import RunDir
from sesa_cli.tasks.base import Task
from sesa_cli.tasks.path import PathTask, PathTaskConfig
from sesa_cli.trainer import Trainer
from tests.levels import LEVELS


def test_the_path_task_enumerates_every_leaf_as_its_answer():
    task = PathTask(PathTaskConfig(name="path"), seed=0)
    space = task.solution_space(None)
    assert len(space) == len(set(space)) == 512  # 8 x 8 x 8 leaves by default
    scores = [task.score(None, text) for text in space]
    assert all(text.endswith(task.stop) for text in space)
    assert all(s.key is not None for s in scores)
    assert sum(s.success for s in scores) == 20  # every target is in the space
    assert {s.key for s in scores if s.success} == task.targets


def test_only_the_path_task_enumerates_its_answers():
    # countdown and math answers are open-ended expressions and numbers; the agent tasks answer with whole
    # multi-turn episodes. None of them has a small set of answer texts to score.
    from sesa_cli.tasks import TASKS

    assert {name for name, cls in TASKS.items() if cls.solution_space is not Task.solution_space} == {"path"}


@pytest.mark.numerics
def test_solution_probabilities_match_the_samplers_own_logps(path_setup):
    cfg, task, policy = path_setup
    sampler = ParallelSampler(cfg.sampler, task, policy)
    exact = ExactPolicy(sampler, [None], rows=16)  # several scoring chunks over the 64 test leaves
    (inst,) = exact.snapshot().instances
    probs = inst.probs
    assert probs.shape == (64,)
    assert not probs.flags.writeable  # a snapshot: nothing a later scoring does changes it
    assert 0 < probs.sum() <= 1 + 1e-9  # disjoint answers: their mass is at most 1 (a fresh base's is ~0.5)
    index = {key: i for i, key in enumerate(inst.keys)}
    (group,) = sampler.draw([None], 128, torch.Generator().manual_seed(0))
    checked = 0
    for r in group:
        if r.score.key is not None and r.completion.stopped and r.text == r.score.key + task.stop:
            # the sampler's per-token log-probs of an answer = the exact log-probability of that solution
            assert sum(r.completion.logps) == pytest.approx(math.log(probs[index[r.score.key]]), abs=1e-4)
            checked += 1
    LEVELS["sampled_answers_checked"].check(checked)


def test_a_solution_space_with_an_invalid_answer_is_refused(path_setup):
    cfg, task, policy = path_setup
    broken = copy.copy(task)
    broken.solution_space = lambda inst: ["no/such/path|"]  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="scores invalid"):
        ExactPolicy(ParallelSampler(cfg.sampler, broken, policy), [None])


def test_summary_and_record_follow_the_probabilities(path_setup):
    cfg, task, policy = path_setup
    (scored,) = ExactPolicy(ParallelSampler(cfg.sampler, task, policy), [None]).snapshot().instances
    n = len(scored.keys)
    probs = torch.zeros(n, dtype=torch.float64).numpy()
    targets = [i for i in range(n) if scored.targets[i]]
    other = next(i for i in range(n) if not scored.targets[i])
    probs[targets[0]], probs[other] = 0.6, 0.0005  # one target carries the success; one non-target below 0.001
    probs[targets[1]] = 0.002
    snapshot = PolicySnapshot((replace(scored, probs=probs),))
    summary = snapshot.summary(k=4)
    assert summary["policy/target_mass"] == pytest.approx(0.602)
    assert summary["policy/solutions_above_1pct"] == 1.0
    record = snapshot.record(7)
    assert record["step"] == 7
    (inst,) = record["instances"]
    assert set(inst["probs"]) == set(inst["targets"]) == {scored.keys[i] for i in targets}  # 0.0005 left out
    assert inst["probs"][scored.keys[targets[0]]] == 0.6


def test_training_rows_and_evaluations_carry_the_exact_policy(path_setup, tmp_path):
    cfg, task, policy = path_setup
    cfg = replace(cfg, train=replace(cfg.train, policy_every=2))
    trainer = Trainer(cfg, task, copy.deepcopy(policy), RunDir(tmp_path / "run"))
    assert trainer.monitor.policy  # the collapse monitor reads the exact metric
    row = trainer.train_step()
    assert not any(k.startswith("policy/") for k in row)  # step 1: not a multiple of train.policy_every
    row = trainer.train_step()
    for key in (
        "policy/valid_mass",
        "policy/target_mass",
        "policy/effective_solutions",
        "policy/solutions_above_1pct",
        "policy/solution_entropy",
        f"policy/coverage@{cfg.eval.samples}",
        "time/policy_s",
    ):
        assert key in row, key
    assert not any(k.startswith("train/") for k in row)  # rollout stats are rollout/*, the lr optim/lr
    assert "rollout/entropy" in row
    assert "rollout/distinct_correct" in row
    ev = trainer.evaluate()
    assert ev["policy/target_mass"] == row["policy/target_mass"]  # same weights, scored once
    (line,) = (tmp_path / "run" / "policy_probs.jsonl").read_text().splitlines()
    assert json.loads(line)["step"] == 2


def test_tasks_without_a_solution_space_log_no_policy_metrics(path_setup, tmp_path, monkeypatch):
    cfg, task, policy = path_setup
    monkeypatch.setattr(PathTask, "solution_space", lambda self, inst: None)
    trainer = Trainer(cfg, task, copy.deepcopy(policy), RunDir(tmp_path / "run"))
    assert not trainer.exact.available
    assert not trainer.monitor.policy
    row = trainer.train_step()
    assert not any(k.startswith("policy/") for k in row)
    assert "rollout/distinct_correct" in row
    trainer.evaluate()
    assert not (tmp_path / "run" / "policy_probs.jsonl").exists()


def test_the_live_view_shows_the_latest_policy_metrics_between_measurements():
    from sesa_cli.progress import TrainProgress

    progress = TrainProgress(total=10, enabled=False, log_every=0)

    def info() -> str:
        return progress.info

    progress.update(5, {"rollout/success": 0.5, "policy/target_mass": 0.25, "policy/effective_solutions": 3.0})
    assert "pi success 0.25" in info()
    assert "pi eff.sol 3" in info()
    progress.update(6, {"rollout/success": 0.75})  # not a measured step: the step-5 values stay on screen
    assert "pi success 0.25" in info()
    assert "success 0.75" in info()
