"""The one table of metric keys (sesa_cli.metric_keys): everything the trainer and evaluation write is declared in
it, renamed keys point at declared ones, and docs/metrics.md is generated from it."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest

from sesa_cli import metric_keys
from sesa_cli.metric_keys import METRIC_KEYS, RENAMED, family, find, key, label, undeclared

DOCS = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"

# One training step (and the evaluation after it) of each configuration emits between them every key a training run
# can write on the path task: the off-policy variants, importance weights, KL and entropy terms, DAPO's resampling,
# the rollout filter, both covariance losses, both stage-1 forms.
CONFIGS = {
    "parallel": ({"name": "parallel"}, {}),
    "sketch-is-kl-entropy": (
        {"name": "sequential", "stage1": "sketch"},
        {"kl_coef": 0.05, "entropy_coef": 0.01, "loss_context": "is", "train_sketches": True},
    ),
    "solution-weight-negatives-clip-cov": (
        {"name": "sequential", "stage1": "solution"},
        {"loss": "clip_cov", "off_policy": "weight_negatives"},
    ),
    "baseline-dapo-filter-kl-cov": (
        {"name": "sequential", "stage1": "solution", "filters": {"dynamic_sampling": True, "rollout_filter": 0.5}},
        {"off_policy": "on_policy_baseline", "loss": "kl_cov", "minibatches": 2},
    ),
}


def _rows(setup, tmp_path: Path, sampler: dict, algo: dict) -> list[dict]:
    from sesa_cli.runs import RunDir
    from sesa_cli.trainer import Trainer

    cfg, task, policy = setup
    cfg = replace(cfg, sampler=replace(cfg.sampler, **sampler), algo=replace(cfg.algo, **algo))
    cfg = replace(cfg, train=replace(cfg.train, policy_every=1), eval=replace(cfg.eval, samples=4))
    trainer = Trainer(cfg, task, copy.deepcopy(policy), RunDir(tmp_path))
    return [trainer.train_step(), trainer.evaluate()]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_key_a_training_run_writes_is_declared(path_setup, tmp_path, name):
    rows = _rows(path_setup, tmp_path, *CONFIGS[name])
    keys = {k for row in rows for k in row}
    assert undeclared(keys) == []
    assert {"rollout/success", "eval/success", "loss/total", "optim/lr", "optim/grad_norm"} <= keys


def test_an_agent_run_writes_declared_keys_too(frozenlake_setup, tmp_path):
    rows = _rows(frozenlake_setup, tmp_path, {"name": "parallel"}, {})
    keys = {k for row in rows for k in row}
    assert undeclared(keys) == []
    assert {"rollout/turns", "eval/turns"} <= keys


def test_the_table_is_one_name_per_key():
    patterns = [entry.pattern for entry in METRIC_KEYS]
    assert len(patterns) == len(set(patterns))
    assert find("eval/pass@16") is find("eval/pass@1") is not None
    assert find("eval/pass@") is None
    assert find("eval/pass@x") is None
    assert key("eval/pass@{k}", k=16) == "eval/pass@16"
    assert family("eval/pass@{k}") == "eval/pass"
    assert label("rollout/distinct_correct") == "dc/grp"
    with pytest.raises(KeyError, match="not declared"):
        key("eval/reward")
    with pytest.raises(KeyError, match="no live label"):
        label("eval/success")
    with pytest.raises(KeyError, match="not an @"):
        family("eval/success")
    assert all(entry.meaning.endswith(".") for entry in METRIC_KEYS)


def test_every_renamed_key_points_at_a_declared_one_and_no_old_name_is_declared():
    assert undeclared(RENAMED.values()) == []
    assert [old for old in RENAMED if find(old) is not None] == []
    # issue 18: one name per concept
    assert RENAMED["is/weight_mean"] == "loss/is_weight_mean"
    assert RENAMED["loss/loss"] == "loss/total"
    assert RENAMED["train/lr"] == "optim/lr"
    assert RENAMED["eval/n"] == "eval/samples"
    assert metric_keys.current_name("train/entropy") == "rollout/entropy"
    assert metric_keys.current_name("rollout/entropy") == "rollout/entropy"


def test_docs_metrics_page_is_generated_from_the_table():
    from sesa_cli import metrics_page

    assert DOCS.read_text() == metrics_page.markdown(), "regenerate: python -m sesa_cli.metrics_page > docs/metrics.md"
    for entry in METRIC_KEYS:
        assert f"`{entry.pattern}`" in DOCS.read_text()
    for entry, _ in metric_keys.declared():  # the methods' own keys, sesa's registered ones at least
        assert f"`{entry.pattern}`" in DOCS.read_text()
    assert {"loss/clip_cov_frac", "loss/forking_frac", "loss/found_nll"} <= {
        e.pattern for e, _ in metric_keys.declared()
    }


def test_a_plug_in_declares_its_metrics_by_registering():
    from sesa_cli.losses import POLICY_LOSSES, PolicyLoss
    from sesa_cli.metric_keys import MetricKey

    class Probe(PolicyLoss):
        metrics = (MetricKey("loss/probe_frac", "A probe's share of tokens."),)

    assert find("loss/probe_frac") is None
    POLICY_LOSSES.register("probe")(Probe)
    try:
        assert find("loss/probe_frac") is Probe.metrics[0]
        assert undeclared(["loss/probe_frac", "loss/total"]) == []
        with pytest.raises(ValueError, match="already declared"):  # one name per concept
            POLICY_LOSSES.register("probe_again")(type("Again", (PolicyLoss,), {"metrics": Probe.metrics}))
    finally:
        POLICY_LOSSES.pop("probe", None)
        POLICY_LOSSES.pop("probe_again", None)
