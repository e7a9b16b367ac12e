"""One training step of every sampler x algo combination on the tiny model, and DAPO's dynamic sampling."""

from __future__ import annotations

import copy
import math

import pytest

from sesa_cli.config import conf_dir, plugin_name
from sesa_cli.runs import RunDir
from sesa_cli.tasks.base import make_task
from sesa_cli.trainer import Trainer
from tests.conftest import compose_train

ALGOS = sorted(p.stem for p in (conf_dir() / "algo").glob("*.yaml"))
SAMPLERS = [
    ["sampler=parallel"],
    ["sampler=sequential", "sampler.stage1=solution"],
    ["sampler=sequential", "sampler.stage1=sketch", "sampler.solutions_per_sketch=2"],
]
SMALL = ["train.batch_size=2", "sampler.group_size=4", "task.num_targets=32"]


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("sampler", SAMPLERS, ids=["parallel", "sequential-solution", "sequential-sketch"])
def test_one_step_of_every_sampler_and_algo(path_setup, tiny_overrides, tmp_path, algo, sampler):
    _, _, policy = path_setup
    cfg = compose_train([*tiny_overrides, *SMALL, *sampler, f"algo={algo}", "algo.minibatches=2"])
    trainer = Trainer(cfg, make_task(cfg.task, cfg.seed), copy.deepcopy(policy), RunDir(tmp_path))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    learned: list[list[list[float]]] = []  # the rewards of the groups the learner was given
    step = trainer.learner.step
    trainer.learner.step = lambda groups, n: (learned.append([[r.score.reward for r in g] for g in groups]),
                                              step(groups, n))[1]  # fmt: skip
    row = trainer.train_step()
    assert row["step"] == 1
    moved = any(not (a == b).all() for a, b in zip(before, trainer.model.parameters(), strict=True))
    assert moved or not any(_signal(cfg.algo, rewards) for rewards in learned[0])  # no update only without a signal
    if row["optim/no_signal"]:  # no advantage and no term's rows: no step, no loss (sesa_cli.learner)
        assert not moved
        assert "loss/total" not in row
    else:
        assert math.isfinite(row["loss/total"])


def _signal(algo, rewards: list[float]) -> bool:
    """Whether an advantage estimator gives one group a nonzero advantage (its rewards, the group's rows): GRPO and
    the others when the rewards differ; pass@k (2508.10751) when some k-subset misses every best row (more than k
    rows below the maximum); PKPO (2505.15201) when some row is the sole best of a k-subset (k - 1 rows below it);
    verl's grpo_passk when the maximum is one row's alone."""
    if len(set(rewards)) < 2:
        return False
    best, name, k = max(rewards), plugin_name(algo.advantage), algo.advantage.get("k", 4)
    if name == "passk":
        return sum(r < best for r in rewards) >= k
    if name == "pkpo":
        return any(sum(r < x for r in rewards) >= k - 1 for x in rewards)
    if name == "grpo_passk":
        return rewards.count(best) == 1
    return True


@pytest.mark.parametrize("cap", [0, 3])
def test_dapo_dynamic_sampling_keeps_the_batch_size(path_setup, tiny_overrides, tmp_path, cap):
    _, _, policy = path_setup
    cfg = compose_train(
        [
            *tiny_overrides,
            "algo=dapo",
            "sampler=parallel",
            "train.batch_size=4",
            "sampler.group_size=4",
            f"sampler.filters.dynamic_sampling.max_rounds={cap}",
        ]
    )
    trainer = Trainer(cfg, make_task(cfg.task, cfg.seed), copy.deepcopy(policy), RunDir(tmp_path))
    for _ in range(3):
        groups, rounds = trainer._draw_batch()
        assert len(groups) == 4
        assert all(len(g) == 4 for g in groups)
        assert len({id(g) for g in groups}) == 4  # no group counted twice when the cap fills the batch
        assert 0 <= rounds <= cap
    row = trainer.train_step()
    assert "train/resample_rounds" in row


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_to_the_reference_policy(path_setup, tiny_overrides, tmp_path, estimator):
    _, _, policy = path_setup
    cfg = compose_train(
        # half the leaves targets: a group's rewards differ however well the base writes valid paths, so the first
        # batch has something to learn and moves the policy (with every leaf a target the reward was validity, which
        # a base that writes only valid paths, as under ATEN_CPU_CAPABILITY=default, left nothing to learn: issue 49)
        [
            *tiny_overrides,
            *SMALL,
            "sampler=parallel",
            "algo.kl_coef=0.1",
            f"algo.kl_estimator={estimator}",
            "task.num_targets=32",
        ]
    )
    trainer = Trainer(cfg, make_task(cfg.task, cfg.seed), copy.deepcopy(policy), RunDir(tmp_path))
    assert trainer.learner.ref_model is not None
    first = trainer.train_step()
    second = trainer.train_step()
    assert first["loss/kl"] == pytest.approx(0.0, abs=1e-6)  # the first update starts at the reference
    assert math.isfinite(second["loss/kl"])
    assert second["loss/kl"] != 0.0
