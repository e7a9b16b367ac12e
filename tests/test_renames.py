"""Renamed config keys (issue 18): the old override names keep working for one release with a one-line notice, and
run dirs written before the rename reload and report under the current names."""

from __future__ import annotations

import yaml

from sesa_cli.deprecations import METHOD_KEYS, RENAMED_KEYS, rename_overrides, upgrade_config
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
    # a method's own settings: under its key, on a run that chooses it (CONTEXT)
    "algo.passk_k": ("2", "algo.advantage.k", 2),
    "algo.top_entropy_quantile": ("0.5", "algo.loss.rho", 0.5),
    "algo.clip_cov_ratio": ("0.05", "algo.loss.ratio", 0.05),
    "algo.clip_cov_lb": ("0.5", "algo.loss.cov_min", 0.5),
    "algo.clip_cov_ub": ("4.0", "algo.loss.cov_max", 4.0),
    "algo.kl_cov_ratio": ("0.05", "algo.loss.ratio", 0.05),
    "algo.kl_cov_coef": ("2.0", "algo.loss.penalty", 2.0),
    "algo.terms.unlikeliness.coef": ("0.0625", "algo.terms.unlikeliness.beta", 0.0625),
    "algo.terms.outcome_ucb.coef": ("0.125", "algo.terms.outcome_ucb.bonus", 0.125),
    "algo.terms.outcome_batch.coef": ("0.125", "algo.terms.outcome_batch.penalty", 0.125),
}
CONTEXT = {
    "algo.passk_k": "algo=passk",
    "algo.top_entropy_quantile": "algo=forking_tokens",
    "algo.clip_cov_ratio": "algo=clip_cov",
    "algo.clip_cov_lb": "algo=clip_cov",
    "algo.clip_cov_ub": "algo=clip_cov",
    "algo.kl_cov_ratio": "algo=kl_cov",
    "algo.kl_cov_coef": "algo=kl_cov",
    "algo.terms.unlikeliness.coef": "algo=unlikeliness",
    "algo.terms.outcome_ucb.coef": "algo=outcome_bonus",
    "algo.terms.outcome_batch.coef": "algo=outcome_bonus",
}
"""The algo option an old key of a method's settings is given with (the method that has the setting)."""


def _at(config: dict, key: str):
    for part in key.split("."):
        config = config[part]
    return config


def test_every_renamed_key_is_covered_here():
    assert set(OLD) == set(RENAMED_KEYS)
    assert {new for _, new, _ in OLD.values()} == set(RENAMED_KEYS.values())
    assert set(CONTEXT) == set(METHOD_KEYS) | {k for k in RENAMED_KEYS if k.startswith("algo.terms.")}


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
        context = [CONTEXT[old]] if old in CONTEXT else []
        argv = ["train", "--cfg", "job", "task=path", "train.steps=10", *context, f"{old}={value}"]
        assert run_cli(argv, monkeypatch) == 0
        captured = capsys.readouterr()
        composed = yaml.safe_load(captured.out)
        assert _at(composed, new) == expected, old
        assert captured.err.strip().splitlines() == [
            f"sesa train: deprecated: {old} -> {new} (the old name goes in the next release)"
        ]
    # a method's old setting given to a run of another method is refused, naming the chosen method's settings
    assert run_cli(["train", "--cfg", "job", "task=path", "algo=grpo", "algo.passk_k=2"], monkeypatch) == 2
    assert "algo.advantage.k is not a setting; valid: none" in capsys.readouterr().err
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
    # the off-policy strategy moved from the sampler to the loss's settings
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


def test_a_bare_method_name_on_the_command_line_is_its_name_setting():
    new, notices = rename_overrides(["algo.advantage=passk", "algo.loss=ppo_clip,clip_cov", "+algo.advantage=maxrl",
                                     "algo.advantage.k=2", "algo.advantage={name: pkpo, k: 2}"])  # fmt: skip
    assert new == ["algo.advantage.name=passk", "algo.loss.name=ppo_clip,clip_cov", "+algo.advantage.name=maxrl",
                   "algo.advantage.k=2", "algo.advantage={name: pkpo, k: 2}"]  # fmt: skip
    assert notices == []  # the short form stays
    cfg = compose_train(rename_overrides(["task=path", "algo.advantage=passk", "algo.advantage.k=2"])[0])
    assert cfg.algo.advantage == {"name": "passk", "k": 2}


def test_an_old_runs_method_settings_move_to_the_method_it_chose():
    """A run written before the methods' settings moved holds every one of them, whatever its method: only the
    chosen method's move (into its mapping), the others go; the bonus terms' coef is their own scale."""
    central = {"passk_k": 2, "top_entropy_quantile": 0.2, "clip_cov_ratio": 0.05, "clip_cov_lb": 1.0,
               "clip_cov_ub": 5.0, "kl_cov_ratio": 0.002, "kl_cov_coef": 1.0}  # fmt: skip
    old = {"algo": {"name": "passk", "advantage": "passk", "loss": "clip_cov", **central,
                    "terms": {"unlikeliness": {"coef": 0.25, "negatives": "keep"}, "outcome_ucb": 0.5}}}  # fmt: skip
    new = upgrade_config(old)
    assert new["algo"] == {
        "name": "passk",
        "advantage": {"name": "passk", "k": 2},
        "loss": {"name": "clip_cov", "ratio": 0.05, "cov_min": 1.0, "cov_max": 5.0},
        "terms": {"unlikeliness": {"beta": 0.25, "negatives": "keep"}, "outcome_ucb": 0.5},
    }
    plain = upgrade_config({"algo": {"name": "grpo", "advantage": "grpo", "loss": "ppo_clip", **central}})
    assert plain["algo"] == {"name": "grpo", "advantage": {"name": "grpo"}, "loss": {"name": "ppo_clip"}}
    from sesa_cli.config import AlgoConfig
    from sesa_cli.methods import KINDS
    from sesa_cli.registry import named_settings
    from sesa_cli.terms import term_settings

    algo = AlgoConfig(**new["algo"])
    assert named_settings(KINDS["algo.advantage"], algo.advantage, "algo.advantage")[1].k == 2
    assert named_settings(KINDS["algo.loss"], algo.loss, "algo.loss")[1].ratio == 0.05
    assert term_settings(algo.terms)["unlikeliness"].beta == 0.25


def test_a_revival_that_chooses_another_method_drops_the_parents_settings_of_the_old_one(tmp_path):
    from dataclasses import asdict

    from sesa_cli.commands.reload import reload_config

    parent = tmp_path / "config.yaml"
    parent.write_text(yaml.safe_dump(asdict(compose_train(["task=path", "algo=passk", "algo.advantage.k=2"]))))
    assert reload_config("revive", parent, ["ckpt=unused"]).algo.advantage == {"name": "passk", "k": 2}
    assert reload_config("revive", parent, ["ckpt=unused", "algo=grpo"]).algo.advantage == {"name": "grpo"}
    chosen = reload_config("revive", parent, ["ckpt=unused", "algo.advantage.name=pkpo", "algo.advantage.k=3"])
    assert chosen.algo.advantage == {"name": "pkpo", "k": 3}
    kept = reload_config("revive", parent, ["ckpt=unused", "algo.advantage.name=passk"])
    assert kept.algo.advantage == {"name": "passk", "k": 2}  # the same method: its settings carry over
