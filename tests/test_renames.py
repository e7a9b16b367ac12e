"""Renamed config keys (issue 18): the old override names keep working for one release with a one-line notice, and
run dirs written before the rename reload and report under the current names."""

from __future__ import annotations

import yaml

from sesa_cli.deprecations import RENAMED_KEYS, rename_overrides, upgrade_config
from tests.conftest import compose_train, run_cli

# an old override per renamed key, with a value that differs from the default, and where it lands now
OLD = {
    "train.eval_samples": ("5", "eval.samples", 5),
    "task.eval_instances": ("3", "eval.instances", 3),
    "eval.n": ("7", "eval.samples", 7),
    "algo.lr": ("0.002", "optim.lr", 0.002),
    "algo.max_grad_norm": ("0.5", "optim.max_grad_norm", 0.5),
    "train.warmup_steps": ("2", "optim.warmup_steps", 2),
    "train.lr_schedule": ("cosine", "optim.lr_schedule", "cosine"),
    "train.weight_decay": ("0.1", "optim.weight_decay", 0.1),
    "sampler.off_policy": ("paper", "algo.off_policy", "paper"),
    "sampler.loss_context": ("conditioned", "algo.loss_context", "conditioned"),
    "sampler.is_clip": ("3.0", "algo.is_clip", 3.0),
    "sampler.train_sketches": ("true", "algo.train_sketches", True),
    "algo.follow_coef": ("0.1", "algo.terms.follow.coef", 0.1),
    "algo.found_coef": ("0.5", "algo.terms.found.coef", 0.5),
    "algo.found_rows": ("all", "algo.terms.found.rows", "all"),
    "algo.dynamic_sampling": ("true", "sampler.filters.dynamic_sampling", True),
    "algo.max_resample_rounds": ("8", "sampler.filters.dynamic_sampling.max_rounds", 8),
    "algo.rollout_filter_ratio": ("0.25", "sampler.filters.rollout_filter.ratio", 0.25),
}


def _at(config: dict, key: str):
    for part in key.split("."):
        config = config[part]
    return config


def test_every_renamed_key_is_covered_here():
    assert set(OLD) == set(RENAMED_KEYS)
    assert {new for _, new, _ in OLD.values()} == set(RENAMED_KEYS.values())


def test_rename_overrides_keeps_prefixes_values_and_sweeps():
    new, notices = rename_overrides(
        [
            "algo.lr=1e-3",
            "+train.eval_samples=8",
            "~algo.max_grad_norm",
            "algo.lr=1e-4,3e-4",
            "algo.kl_coef=0.1",
            "--cfg",
            "job",
            "hydra.run.dir=out/algo.lr=1",
        ]
    )
    assert new == [
        "optim.lr=1e-3",
        "+eval.samples=8",
        "~optim.max_grad_norm",
        "optim.lr=1e-4,3e-4",
        "algo.kl_coef=0.1",
        "--cfg",
        "job",
        "hydra.run.dir=out/algo.lr=1",
    ]
    assert notices == [
        "deprecated: algo.lr -> optim.lr (the old name goes in the next release)",
        "deprecated: train.eval_samples -> eval.samples (the old name goes in the next release)",
        "deprecated: algo.max_grad_norm -> optim.max_grad_norm (the old name goes in the next release)",
    ]  # one notice per old key, however often it is used
    assert rename_overrides(["optim.lr=1e-3"]) == (["optim.lr=1e-3"], [])


def test_every_old_override_still_works_on_the_command_line_with_a_notice(monkeypatch, capsys):
    for old, (value, new, expected) in OLD.items():
        assert run_cli(["train", "--cfg", "job", "task=path", "train.steps=10", f"{old}={value}"], monkeypatch) == 0
        captured = capsys.readouterr()
        composed = yaml.safe_load(captured.out)
        assert _at(composed, new) == expected, old
        assert captured.err.strip().splitlines() == [
            f"sesa train: deprecated: {old} -> {new} (the old name goes in the next release)"
        ]
    # the eval command's own old name, on the eval command
    assert run_cli(["eval", "--cfg", "job", "task=path", "eval.n=4"], monkeypatch) == 0
    captured = capsys.readouterr()
    assert yaml.safe_load(captured.out)["eval"]["samples"] == 4
    assert "sesa eval: deprecated: eval.n -> eval.samples" in captured.err


def test_an_old_runs_config_upgrades_to_the_current_keys():
    old = {
        "task": {"name": "path", "eval_instances": 4},
        "algo": {"name": "grpo", "lr": 3e-4, "max_grad_norm": 0.5},
        "train": {"steps": 80, "eval_samples": 16, "warmup_steps": 2, "lr_schedule": "linear", "weight_decay": 0.0},
    }
    new = upgrade_config(old)
    assert new["task"] == {"name": "path"}
    assert new["algo"] == {"name": "grpo"}
    assert new["train"] == {"steps": 80}
    assert new["eval"] == {"samples": 16, "instances": 4}
    assert new["optim"] == {
        "lr": 3e-4,
        "max_grad_norm": 0.5,
        "warmup_steps": 2,
        "lr_schedule": "linear",
        "weight_decay": 0.0,
    }
    assert old["algo"]["lr"] == 3e-4  # the caller's dict is left as it was
    # a current key already present wins over the old one
    assert upgrade_config({"algo": {"lr": 1.0}, "optim": {"lr": 2.0}})["optim"]["lr"] == 2.0
    # issue 28: the off-policy strategy moved from the sampler to the loss's settings
    moved = upgrade_config({"sampler": {"name": "sequential", "off_policy": "paper"}, "algo": {"name": "grpo"}})
    assert moved["sampler"] == {"name": "sequential"}
    assert moved["algo"] == {"name": "grpo", "off_policy": "paper"}


def test_an_old_runs_loss_terms_and_filters_keep_their_meaning():
    """The loss settings moved to ``algo``, the terms into ``algo.terms``, the group filters into
    ``sampler.filters``: an old run's values land there with the meaning they had (a filter that was off stays off,
    with its settings dropped; a coefficient of 0 leaves its term off)."""
    old = {
        "sampler": {"name": "sequential", "loss_context": "is", "is_clip": 3.0, "train_sketches": True},
        "algo": {"name": "grpo", "follow_coef": 0.0, "found_coef": 0.2, "found_rows": "all",
                 "dynamic_sampling": False, "max_resample_rounds": 4, "rollout_filter_ratio": 1.0},
    }  # fmt: skip
    new = upgrade_config(old)
    assert new["sampler"] == {"name": "sequential"}  # both filters were off: no entry, as in a run written since
    assert new["algo"] == {"name": "grpo", "loss_context": "is", "is_clip": 3.0, "train_sketches": True,
                           "terms": {"found": {"coef": 0.2, "rows": "all"}}}  # fmt: skip
    from sesa_cli.rollout.filters import build_filters
    from sesa_cli.terms import term_settings

    assert list(term_settings(new["algo"]["terms"])) == ["found"]
    # a filter that was on keeps its settings
    ragen = upgrade_config(
        {"algo": {"rollout_filter_ratio": 0.25, "dynamic_sampling": False, "max_resample_rounds": 4}}
    )
    assert ragen["sampler"] == {"filters": {"rollout_filter": {"ratio": 0.25}}}
    dapo = upgrade_config({"algo": {"name": "dapo", "dynamic_sampling": True, "max_resample_rounds": 8}})
    assert dapo["sampler"] == {"filters": {"dynamic_sampling": {"max_rounds": 8}}}
    assert [f.max_rounds for f in build_filters(dapo["sampler"]["filters"])] == [8]


def test_revive_and_eval_reload_a_parent_config_with_old_keys(tmp_path):
    from dataclasses import asdict

    from sesa_cli.commands.reload import reload_config

    current = asdict(compose_train(["task=path", "optim.lr=3e-4", "eval.samples=16", "eval.instances=4"]))
    old = {
        **current,
        "algo": {**current["algo"], "lr": 3e-4},
        "train": {**current["train"], "eval_samples": 16},
        "task": {**current["task"], "eval_instances": 4},
    }
    del old["optim"], old["eval"]
    parent = tmp_path / "config.yaml"
    parent.write_text(yaml.safe_dump(old))
    revived = reload_config("revive", parent, ["ckpt=unused", "sampler=sequential"])
    assert (revived.optim.lr, revived.eval.samples, revived.eval.instances) == (3e-4, 16, 4)
    assert revived.sampler.name == "sequential"
    evaluated = reload_config("eval", parent, [])
    assert evaluated.task.name == "path"
    assert (evaluated.eval.samples, evaluated.eval.instances) == (16, 4)  # the run's own evaluation protocol
