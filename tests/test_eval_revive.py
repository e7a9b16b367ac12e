"""`sesa eval` and `sesa revive` on a tiny trained run: files, reloaded config, optimizer state, step numbering."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import run_cli

SMALL = ["train.batch_size=2", "sampler.group_size=4", "eval.samples=8", "train.eval_every=0"]


@pytest.fixture(scope="module")
def parent_run(tmp_path_factory, tiny_overrides) -> Path:
    run_dir = tmp_path_factory.mktemp("parent") / "run"
    mp = pytest.MonkeyPatch()
    try:
        argv = [
            "train",
            *tiny_overrides,
            *SMALL,
            "sampler=parallel",
            "sampler.group_size=4",
            "train.steps=4",
            "train.checkpoint_every=2",
            "seed=3",
            f"hydra.run.dir={run_dir}",
        ]
        assert run_cli(argv, mp) == 0
    finally:
        mp.undo()
    return run_dir


def test_eval_writes_samples_and_metrics(parent_run, tmp_path, monkeypatch):
    out = tmp_path / "eval"
    argv = ["eval", f"ckpt={parent_run}", "eval.samples=8", "eval.instances=2", f"hydra.run.dir={out}"]
    assert run_cli(argv, monkeypatch) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    for key in (
        "eval/success",
        "eval/entropy",
        "eval/pass@1",
        "eval/pass@2",
        "eval/pass@4",
        "eval/pass@8",
        "eval/coverage@8",
        "eval/distinct@8",
        "eval/distinct_correct@8",
        "eval/greedy_success",
    ):
        assert key in metrics, key
    assert metrics["eval/greedy_success"] in (0.0, 0.5, 1.0)  # one greedy answer for each of the 2 instances
    assert metrics["step"] == 4  # a run dir means its last checkpoint
    # the path task enumerates its 64 (test-world) leaves: exact policy metrics, coverage at k = eval.samples
    for key in (
        "policy/valid_mass",
        "policy/target_mass",
        "policy/effective_solutions",
        "policy/solutions_above_1pct",
        "policy/solution_entropy",
        "policy/coverage@8",
    ):
        assert key in metrics, key
    assert 0 < metrics["policy/target_mass"] <= metrics["policy/valid_mass"] <= 1
    (line,) = (out / "policy_probs.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["step"] == 4
    assert [i["instance"] for i in record["instances"]] == [0, 1]  # both instances (the same path prompt)
    assert set(record["instances"][0]["targets"]) <= set(record["instances"][0]["probs"])  # targets always listed
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 16
    assert {"context", "completion", "reward", "success", "key"} <= set(rows[0])
    # the evaluation's compute (sesa_cli.compute): the 16 draws' tokens, the greedy answers' and no training
    compute = json.loads((out / "run.json").read_text())["compute"]
    assert list(compute["phases"]) == ["eval"]
    assert compute["phases"]["eval"]["sampled_tokens"] >= sum(r["tokens"] for r in rows)
    assert compute["phases"]["eval"]["forward_flops"] > 0
    assert (compute["sampled_tokens"], compute["train_flops"]) == (0, 0)
    config = (out / "config.yaml").read_text()
    assert "regions: 4" in config  # the parent's (test-sized) world was reloaded, not the default one
    assert "target_seed: 3" in config


def test_eval_run_alone_leaves_the_run_dir_of_the_command(tiny_overrides, tmp_path, monkeypatch):
    # issue 18 item 7: the command's `run` (what a library caller or test calls) writes the same run dir as the Hydra
    # app, which adds only Hydra's own .hydra/ and log file
    from hydra import compose, initialize_config_dir

    from sesa_cli.commands import eval as eval_command
    from sesa_cli.config import conf_dir, to_object

    overrides = [*tiny_overrides, "eval.samples=2"]
    by_cli = tmp_path / "cli"
    assert run_cli(["eval", *overrides, f"hydra.run.dir={by_cli}"], monkeypatch) == 0
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        cfg = to_object(compose("eval", overrides=overrides))
    alone = tmp_path / "alone"
    eval_command.run(cfg, alone, overrides)
    assert {p.name for p in by_cli.iterdir()} - {".hydra", "eval.log"} == {p.name for p in alone.iterdir()}
    assert (alone / "config.yaml").read_text() == (by_cli / "config.yaml").read_text()
    assert json.loads((alone / "metrics.json").read_text()) == json.loads((by_cli / "metrics.json").read_text())


def test_eval_of_a_checkpoint_reproduces_the_runs_final_evaluation_row(parent_run, tmp_path, monkeypatch, capsys):
    # issue 22: one evaluation protocol; issue 28 item 2: one evaluation. sesa eval of the run dir takes its protocol
    # (eval.samples=8 x the path task's one instance), its sampling settings and its seed, and draws what the run's
    # final evaluation drew (sesa_cli.evaluation.Evaluation, eval_generator): every eval/* and policy/* value of the
    # run's final row, sampled ones included, is reproduced exactly.
    out = tmp_path / "eval_again"
    assert run_cli(["eval", f"ckpt={parent_run}", f"hydra.run.dir={out}"], monkeypatch) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    rows = [json.loads(line) for line in (parent_run / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "eval/success" in r][-1]
    assert last["step"] == metrics["step"] == 4
    assert (metrics["eval/samples"], metrics["eval/instances"]) == (8, 1)
    assert "policy/coverage@8" in last  # coverage at k = the protocol's sample count
    evaluated = {k: v for k, v in last.items() if k.startswith(("eval/", "policy/"))}
    assert {"eval/success", "eval/pass@8", "eval/distinct@8", "eval/entropy", "eval/greedy_success"} <= set(evaluated)
    protocol = ("eval/samples", "eval/instances")  # what was asked, not measured: sesa eval's own keys
    reproduced = {k: v for k, v in metrics.items() if k.startswith(("eval/", "policy/")) and k not in protocol}
    assert reproduced == evaluated  # the same keys and the same numbers, bit for bit
    out_text = capsys.readouterr().out
    printed = " ".join(out_text.split())  # the table's caption, however the console wrapped it
    assert "protocol: 1 instances x 8 samples (i.i.d. from the plain prompt, temperature 1)" in printed
    # The ending: what was evaluated and where the results are, each path whole on its own line, then what to run
    # next (the chain health of the same checkpoint, training on from it).
    lines = out_text.splitlines()
    assert f"eval dir: {out} (metrics.json, samples.jsonl)" in lines
    assert any(line.startswith("evaluated: ") and line.endswith("step_000004") for line in lines)
    commands = [line.strip() for line in lines if line.strip().startswith("sesa ")]
    assert any(c.startswith("sesa eval ckpt=") and c.endswith(" sampler=sequential") for c in commands), commands
    assert any(c.startswith("sesa revive ckpt=") for c in commands), commands


def test_eval_with_a_sequential_sampler_reports_chain_health(parent_run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "eval_seq"
    argv = [
        "eval",
        f"ckpt={parent_run}",
        "sampler=sequential",
        "sampler.stage1=sketch",
        "eval.samples=8",
        "eval.instances=2",
        f"hydra.run.dir={out}",
    ]
    assert run_cli(argv, monkeypatch) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["chain/chains"] == 4  # 2 instances x 8 samples in chains of group_size=4
    for name in ("valid", "new", "cut", "followed"):
        assert len(metrics[f"chain/{name}_by_position"]) == 4
    assert sum(metrics["chain/new_by_position"]) == pytest.approx(metrics["chain/distinct"])
    assert 0 <= metrics["chain/followed"] <= 1
    printed = capsys.readouterr().out
    assert "chain health: 4 chains of 4 sketches" in printed
    assert "sampler=sequential" not in "".join(line for line in printed.splitlines() if line.startswith("  sesa eval"))


def test_revive_restores_optimizer_and_continues_step_numbering(parent_run, tmp_path, monkeypatch):
    out = tmp_path / "revive"
    ckpt = parent_run / "checkpoints" / "step_000002"
    argv = ["revive", f"ckpt={parent_run}", "step=2", "sampler=sequential", "more_steps=2", f"hydra.run.dir={out}"]
    assert run_cli(argv, monkeypatch) == 0
    info = json.loads((out / "run.json").read_text())
    assert info["command"] == "revive"
    assert info["parent"] == str(ckpt)
    assert "sampler=sequential" in info["overrides"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    new = [r["step"] for r in rows if "rollout/reward_mean" in r and not r.get("revive/parent")]
    assert new == [3, 4]
    assert [r["step"] for r in rows if r.get("revive/parent")] == [
        0,
        1,
        2,
    ]  # the parent's base evaluation (step 0) and its two steps
    # the parent's solution probabilities up to the checkpoint, then the revived run's evaluations (its start, end)
    probs = [json.loads(line)["step"] for line in (out / "policy_probs.jsonl").read_text().splitlines()]
    assert probs == [0, 2, 4]
    config = (out / "config.yaml").read_text()
    assert "name: sequential" in config
    assert "group_size: 4" in config
    assert "regions: 4" in config
    # optimizer state was restored, then stepped twice more: Adam's step counters continue from the parent's
    parent_opt = torch.load(ckpt / "optimizer.pt", weights_only=True)
    child_opt = torch.load(out / "checkpoints" / "step_000004" / "optimizer.pt", weights_only=True)
    parent_steps = {int(s["step"]) for s in parent_opt["state"].values()}
    child_steps = {int(s["step"]) for s in child_opt["state"].values()}
    assert parent_steps == {2}
    assert child_steps == {4}


def test_revive_step_auto_without_a_flag_is_a_clear_error(parent_run, monkeypatch, capsys):
    assert run_cli(["revive", f"ckpt={parent_run}", "step=auto"], monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "flagged no step" in err
    # the way on: step=last, and which checkpoint that is (the deepest: the last one saved)
    deepest = max((parent_run / "checkpoints").iterdir())
    assert err.endswith(
        f"to revive from its deepest checkpoint, step {int(deepest.name[5:])} ({deepest}), pass step=last"
    )


def test_revive_bad_checkpoint_paths(tmp_path, monkeypatch, capsys):
    assert run_cli(["revive", f"ckpt={tmp_path / 'nope'}"], monkeypatch) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    assert run_cli(["revive", f"ckpt={tmp_path / 'empty'}"], monkeypatch) == 2
    assert "has no checkpoints" in capsys.readouterr().err


def test_eval_foreign_checkpoint_and_empty_report_are_clear_errors(tmp_path, monkeypatch, capsys):
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "weights.bin").write_text("not a sesa checkpoint")
    assert run_cli(["eval", f"ckpt={tmp_path / 'foreign'}"], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "neither a sesa checkpoint" in err[0]
    assert run_cli(["diversity-report", "runs=[]"], monkeypatch) == 2
    assert "runs=[...] is empty" in capsys.readouterr().err


def test_the_readme_collapse_revive_report_workflow_says_what_it_found(tiny_overrides, tmp_path, monkeypatch, capsys):
    # issue 28 item 3: the README's four commands on a small world and a few steps. A few steps do not collapse the
    # policy, so the collapse monitor's thresholds are set to flag the first measurement (what is tested is what the
    # commands say about a flag, not the detection, which tests/test_metrics.py covers).
    collapse, parallel, sequential = (
        tmp_path / "collapse",
        tmp_path / "revive_parallel",
        tmp_path / "revive_sequential",
    )
    flag_at_once = [
        "collapse.window=1",
        "collapse.max_effective_solutions=1000.0",
        "collapse.max_solution_entropy=1000.0",
    ]
    argv = ["train", "experiment=collapse_revival", *tiny_overrides, *SMALL, "train.steps=4", "train.policy_every=1",
            "train.checkpoint_every=2", *flag_at_once, f"hydra.run.dir={collapse}"]  # fmt: skip
    assert run_cli(argv, monkeypatch) == 0
    out = capsys.readouterr().out
    assert "collapse flagged at step 1: " in out
    assert " effective solutions, solution entropy " in out.split("collapse flagged at step 1: ")[1].splitlines()[0]
    assert out.count("collapse flagged") == 1  # the first flag only
    for sampler, run_dir in (("parallel", parallel), ("sequential", sequential)):
        argv = ["revive", f"ckpt={collapse}", "step=auto", f"sampler={sampler}", "more_steps=2",
                f"hydra.run.dir={run_dir}"]  # fmt: skip
        assert run_cli(argv, monkeypatch) == 0
        out = capsys.readouterr().out
        text = " ".join(out.split())  # however the console wrapped it
        assert (
            "step=auto: the collapse monitor first flagged step 1; reviving from its first checkpoint since, step 2"
            in text
        )
        assert "sesa revive: done, 2 steps (step 2 -> 4)" in out  # the steps it ran, not the run's total
        assert "checkpoint (step 2)" in out
        assert "collapse flagged" not in out  # its parent was flagged already
    report_dir = tmp_path / "report"
    argv = ["diversity-report", f"runs=[{collapse},{parallel},{sequential}]", f"hydra.run.dir={report_dir}"]
    assert run_cli(argv, monkeypatch) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "− [2]" in out  # the difference column: the revivals compared with each other by default
    answer = re.search(r"\[\d\] revive \w+ kept (more|as many) solutions.*?\)\.", out)
    assert answer is not None, out
    # the verdict reads the exact metrics unless a revival's exact metrics miss its samples (sesa_cli.report.marks:
    # the small test base's valid mass sits near its bound and moves with the CPU's kernels); either way it names
    # the metric it used
    if "do not describe what it samples" in out or "exact metrics cover under" in out:
        assert re.search(r"eval/distinct_correct@\d+ ", answer.group(0)), answer.group(0)
        assert "Not read on the exact policy/* metrics" in out
    else:
        assert "policy/effective_solutions" in answer.group(0)
    assert "one seed: no interval" in answer.group(0)
    compare = (report_dir / "compare.csv").read_text()
    assert "policy/effective_solutions" in compare
    markdown = (report_dir / "report.md").read_text()
    assert "### Difference to [2] revive parallel" in markdown
    assert answer.group(0).split(" (")[0] in " ".join(markdown.split())


def test_a_base_held_in_bfloat16_is_the_same_kl_reference_as_in_float32(path_setup, tmp_path):
    """Weights are weights (issue 54): the tiny base held in bfloat16 (as a GPU holds it under model.dtype=bfloat16)
    records the fingerprint its float32 copy on the CPU records, so a revive checks either against the other; one
    weight moved by 4 to 8 steps of bfloat16's precision is another base; a record written before the rule (the
    float32 bytes as held, no ``precision``) is still checked, and against a float32 rebuild only."""
    from types import SimpleNamespace

    from sesa_cli.config import ConfigError
    from sesa_cli.models.reference import check_rebuilt, describe, fingerprint

    _, _, policy = path_setup
    bf16 = SimpleNamespace(source=policy.source, model=copy.deepcopy(policy.model).to(torch.bfloat16))
    record = describe(policy)
    assert describe(bf16) == record
    assert check_rebuilt(record, bf16, tmp_path) == record
    assert check_rebuilt(describe(bf16), policy, tmp_path) == record
    moved = copy.deepcopy(policy.model)
    weight = next(p for p in moved.parameters() if p.dim() == 2)
    with torch.no_grad():
        flat = weight.view(-1)
        flat[flat.abs().argmax()] *= 1 + 2**-5
    with pytest.raises(ConfigError, match="is not the one"):
        check_rebuilt(record, SimpleNamespace(source=policy.source, model=moved), tmp_path)
    older = {"base": str(policy.source), "sha256": fingerprint(policy.model, None)}
    assert check_rebuilt(older, policy, tmp_path) == older
    with pytest.raises(ConfigError, match="is not the one"):
        check_rebuilt(older, bf16, tmp_path)


def test_a_checkpoint_trained_in_bfloat16_revives_on_the_cpu(parent_run, tmp_path, monkeypatch):
    """A run trained on a GPU in bfloat16, faked on the CPU: its checkpoint's weights and AdamW moments are bfloat16
    its config says model.dtype=bfloat16 and its run.json records the fingerprint of its base held in bfloat16.
    ``sesa revive`` with a KL term on this CPU rebuilds the base in float32,
    accepts it as the run's KL reference (before issue 54's rule: refused), and trains on in float32 (the CPU's weights under model.dtype=bfloat16)
    from the checkpoint's weights."""
    from safetensors.torch import load_file, save_file

    from sesa_cli.manifest import write_manifest
    from sesa_cli.models.loading import load_pretrained_dir
    from sesa_cli.models.reference import describe

    run = tmp_path / "parent"
    shutil.copytree(parent_run, run)
    ckpt = run / "checkpoints" / "step_000002"
    weights = {k: v.to(torch.bfloat16) for k, v in load_file(ckpt / "model.safetensors").items()}
    save_file(weights, ckpt / "model.safetensors", metadata={"format": "pt"})
    hf = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**hf, "dtype": "bfloat16"}))
    opt = torch.load(ckpt / "optimizer.pt", weights_only=True)
    for state in opt["state"].values():
        for key in ("exp_avg", "exp_avg_sq"):
            state[key] = state[key].to(torch.bfloat16)
    torch.save(opt, ckpt / "optimizer.pt")
    # the KL reference as that run recorded it: of its base, held in bfloat16
    info = json.loads((run / "run.json").read_text())
    base = load_pretrained_dir(Path(info["kl_reference"]["base"]))
    base.model.to(torch.bfloat16)
    info["kl_reference"] = describe(base)
    (run / "run.json").write_text(json.dumps(info))
    config = (run / "config.yaml").read_text()
    assert "  dtype: float32\n" in config
    (run / "config.yaml").write_text(config.replace("  dtype: float32\n", "  dtype: bfloat16\n"))
    write_manifest(ckpt)  # the checksums that run's checkpoint recorded of its (bfloat16) files

    out = tmp_path / "revive"
    argv = ["revive", f"ckpt={run}", "step=2", "more_steps=1", "algo.kl_coef=0.05", f"hydra.run.dir={out}"]
    assert run_cli(argv, monkeypatch) == 0
    parent_record = json.loads((run / "run.json").read_text())["kl_reference"]
    assert json.loads((out / "run.json").read_text())["kl_reference"] == parent_record
    revived = load_file(out / "checkpoints" / "step_000003" / "model.safetensors")
    assert {v.dtype for v in revived.values()} == {torch.float32}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss/kl" in r and not r.get("revive/parent")] == [3]
