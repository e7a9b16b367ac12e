"""The `sesa` CLI in-process: help, bad input (one line, exit 2), and tiny end-to-end runs of every built command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli


def test_help_lists_every_command(monkeypatch, capsys):
    assert run_cli(["--help"], monkeypatch) == 0
    out = capsys.readouterr().out
    for name in ("train", "eval", "revive", "diversity-report"):
        assert name in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["trian"], "unknown command 'trian' (did you mean 'train'?)"),
        (["train", "sampler=nope"], "sampler=nope is not a sampler option; choose one of: lte, parallel, sequential"),
        (["train", "task.foo=1"], "unknown key 'task.foo'; valid keys under 'task': "),
        (["train", "train.steps=abc"], "train.steps: Value 'abc' of type 'str' could not be converted to Integer"),
        (["train", "sampler.stage1=x"], "sampler.stage1='x' is not valid; choose one of: auto, sketch, solution"),
        (["train", "-m", "sampler=parallel,nope"], "sampler=nope is not a sampler option"),
        (["train", "sampler.group_size=1"], "sampler.group_size must be >= 2"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(monkeypatch, capsys, argv, expected):
    assert run_cli(argv, monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert expected in err[-1]
    assert not any("Traceback" in line for line in err)


@pytest.mark.parametrize(
    ("command", "argv", "expected"),
    [
        (
            "train",
            ["algo.advantage=nope"],
            "unknown algo.advantage 'nope'; valid: darling, dr_grpo, grpo, grpo_passk, maxrl, passk, pkpo, rloo, w_reinforce",
        ),
        ("train", ["algo.loss=nope"], "unknown algo.loss 'nope'; valid: "),
        ("train", ["algo.aggregation=nope"], "unknown algo.aggregation 'nope'; valid: "),
        ("train", ["algo.off_policy=nope"], "unknown algo.off_policy 'nope'; valid: "),
        ("train", ["logger=[nope]"], "unknown logger 'nope'; valid: "),
        ("train", ["-m", "algo.advantage=grpo,nope"], "unknown algo.advantage 'nope'"),
        ("train", ["algo=passk", "algo.advantage.kk=4"], "algo.advantage.kk is not a setting; valid: k"),
        ("train", ["algo=forking_tokens", "algo.loss.rho=2"], "algo.loss.rho=2.0 must be in (0, 1]"),
        ("train", ["algo=passk", "algo.advantage.k=9"], "algo.advantage.k=9 must be <= the rollouts of a group"),
        ("train", ["algo=pkpo", "algo.off_policy=on_policy_baseline", "sampler=sequential"], "on_policy_baseline"),
        (
            "train",
            ["algo.terms.unlikeliness.betta=0.2"],
            "algo.terms.unlikeliness.betta is not a setting; valid: beta",
        ),
        ("train", ["task=math", "task.data=no/such.jsonl"], "math data file 'no/such.jsonl' not found"),
        ("eval", ["task=math", "task.data=no/such.jsonl"], "math data file 'no/such.jsonl' not found"),
    ],
)
def test_a_bad_registry_name_or_task_option_is_refused_before_any_model_work(
    command, argv, expected, monkeypatch, capsys, tmp_path
):
    """Issue 49: ``algo.advantage=nope`` loaded the model and ran the step-0 evaluation before its error, leaving a
    failed run dir. Every registry name and task option is checked with the overrides: one line, exit 2, no run
    dir, and the model is never loaded."""
    from sesa_cli.models import loading

    def no_model_work(*args, **kwargs):
        raise AssertionError("model work started before the overrides were checked")

    monkeypatch.setattr(loading, "load_base", no_model_work)
    out = tmp_path / "out"
    key = "hydra.sweep.dir" if "-m" in argv else "hydra.run.dir"
    assert run_cli([command, *argv, f"{key}={out}"], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"sesa {command}: error: ")
    assert expected in err[0]
    assert not out.exists()


def test_cfg_job_passes_through_to_hydra(monkeypatch, capsys):
    assert run_cli(["train", "--cfg", "job", "task=path", "sampler=parallel", "seed=7"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert "name: parallel" in out
    assert "seed: 7" in out
    assert "target_seed: ${seed}" in out


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


SMALL = ["train.batch_size=2", "sampler.group_size=4", "eval.samples=8", "train.sample_every=2"]


def test_train_end_to_end_writes_the_run_dir(monkeypatch, tmp_path, tiny_overrides):
    run_dir = tmp_path / "run"
    argv = [
        "train",
        *tiny_overrides,
        *SMALL,
        "train.steps=3",
        "train.checkpoint_every=2",
        "train.eval_every=2",
        f"hydra.run.dir={run_dir}",
    ]
    assert run_cli(argv, monkeypatch) == 0
    for name in ("config.yaml", "run.json", "metrics.jsonl", "metrics.csv", "samples/step_000002.jsonl"):
        assert (run_dir / name).is_file(), name
    rows = _read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows if "rollout/reward_mean" in r] == [1, 2, 3]
    assert [r["step"] for r in rows if "eval/success" in r] == [0, 2, 3]  # eval_before: the base at step 0
    assert {"eval/pass@1", "eval/pass@8", "eval/coverage@8", "eval/distinct_correct@8"} <= set(rows[-1])
    for step in (2, 3):
        ckpt = run_dir / "checkpoints" / f"step_{step:06d}"
        for name in ("model.safetensors", "config.json", "tokenizer.json", "optimizer.pt", "trainer_state.json"):
            assert (ckpt / name).is_file(), (step, name)
    assert json.loads((run_dir / "checkpoints/step_000003/trainer_state.json").read_text())["step"] == 3
    assert "sampler:" in (run_dir / "config.yaml").read_text()


def test_multirun_sweep_then_diversity_report(monkeypatch, tmp_path, tiny_overrides, capsys):
    sweep = tmp_path / "sweep"
    argv = [
        "train",
        "-m",
        *tiny_overrides,
        *SMALL,
        "sampler=parallel,sequential",
        "train.steps=2",
        "train.eval_every=0",
        f"hydra.sweep.dir={sweep}",
    ]
    assert run_cli(argv, monkeypatch) == 0
    out = capsys.readouterr().out
    # issue 53: the sequential job does not suggest launching its parallel baseline, which the sweep ran; the
    # sweep's ending names the report over both
    assert "# its parallel baseline" not in out
    assert f"report:    sesa diversity-report 'runs=[{sweep}]'" in out
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert [p.name for p in jobs] == ["0", "1"]
    for job in jobs:
        assert (job / "checkpoints" / "step_000002" / "trainer_state.json").is_file()
    out = tmp_path / "report"
    assert run_cli(["diversity-report", f"runs=[{sweep}]", f"hydra.run.dir={out}"], monkeypatch) == 0
    for name in (
        "summary.csv",
        "groups.csv",
        "compare.csv",
        "report.md",
        "report.html",
        "sampling.png",
        "policy.png",
        "heatmap.png",
    ):
        assert (out / name).is_file(), name
    assert "sampler=sequential" in (out / "summary.csv").read_text()


def test_frozenlake_train_both_samplers_then_eval(monkeypatch, tmp_path, capsys, cache_dir, frozenlake_setup):
    """The default task end to end: multi-turn episodes through the CLI with each sampler, then sesa eval. Two steps
    from a near-uniform base: the exact walk cuts most of the policy's mass (32 branches over ~20^5 episodes), and
    every table says so (issue 66)."""
    from tests.conftest import FROZENLAKE

    sweep = tmp_path / "sweep"
    argv = [
        "train",
        "-m",
        *FROZENLAKE,
        f"model.cache_dir={cache_dir}",
        *SMALL,
        "sampler=parallel,sequential",
        "sampler.parallel_rows=2",  # the recipe's 4 of G = 8 rows, scaled to SMALL's G = 4
        "train.steps=2",
        "train.eval_every=0",
        "eval.instances=2",
        f"hydra.sweep.dir={sweep}",
    ]
    assert run_cli(argv, monkeypatch) == 0
    printed = capsys.readouterr().out
    assert "policy/pruned_mass" in printed
    assert "the exact walk cut" in printed
    assert "(fails: untestable)" in printed
    for job in ("0", "1"):
        rows = _read_jsonl(sweep / job / "metrics.jsonl")
        assert [r["step"] for r in rows if "rollout/reward_mean" in r] == [1, 2]
        assert rows[-1]["eval/valid"] >= 0.0
        # episode length in turns, for the report's agent plot
        assert 1 <= rows[-1]["eval/turns"] <= 10
        assert all(1 <= r["rollout/turns"] <= 10 for r in rows if "rollout/turns" in r)
        dump = _read_jsonl(sweep / job / "samples" / "step_000002.jsonl")
        # compact FrozenLake turn layout: a map, then ":" (a plain prompt) or "!<plan>:" (stage II's solve prompt)
        assert all(r["context"].endswith(":") and "_" in r["context"] for r in dump)
    out = tmp_path / "eval"
    argv = ["eval", f"ckpt={sweep / '1'}", "eval.samples=4", "eval.instances=2", f"hydra.run.dir={out}"]
    assert run_cli(argv, monkeypatch) == 0
    samples = _read_jsonl(out / "samples.jsonl")
    assert len(samples) == 8
    # a key is what the episode did: the moves of its route, or "stay" for one that never left its cell
    assert all(
        s["key"] in (None, "stay") or set(s["key"].split(",")) <= {"Left", "Down", "Right", "Up"} for s in samples
    )
    printed = capsys.readouterr().out
    assert "policy/pruned_mass" in printed
    assert "the exact walk cut" in printed
    counts = _read_jsonl(out / "eval_counts.jsonl")
    assert [len(c["correct"]) for c in counts] == [2]
    assert counts[0]["samples"] == [4, 4]


def test_a_sequential_run_names_its_parallel_baseline_and_the_report(monkeypatch, tmp_path, capsys, cache_dir,
                                                                     frozenlake_setup):  # fmt: skip
    """The ending of a sequential sesa train: the same settings with sampler=parallel into <run dir>-parallel, then
    the report over both; both commands run as printed."""
    import shlex

    from tests.conftest import FROZENLAKE

    seq = tmp_path / "seq run"
    argv = ["train", *FROZENLAKE, f"model.cache_dir={cache_dir}", *SMALL, "train.steps=1", "train.eval_every=0",
            "eval.instances=2", "algo.train_sketches=true", "sampler.parallel_rows=2", f"hydra.run.dir={seq}"]  # fmt: skip
    assert run_cli(argv, monkeypatch) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    # issue 67: the settings sampler=parallel reads are kept; the sequential-only ones are named, not dropped silently
    at = lines.index("# its parallel baseline: the same settings with sampler=parallel (without algo.train_sketches=true "
                     "sampler.parallel_rows=2: sampler=parallel does not read them)")  # fmt: skip
    train, report = lines[at + 1], lines[at + 3]
    assert lines[at + 2] == "# then compare the two runs"
    words = shlex.split(train)[2:]
    assert "sampler=parallel" in words
    assert "sampler.group_size=4" in words
    assert not any(w.startswith(("sampler.parallel_rows", "algo.train_sketches")) for w in words)
    assert f"model.cache_dir={cache_dir}" in words
    assert run_cli(["train", *words], monkeypatch) == 0
    parallel = Path(f"{seq}-parallel")
    assert (parallel / "metrics.jsonl").is_file()
    assert "parallel" in (parallel / "config.yaml").read_text()
    assert run_cli(["diversity-report", *shlex.split(report)[2:], f"hydra.run.dir={tmp_path / 'report'}"],
                   monkeypatch) == 0  # fmt: skip
    assert (tmp_path / "report" / "groups.csv").is_file()
    # a parallel run's ending names no baseline
    assert "# its parallel baseline" not in capsys.readouterr().out


def test_the_parallel_baseline_keeps_every_setting_parallel_sampling_reads(tmp_path):
    """Issue 67 case 11: the baseline the ending prints for ``sesa train sampler.group_size=6 sampler.temperature=0.7
    ...`` composes to group size 6 and temperature 0.7 under sampler=parallel (it once ran at 8 and 1.0), keeps a
    batch filter and every other group's setting, and names the sequential-only settings it leaves out."""
    import shlex

    from sesa_cli.commands.compose import compose
    from sesa_cli.commands.ending import parallel_baseline
    from sesa_cli.commands.validate import validate_argv
    from sesa_cli.config import to_object

    overrides = ["task=path", "sampler.group_size=6", "sampler.temperature=0.7", "sampler.stage1=solution",
                 "+sampler.filters.reward_variance.top_p=0.5", "algo.is_clip=3", "train.steps=7",
                 "hydra.run.dir=elsewhere"]  # fmt: skip
    train, report, dropped = parallel_baseline(tmp_path / "run", overrides)
    words = shlex.split(train)[2:]
    assert dropped == ["sampler.stage1=solution", "algo.is_clip=3"]
    assert validate_argv("train", words) is None  # it runs as printed (sequential-only keys would be refused)
    args = [w for w in words if not w.startswith("hydra.")]
    cfg = to_object(compose("train", args))
    assert (cfg.sampler.name, cfg.sampler.group_size, cfg.sampler.temperature) == ("parallel", 6, 0.7)
    assert dict(cfg.sampler.filters) == {"reward_variance": {"top_p": 0.5}}
    assert (cfg.task.name, cfg.train.steps) == ("path", 7)
    assert f"hydra.run.dir={tmp_path / 'run'}-parallel" in words
    assert shlex.split(report)[2] == f"runs=[{tmp_path / 'run'},{tmp_path / 'run'}-parallel]"


def test_a_recipes_setting_that_a_size_no_longer_fits_names_the_recipe(monkeypatch, capsys):
    # issue 67 case 12: the default run's recipe sets sampler.parallel_rows=4 (half of 8); with sampler.group_size=4
    # the refusal says so and what to add, and what it suggests runs
    from sesa_cli.commands.validate import validate_argv

    assert run_cli(["train", "sampler.group_size=4"], monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "sesa train: error: sampler.parallel_rows=4 must be in [0, sampler.group_size - 1] = [0, 3]: at least one row "
        "of a group is sequential; sampler.parallel_rows=4 is set by the recipe task_model/train=frozenlake_tiny: add "
        "sampler.parallel_rows=N with N in [0, 3] to the command line, e.g. sampler.parallel_rows=2"
    )
    assert validate_argv("train", ["sampler.group_size=4", "sampler.parallel_rows=2"]) is None
    # a value typed on the command line is the user's own: no recipe is named
    assert run_cli(["train", "sampler.group_size=4", "sampler.parallel_rows=4"], monkeypatch) == 2
    assert "set by the recipe" not in capsys.readouterr().err


def test_a_number_too_long_to_read_in_a_config_file_names_the_file_and_key(monkeypatch, capsys, tmp_path):
    # issue 67 case 10: a 10 MB integer in a recipe said Python's int limit, naming no file or key
    recipe = tmp_path / "mine" / "experiment" / "big.yaml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text("# @package _global_\ntrain:\n  steps: " + "9" * 10_000_000 + "\n")
    assert run_cli(["train", "--config-dir", str(tmp_path / "mine"), "experiment=big"], monkeypatch) == 2
    assert capsys.readouterr().err.strip() == (
        f"sesa train: error: {recipe}: train.steps is a number of 10,000,000 digits, longer than can be read (at "
        "most 4,300)"
    )


def test_config_dir_adds_a_config_dir_as_hydra_documents_it(monkeypatch, capsys, tmp_path):
    # issue 50 case 10: `--config-dir DIR` was refused ("experiment=small is not a experiment option") because sesa's
    # own compositions (the validation, the run dir) did not see it; it is the hydra.searchpath entry it stands for
    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "small.yaml").write_text("# @package _global_\ntrain:\n  steps: 7\n")
    for flags in (["--config-dir", str(tmp_path / "mine")], [f"--config-dir={tmp_path / 'mine'}"],
                  ["-cd", str(tmp_path / "mine"), "hydra.searchpath=[pkg://sesa_cli]"]):  # fmt: skip
        capsys.readouterr()
        assert run_cli(["train", *flags, "experiment=small", "task=path", "--cfg", "job"], monkeypatch) == 0
        assert "\ntrain:\n  steps: 7\n" in capsys.readouterr().out
    assert run_cli(["train", "--config-dir", str(tmp_path / "nope"), "experiment=small"], monkeypatch) == 2
    assert capsys.readouterr().err.strip() == f"sesa train: error: --config-dir {tmp_path / 'nope'}: no such directory"
