"""diversity-report library: run discovery, grouping, summary numbers, plots and documents, on fabricated runs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from sesa_cli.config import ConfigError
from sesa_cli.report import ReportFiles, build_report, format_table_for_console, load_runs, summarize
from sesa_cli.report.runs import LEGACY_METRICS, load_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KS = (1, 2, 4, 8, 16)  # 16 checks that @k sorts as a number
STEPS = 10
EVAL_EVERY = 5


def success_at(step: int, seed: int, sampler: str) -> float:
    """The fabricated rollout/success curve: sequential learns faster; seeds offset by 0.01."""
    slope = 0.05 if sampler == "sequential" else 0.03
    return round(0.1 + slope * step + 0.01 * seed, 6)


def write_run(
    run_dir: Path,
    overrides: dict[str, object],
    task: str = "path",
    coverage: bool = True,
    command: str = "train",
) -> Path:
    """Fabricate a run dir as ``sesa train`` writes it: metrics.jsonl, config.yaml, .hydra/, run.json."""
    sampler = str(overrides.get("sampler", "parallel"))
    seed = int(overrides.get("seed", 0))
    run_dir.mkdir(parents=True)
    override_list = [f"task={task}", *(f"{k}={v}" for k, v in overrides.items()), f"train.steps={STEPS}"]
    config = {
        "task": {"name": task},
        "sampler": {"name": sampler, "group_size": 8},
        "algo": {"name": str(overrides.get("algo", "grpo"))},
        "model": {"name": "tiny"},
        "seed": seed,
        "train": {"steps": STEPS},
    }
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(override_list))
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    info = {"command": command, "parent": None, "overrides": override_list, "started": "2026-11-22T10:00:00"}
    (run_dir / "run.json").write_text(json.dumps(info))
    rng = np.random.default_rng(seed)
    lines = []
    for step in range(STEPS + 1):
        decay = 0.9 if sampler == "sequential" else 0.75
        row = {
            "step": step,
            "rollout/reward_mean": success_at(step, seed, sampler),
            "rollout/reward_std": 0.3,
            "rollout/success": success_at(step, seed, sampler),
            "rollout/entropy": round(2.0 * decay**step + 0.05 * rng.random(), 6),
            "rollout/frac_zero_std": 0.1,
            "rollout/distinct": 6.0 - step * (0.1 if sampler == "sequential" else 0.4),
            "rollout/distinct_correct": 1.0 + 0.1 * step,
            "time/step_s": 0.5,
            "collapse/flag": int(sampler == "parallel" and step >= 8),
        }
        if coverage:
            row["rollout/coverage"] = 0.05 * step * (1.5 if sampler == "sequential" else 1.0)
        lines.append(json.dumps(row))
        if step % EVAL_EVERY == 0:
            ev: dict[str, object] = {"step": step, "eval/success": success_at(step, seed, sampler) / 2}
            ev["eval/entropy"] = 1.5 * decay**step
            for k in KS:
                ev[f"eval/pass@{k}"] = min(1.0, ev["eval/success"] * (1 + 0.5 * math.log2(k)))  # type: ignore[operator]
                ev[f"eval/distinct@{k}"] = min(k, 1 + step / 5)
                ev[f"eval/distinct_correct@{k}"] = min(k, step / 5)
                if coverage:
                    ev[f"eval/coverage@{k}"] = min(1.0, 0.02 * k * (1 + step))
            lines.append(json.dumps(ev))
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def write_multirun(sweep: Path, task: str = "path", coverage: bool = True) -> Path:
    """A Hydra sweep dir: sampler=parallel,sequential × seed=0,1 as jobs 0..3."""
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"mode": "MULTIRUN"}}))
    job = 0
    for sampler in ("parallel", "sequential"):
        for seed in (0, 1):
            write_run(sweep / str(job), {"sampler": sampler, "seed": seed}, task=task, coverage=coverage)
            job += 1
    return sweep


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return write_multirun(tmp_path / "multirun" / "10-00-00")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> ReportFiles:
    """One report of the standard sweep, shared by the read-only tests (building one takes ~0.5 s)."""
    root = tmp_path_factory.mktemp("built")
    return build_report([write_multirun(root / "multirun" / "10-00-00")], root / "report")


# -------------------------------------------------------------------------------------------------- documents
def test_build_report_writes_every_file(built: ReportFiles) -> None:
    files = built
    out = files["summary"].parent
    for key in ("summary", "markdown", "html"):
        assert files[key].is_file(), key
    assert set(files["plots"]) == {"success", "diversity", "entropy", "pass_at_k"}
    for name, path in files["plots"].items():
        assert path == out / f"{name}.png"
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 10_000, f"{name}.png is suspiciously small"
    html = files["html"].read_text()
    assert html.count("data:image/png;base64,") == 4
    assert "sampler=sequential" in html
    markdown = files["markdown"].read_text()
    for name in files["plots"]:
        assert f"({name}.png)" in markdown
    assert "| metric |" in markdown
    assert files["notes"] == []


def test_summary_numbers_are_mean_and_std_over_seeds(built: ReportFiles) -> None:
    summary = pd.read_csv(built["summary"])
    assert list(summary.columns) == ["group", "metric", "final_mean", "final_std", "best_mean", "best_std", "n_seeds"]
    assert list(dict.fromkeys(summary["group"])) == ["sampler=parallel", "sampler=sequential"]
    row = summary[(summary["group"] == "sampler=sequential") & (summary["metric"] == "rollout/success")].iloc[0]
    # Hand check: final rollout/success is 0.1 + 0.05*10 + 0.01*seed = 0.60 and 0.61.
    assert row["final_mean"] == pytest.approx(0.605)
    assert row["final_std"] == pytest.approx(0.01 / math.sqrt(2))  # sample std (ddof=1) of two seeds
    assert row["best_mean"] == pytest.approx(0.605)  # increasing curve: best = final
    assert row["n_seeds"] == 2
    # Eval rows share step numbers with training rows; the final eval value comes from step 10.
    row = summary[(summary["group"] == "sampler=parallel") & (summary["metric"] == "eval/success")].iloc[0]
    assert row["final_mean"] == pytest.approx((0.4 + 0.41) / 4)
    # Entropy decays: best (max) is the step-0 value, final the last one.
    row = summary[(summary["group"] == "sampler=parallel") & (summary["metric"] == "rollout/distinct")].iloc[0]
    assert (row["best_mean"], row["final_mean"]) == (pytest.approx(6.0), pytest.approx(2.0))
    pass_rows = [m for m in summary.query("group == 'sampler=parallel'")["metric"] if m.startswith("eval/pass@")]
    assert pass_rows == [f"eval/pass@{k}" for k in KS]


def test_console_table(built: ReportFiles) -> None:
    headers, rows = format_table_for_console(built["summary"])
    assert headers == ["metric (final, mean ± std)", "sampler=parallel (n=2)", "sampler=sequential (n=2)"]
    by_metric = {row[0]: row[1:] for row in rows}
    assert by_metric["rollout/success"] == ["0.405 ± 0.007", "0.605 ± 0.007"]
    assert {"eval/pass@1", "eval/pass@16", "rollout/entropy"} <= set(by_metric)


def test_missing_metrics_skip_plots_and_say_so(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {"seed": 0}, task="frozenlake", coverage=False)
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    kept = [{k: v for k, v in row.items() if not k.startswith("eval/")} for row in lines]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(row) for row in kept))
    files = build_report([run], tmp_path / "report")
    assert "pass_at_k" not in files["plots"]
    assert {"success", "diversity", "entropy"} <= set(files["plots"])
    assert any("pass_at_k.png not drawn" in note for note in files["notes"])
    assert "pass_at_k.png not drawn" in files["markdown"].read_text()


# --------------------------------------------------------------------------------------------------- grouping
def test_groups_by_differing_overrides_across_dirs(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", {"sampler": "parallel", "algo": "grpo", "seed": 0})
    b = write_run(tmp_path / "b", {"sampler": "parallel", "algo": "dapo", "seed": 0})
    c = write_run(tmp_path / "c", {"sampler": "sequential", "algo": "dapo", "seed": 1})
    runs, _ = load_runs([a, b, c])
    assert [r.group for r in runs] == [
        "sampler=parallel,algo=grpo",
        "sampler=parallel,algo=dapo",
        "sampler=sequential,algo=dapo",
    ]


def test_override_missing_in_one_run_falls_back_to_config(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", {"seed": 0})  # sampler left at its default (config says parallel)
    b = write_run(tmp_path / "b", {"sampler": "sequential", "seed": 0})
    runs, _ = load_runs([a, b])
    assert [r.group for r in runs] == ["sampler=parallel", "sampler=sequential"]


def test_only_seeds_differ_gives_one_group(tmp_path: Path) -> None:
    paths = [write_run(tmp_path / str(s), {"sampler": "sequential", "seed": s}) for s in range(3)]
    runs, _ = load_runs(paths)
    assert {r.group for r in runs} == {"task=path,sampler=sequential,train.steps=10"}
    assert summarize(runs)["n_seeds"].max() == 3


def test_different_commands_lead_the_label(sweep: Path, tmp_path: Path) -> None:
    revived = write_run(tmp_path / "revived", {"sampler": "sequential", "seed": 0}, command="revive")
    overrides = ["ckpt=/somewhere/long/outputs/train/10-00-00/checkpoints/step_8", "step=auto", "sampler=sequential"]
    (revived / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["task=path", *overrides, "seed=0"]))
    runs, _ = load_runs([sweep, revived])
    # ckpt/step exist only in the revive run and train.steps in all: the command says it, the label stays short.
    assert list(dict.fromkeys(r.group for r in runs)) == [
        "command=train,sampler=parallel",
        "command=train,sampler=sequential",
        "command=revive,sampler=sequential",
    ]


def test_single_run_is_labelled_by_its_dir(tmp_path: Path) -> None:
    runs, _ = load_runs([write_run(tmp_path / "my-run", {"seed": 0})])
    assert runs[0].group == "my-run"


# ---------------------------------------------------------------------------------------------------- loading
def test_train_and_eval_rows_merge_by_step(sweep: Path) -> None:
    run = load_run(sweep / "0")
    assert list(run.metrics.index) == list(range(STEPS + 1))
    assert run.metrics.loc[5, "rollout/success"] == pytest.approx(success_at(5, 0, "parallel"))
    assert run.metrics.loc[5, "eval/success"] == pytest.approx(success_at(5, 0, "parallel") / 2)
    assert math.isnan(run.metrics.loc[4, "eval/success"])


def test_runs_written_before_the_rollout_rename_load_under_the_new_names(tmp_path: Path) -> None:
    # Rollout statistics were train/* before issue 16; train/lr and friends describe training and kept the name.
    assert LEGACY_METRICS["train/entropy"] == "rollout/entropy"
    assert len(LEGACY_METRICS) == 11
    assert "train/lr" not in LEGACY_METRICS
    old = write_run(tmp_path / "old", {"seed": 0})
    path = old / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    legacy = [{k.replace("rollout/", "train/"): v for k, v in r.items()} for r in rows]
    legacy[1]["train/lr"] = 1e-4
    path.write_text("".join(json.dumps(r) + "\n" for r in legacy))
    metrics = load_run(old).metrics
    assert not any(c.startswith("train/") and c != "train/lr" for c in metrics.columns)
    assert metrics.loc[5, "rollout/success"] == pytest.approx(success_at(5, 0, "parallel"))
    # A revived run of an old parent holds both names: the parent's rows fill in the new column.
    mixed = legacy[:6] + rows[6:]
    path.write_text("".join(json.dumps(r) + "\n" for r in mixed))
    metrics = load_run(old).metrics
    assert "train/success" not in metrics.columns
    assert metrics["rollout/success"].notna().all()
    assert metrics.loc[2, "rollout/success"] == pytest.approx(success_at(2, 0, "parallel"))


def test_exact_policy_metrics_get_their_plot_and_lead_the_table(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {"seed": 0})
    path = run / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        if "rollout/success" in r:
            r.update({"policy/target_mass": 0.5, "policy/effective_solutions": 3.0, "policy/coverage@64": 0.1})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    files = build_report([run], tmp_path / "report")
    assert "policy" in files["plots"]
    _, table = format_table_for_console(files["summary"])
    assert [r[0] for r in table][:3] == ["policy/target_mass", "policy/effective_solutions", "policy/coverage@64"]


def test_truncated_last_line_is_tolerated(sweep: Path) -> None:
    path = sweep / "0" / "metrics.jsonl"
    path.write_text(path.read_text() + '{"step": 11, "train/succ')
    assert load_run(sweep / "0").metrics.index.max() == STEPS


def test_eval_run_metrics_json_is_one_row(tmp_path: Path, sweep: Path) -> None:
    ev = tmp_path / "eval"
    ev.mkdir()
    (ev / "metrics.json").write_text(json.dumps({"eval/success": 0.5, **{f"eval/pass@{k}": 0.5 for k in KS}}))
    (ev / "config.yaml").write_text(
        yaml.safe_dump({"task": {"name": "path"}, "sampler": {"name": "parallel"}, "seed": 0})
    )
    (ev / "run.json").write_text(json.dumps({"command": "eval", "overrides": ["ckpt=x/checkpoints/step_10"]}))
    runs, _ = load_runs([sweep, ev])
    assert runs[-1].metrics.shape == (1, 1 + len(KS))
    assert runs[-1].group == "command=eval,sampler=parallel"  # ckpt and train.steps follow the command
    summary = summarize(runs)
    assert summary.query("metric == 'eval/pass@4'")["group"].nunique() == 3


def test_multirun_skips_job_without_metrics(sweep: Path) -> None:
    (sweep / "4" / ".hydra").mkdir(parents=True)
    runs, notes = load_runs([sweep])
    assert len(runs) == 4
    assert notes == [f"skipped {sweep / '4'}: no metrics.jsonl"]


def test_duplicate_paths_are_loaded_once(sweep: Path) -> None:
    runs, _ = load_runs([sweep, sweep / "0"])
    assert len(runs) == 4


# ----------------------------------------------------------------------------------------------------- errors
def _one_line_config_error(runs: list[object], out: Path) -> str:
    with pytest.raises(ConfigError) as info:
        build_report(runs, out)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    return message


def test_error_empty_list(tmp_path: Path) -> None:
    assert "runs is empty" in _one_line_config_error([], tmp_path / "r")


def test_error_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert str(missing) in _one_line_config_error([missing], tmp_path / "r")


def test_error_dir_without_runs(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "0").mkdir(parents=True)
    message = _one_line_config_error([empty], tmp_path / "r")
    assert message.startswith(f"no runs in {empty}")


def test_error_mixed_tasks(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", {"seed": 0}, task="path")
    b = write_run(tmp_path / "b", {"seed": 0}, task="frozenlake")
    message = _one_line_config_error([a, b], tmp_path / "r")
    assert "mix tasks" in message
    assert str(a) in message
    assert str(b) in message
    assert not (tmp_path / "r").exists(), "nothing is written when the inputs are rejected"


def test_error_corrupt_metrics_line(sweep: Path, tmp_path: Path) -> None:
    path = sweep / "1" / "metrics.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{oops", *lines[1:]]))
    assert f"{path}:2 is not valid JSON" in _one_line_config_error([sweep], tmp_path / "r")


# ------------------------------------------------------------------------------------------------ lightweight
def test_report_never_imports_torch(sweep: Path, tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import sesa_cli.report as r\n"
        f"r.build_report([{str(sweep)!r}], Path({str(tmp_path / 'out')!r}))\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'tokenizers', 'accelerate') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "report.html").is_file()
