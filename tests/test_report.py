"""diversity-report library: run discovery, grouping, summary numbers, plots and documents, on fabricated runs."""

from __future__ import annotations

import html
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sesa_cli.config import ConfigError
from sesa_cli.intervals import EXACT_MARK
from sesa_cli.metric_keys import key as metric_key
from sesa_cli.report import (
    ReportFiles,
    analyse,
    build_report,
    console_tables,
    group_summary,
    load_runs,
    summarize,
    write_report,
)
from sesa_cli.report.runs import LEGACY_METRICS, load_run
from tests.fake_runs import KS, STEPS, success_at, write_multirun, write_revival, write_run

# metric keys from the one table (sesa_cli.metric_keys): a renamed key fails here
SUCCESS = metric_key("rollout/success")
EVAL_SUCCESS = metric_key("eval/success")
DISTINCT = metric_key("rollout/distinct")
ENTROPY = metric_key("rollout/entropy")
LR = metric_key("optim/lr")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return write_multirun(tmp_path / "multirun" / "10-00-00")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> ReportFiles:
    """One report of the standard sweep, shared by the read-only tests (building one takes ~1 s)."""
    root = tmp_path_factory.mktemp("built")
    return build_report([write_multirun(root / "multirun" / "10-00-00", policy=True)], root / "report")


# -------------------------------------------------------------------------------------------------- documents
def test_build_report_writes_every_file(built: ReportFiles) -> None:
    files = built
    out = files["summary"].parent
    for key in ("summary", "groups", "compare", "markdown", "html"):
        assert files[key].is_file(), key
    assert set(files["plots"]) == {"heatmap", "policy", "sampling", "diversity", "pass_at_k", "tradeoff"}
    for name, path in files["plots"].items():
        assert path == out / f"{name}.png"
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 10_000, f"{name}.png is suspiciously small"
    html = files["html"].read_text()
    assert html.count("data:image/png;base64,") == 6
    assert "[2] sequential" in html
    markdown = files["markdown"].read_text()
    for name in files["plots"]:
        assert f"({name}.png)" in markdown
    assert files["notes"] == []


def test_report_leads_with_the_answer(built: ReportFiles) -> None:
    """Headline (groups × headline metrics with intervals) and the difference come before the first plot; the full
    tables come last, folded in the HTML."""
    markdown = built["markdown"].read_text()
    order = [
        markdown.index(s)
        for s in ("## Headline", "### Difference to [1] parallel", "![heatmap]", "## All metrics", "## Runs")
    ]
    assert order == sorted(order)
    headline = markdown[markdown.index("## Headline") : markdown.index("## Plots")]
    assert "| group | n | runs lost | policy/effective_solutions | policy/target_mass | eval/success |" in headline
    assert ENTROPY not in headline
    assert "time/" not in headline
    html = built["html"].read_text()
    assert html.index("<h2>Headline</h2>") < html.index("data:image/png") < html.index("<details>")
    # optim/lr = 1e-4 reads as a number, not as 0.000
    assert "| optim/lr | 0.000100 [0.000100, 0.000100] | 0.000100 [0.000100, 0.000100] |" in markdown


def test_summary_numbers_are_per_run_and_groups_have_bootstrap_intervals(built: ReportFiles) -> None:
    summary = pd.read_csv(built["summary"])
    assert list(summary.columns) == ["group", "seed", "run", "metric", "final", "best"]
    assert summary["run"].nunique() == 4
    row = summary[(summary["metric"] == SUCCESS) & (summary["group"] == "sampler=sequential")]
    assert sorted(row["final"]) == [pytest.approx(0.60), pytest.approx(0.61)]
    groups = pd.read_csv(built["groups"])
    assert list(dict.fromkeys(groups["group"])) == ["sampler=parallel", "sampler=sequential"]
    row = groups[(groups["group"] == "sampler=sequential") & (groups["metric"] == SUCCESS)].iloc[0]
    # Hand check: final rollout/success is 0.1 + 0.05*10 + 0.01*seed = 0.60 and 0.61; the bootstrap of two seeds
    # draws (0.60, 0.60), the two mixed orders and (0.61, 0.61): its 2.5% and 97.5% points are the two values.
    assert row["final_mean"] == pytest.approx(0.605)
    assert (row["final_low"], row["final_high"]) == (pytest.approx(0.60), pytest.approx(0.61))
    assert row["final_std"] == pytest.approx(0.01 / math.sqrt(2))  # sample std (ddof=1) of two seeds
    assert row["n_seeds"] == 2
    # Eval rows share step numbers with training rows; the final eval value comes from step 10.
    row = groups[(groups["group"] == "sampler=parallel") & (groups["metric"] == EVAL_SUCCESS)].iloc[0]
    assert row["final_mean"] == pytest.approx((0.4 + 0.41) / 4)
    row = groups[(groups["group"] == "sampler=parallel") & (groups["metric"] == DISTINCT)].iloc[0]
    assert (row["best_mean"], row["final_mean"]) == (pytest.approx(6.0), pytest.approx(2.0))
    compare = pd.read_csv(built["compare"])
    row = compare[compare["metric"] == SUCCESS].iloc[0]
    # sequential - parallel per seed: 0.60 - 0.40 and 0.61 - 0.41, both 0.2: paired, the interval is a point
    assert (row["baseline"], row["group"], bool(row["paired"])) == ("sampler=parallel", "sampler=sequential", True)
    assert (row["difference"], row["low"], row["high"]) == (pytest.approx(0.2),) * 3


def test_console_tables_fit_80_columns(built: ReportFiles, sweep: Path, tmp_path: Path, capsys) -> None:
    from sesa_cli.commands.diversity_report import run
    from sesa_cli.config import DiversityReportConfig

    report = analyse([built["summary"].parent.parent / "multirun" / "10-00-00"])
    tables = console_tables(report)
    assert tables[0] == (
        "groups",
        ["#", "group", "seeds", "lost"],
        [["[1]", "parallel", "2", "0"], ["[2]", "sequential", "2", "0"]],
    )
    title, headers, _rows = tables[1]
    assert title == "policy/effective_solutions (final)"
    assert headers == ["#", "mean", "95% interval", "− [1]", "95% interval"]
    success = next(t for t in tables if t[0] == "eval/success (final)")
    # sequential: (0.60 + 0.61) / 4 and the two seeds' values; minus parallel's (0.40 + 0.41) / 4, paired: 0.1 each
    assert success[2][1] == ["[2]", "0.302", "[0.300, 0.305]", "+0.100", "[0.100, 0.100]"]
    # what the command prints: every line within 80 columns, wide groups and all
    wide = [
        write_run(
            tmp_path / f"w{s}",
            {
                "sampler": "sequential",
                "algo.off_policy": "on_policy_baseline",
                "sampler.stage1": "solution",
                "seed": s,
            },
        )
        for s in (0, 1)
    ]
    wide += [
        write_run(
            tmp_path / f"v{s}",
            {"sampler": "sequential", "algo.off_policy": "weight_negatives", "sampler.stage1": "sketch", "seed": s},
        )
        for s in (0, 1)
    ]
    wide += [write_run(tmp_path / f"p{s}", {"sampler": "parallel", "seed": s}) for s in (0, 1)]
    run(DiversityReportConfig(runs=[str(p) for p in wide]), tmp_path / "out")
    out = capsys.readouterr().out
    assert "off_policy=on_policy_baseline stage1=solution" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_missing_metrics_skip_plots_and_say_so(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {"seed": 0}, task="frozenlake", coverage=False)
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    kept = [{k: v for k, v in row.items() if not k.startswith("eval/")} for row in lines]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(row) for row in kept))
    files = build_report([run], tmp_path / "report")
    assert "pass_at_k" not in files["plots"]
    assert {"sampling", "diversity"} <= set(files["plots"])
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
    assert {r.group for r in runs} == {"sampler=sequential"}
    assert group_summary(summarize(runs))["n_seeds"].max() == 3


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


@pytest.mark.parametrize(
    ("key", "a", "b"),
    [
        ("optim.lr", "1e-4", "3e-4"),
        ("algo.off_policy", "paper", "drop_negatives"),
        ("train.batch_size", "8", "16"),
        ("model.cache_dir", "/a", "/b"),
        ("task.regions", "4", "8"),
        ("experiment", "x", "y"),
    ],
)
def test_grouping_ignores_seed_and_nothing_else(tmp_path: Path, key: str, a: str, b: str) -> None:
    # Four runs: two seeds of each value of `key`. Seeds merge into a group; any other difference splits.
    paths = [
        write_run(tmp_path / f"{v}-{s}", {"sampler": "sequential", key: value, "seed": s})
        for v, value in enumerate((a, b))
        for s in (0, 1)
    ]
    runs, _ = load_runs(paths)
    assert [r.group for r in runs] == [f"{key}={a}"] * 2 + [f"{key}={b}"] * 2
    assert group_summary(summarize(runs))["n_seeds"].max() == 2
    # the seed alone never splits: given on the command line or only in the config
    for run in runs:
        run.overrides.pop("seed")
    from sesa_cli.report.runs import assign_groups

    assert assign_groups(runs) == [f"{key}={a}", f"{key}={b}"]


def test_a_run_written_before_a_config_rename_groups_with_its_current_name(tmp_path: Path) -> None:
    # issue 18 moved algo.lr to optim.lr: an old run's override and config read under the new name
    old = write_run(
        tmp_path / "old",
        {"sampler": "parallel", "algo.lr": "3e-4", "seed": 0},
        extra_config={"algo": {"name": "grpo", "lr": 3e-4}, "optim": {}},
    )
    new = write_run(tmp_path / "new", {"sampler": "parallel", "optim.lr": "3e-4", "seed": 1})
    base = write_run(tmp_path / "base", {"sampler": "parallel", "seed": 0})
    runs, _ = load_runs([old, new, base])
    assert runs[0].overrides["optim.lr"] == "3e-4"
    assert runs[0].config["optim"]["lr"] == 3e-4
    assert "lr" not in runs[0].config["algo"]
    assert runs[0].group == runs[1].group != runs[2].group
    assert "optim.lr=3e-4" in runs[0].group


def test_revivals_from_each_seeds_checkpoint_are_one_group(tmp_path: Path) -> None:
    parents = [write_run(tmp_path / f"collapse{s}", {"sampler": "parallel", "seed": s}) for s in (0, 1)]
    other = write_run(tmp_path / "collapse-lr", {"sampler": "parallel", "optim.lr": "3e-4", "seed": 0})
    revived = [
        write_revival(tmp_path / f"rev{s}", p, at=6 + s, overrides={"sampler": "sequential"})
        for s, p in enumerate(parents)
    ]
    revived.append(write_revival(tmp_path / "rev-lr", other, at=6, overrides={"sampler": "sequential"}))
    runs, _ = load_runs(revived)
    groups = [r.group for r in runs]
    assert groups[0] == groups[1] != groups[2]  # ckpt = the parent's overrides minus seed
    assert "optim.lr=3e-4" in groups[2]


def test_labels_show_what_differs_and_leave_out_what_does_not_apply(tmp_path: Path) -> None:
    runs = [
        write_run(tmp_path / "par", {"experiment": "collapse", "seed": 0}),
        write_run(
            tmp_path / "seq-a",
            {
                "experiment": "discovery",
                "sampler": "sequential",
                "algo.off_policy": "paper",
                "sampler.stage1": "solution",
                "seed": 0,
            },
        ),
        write_run(
            tmp_path / "seq-b",
            {
                "experiment": "discovery",
                "sampler": "sequential",
                "algo.off_policy": "drop_negatives",
                "sampler.stage1": "solution",
                "seed": 0,
            },
        ),
    ]
    loaded, _ = load_runs(runs)
    # experiment is told by the sampler; a parallel run reads no algo.off_policy / stage1
    assert [r.group for r in loaded] == [
        "sampler=parallel",
        "sampler=sequential,algo.off_policy=paper",
        "sampler=sequential,algo.off_policy=drop_negatives",
    ]
    from sesa_cli.report.runs import short_label

    assert [short_label(r) for r in loaded] == [
        "parallel",
        "sequential off_policy=paper",
        "sequential off_policy=drop_negatives",
    ]


def test_labels_leave_out_checkpointing_and_the_settings_of_a_plug_in_a_group_left_off(tmp_path: Path) -> None:
    # claim XII's groups: GRPO saving checkpoints, methods that do not, one plug-in setting in one group only
    unlikely = {"algo": {"name": "unlikeliness", "off_policy": "paper", "terms": {"unlikeliness": {"coef": 0.25}}}}
    runs = [
        write_run(tmp_path / "grpo", {"train.checkpoint_every": 50, "seed": 0}),
        write_run(tmp_path / "clip", {"train.checkpoint_every": 0, "algo": "clip_cov", "seed": 0}),
        write_run(
            tmp_path / "u", {"train.checkpoint_every": 0, "algo": "unlikeliness", "seed": 0}, extra_config=unlikely
        ),
        write_run(
            tmp_path / "u-keep",
            {
                "train.checkpoint_every": 0,
                "algo": "unlikeliness",
                "algo.terms.unlikeliness.negatives": "keep",
                "seed": 0,
            },
            extra_config=unlikely,
        ),
    ]
    loaded, _ = load_runs(runs)
    assert [r.group for r in loaded] == [
        "algo=grpo",
        "algo=clip_cov",
        "algo=unlikeliness",
        "algo=unlikeliness,algo.terms.unlikeliness.negatives=keep",
    ]
    # a value a recipe gave (no run set it) is left out; one a group set is said
    recipe = {"algo": {"name": "grpo", "off_policy": "paper", "entropy_coef": 0.003}}
    bonus = {"algo": {"name": "entropy_bonus", "off_policy": "paper", "entropy_coef": 0.01}}
    entropy = [
        write_run(tmp_path / "e-grpo", {"seed": 0}, extra_config=recipe),
        write_run(
            tmp_path / "e-bonus", {"algo": "entropy_bonus", "algo.entropy_coef": 0.01, "seed": 0}, extra_config=bonus
        ),
    ]
    assert [r.group for r in load_runs(entropy)[0]] == ["algo=grpo", "algo=entropy_bonus,algo.entropy_coef=0.01"]
    # where only checkpointing tells two groups apart, the label keeps it
    alone = [write_run(tmp_path / f"ck{every}", {"train.checkpoint_every": every, "seed": 0}) for every in (0, 50)]
    assert [r.group for r in load_runs(alone)[0]] == ["train.checkpoint_every=0", "train.checkpoint_every=50"]


def test_revived_run_summary_excludes_the_parents_rows(tmp_path: Path) -> None:
    parent = write_run(tmp_path / "collapse", {"sampler": "parallel", "seed": 0})
    child = write_revival(tmp_path / "rev", parent, at=6, overrides={"sampler": "sequential"})
    runs, _ = load_runs([parent, child])
    assert runs[1].parent_step == 6
    summary = summarize(runs)
    mine = summary[summary["run"] == str(child)].set_index("metric")
    assert mine.loc[SUCCESS, "best"] == pytest.approx(0.9)
    assert mine.loc[SUCCESS, "final"] == pytest.approx(0.9)
    # the parent's rows (rollout/distinct, eval/pass@k, ...) are not the child's
    assert DISTINCT not in mine.index
    assert "revive/parent" not in set(summary["metric"])
    files = build_report([parent, child], tmp_path / "report")
    assert {"sampling", "diversity"} <= set(files["plots"])


def test_revivals_from_different_steps_are_drawn_since_the_revival(tmp_path: Path) -> None:
    from sesa_cli.report.plots import Layout

    parents = [write_run(tmp_path / f"collapse{s}", {"sampler": "parallel", "seed": s}) for s in (0, 1)]
    revived = [
        write_revival(tmp_path / f"rev{s}", p, at=5 + s, overrides={"sampler": "sequential"})
        for s, p in enumerate(parents)
    ]
    runs, _ = load_runs(revived)
    layout = Layout.of(runs)
    assert layout.since_revival
    assert [layout.offset(r) for r in runs] == [5, 6]
    assert len(layout.parents) == 2  # the parents are not in the report: their copied rows are drawn
    build_report(revived, tmp_path / "report")  # draws
    runs, _ = load_runs([*revived, *parents])
    layout = Layout.of(runs)
    assert not layout.since_revival
    assert layout.parents == []


def test_heatmap_reads_policy_probs(tmp_path: Path) -> None:
    from sesa_cli.report.heatmap import load_probs
    from tests.fake_runs import TARGETS, target_probs

    run = write_run(tmp_path / "run", {"sampler": "parallel", "seed": 1}, policy=True)
    probs = load_probs(load_run(run))
    assert probs is not None
    assert probs.targets == TARGETS
    assert list(probs.steps) == [0, 5, 10]
    assert probs.values[:, -1].tolist() == pytest.approx(
        [*target_probs(10, 1, "parallel"), 1 - sum(target_probs(10, 1, "parallel"))]
    )


def test_compare_names_groups_by_number_or_label(tmp_path: Path) -> None:
    paths = [
        write_run(tmp_path / f"{a}-{s}", {"algo": a, "seed": s}) for a in ("grpo", "dapo", "rloo") for s in (0, 1)
    ]
    report = analyse(paths, compare=["3", "dapo"])
    assert report.baseline == "algo=rloo"
    assert list(report.compare["group"].unique()) == ["algo=dapo"]
    assert analyse(paths).compare is None  # three groups: nothing compared unless asked
    report = analyse(paths, compare=["dapo", "*"])
    assert (report.baseline, list(report.compare["group"].unique())) == ("algo=dapo", ["algo=grpo", "algo=rloo"])
    for bad, message in (
        ([5, 1], "there is no group 5"),
        (["o", "1"], "matches 3 groups"),
        (["sft", "1"], "matches no group"),
        (["1"], "two or more"),
        ([1, "grpo"], "two or more"),
    ):
        with pytest.raises(ConfigError, match=message):
            analyse(paths, compare=bad)
    with pytest.raises(ConfigError, match="no run logged policy/x"):
        analyse(paths, metrics=["policy/x"])


def test_runs_that_differ_in_threads_or_versions_are_flagged(tmp_path: Path) -> None:
    paths = [write_run(tmp_path / f"s{s}", {"seed": s, "sampler": "parallel"}, threads=t) for s, t in ((0, 1), (1, 2))]
    paths.append(write_run(tmp_path / "old", {"seed": 2, "sampler": "parallel"}, threads=None))
    notes = build_report(paths, tmp_path / "report")["notes"]
    assert "warning: the runs of parallel differ in torch threads (1: seed 0; 2: seed 1)" in notes
    assert "1 of 3 runs did not record their thread count and package versions" in notes


# ---------------------------------------------------------------------------------------------------- loading
def test_train_and_eval_rows_merge_by_step(sweep: Path) -> None:
    run = load_run(sweep / "0")
    assert list(run.metrics.index) == list(range(STEPS + 1))
    assert run.metrics.loc[5, SUCCESS] == pytest.approx(success_at(5, 0, "parallel"))
    assert run.metrics.loc[5, EVAL_SUCCESS] == pytest.approx(success_at(5, 0, "parallel") / 2)
    assert math.isnan(run.metrics.loc[4, EVAL_SUCCESS])


def test_runs_written_before_the_rollout_rename_load_under_the_new_names(tmp_path: Path) -> None:
    # Rollout statistics were train/* before issue 16; train/kept_groups and friends describe training and kept the
    # name; issue 18 moved train/lr to optim/lr with the optimizer settings.
    assert LEGACY_METRICS["train/entropy"] == ENTROPY
    assert len([old for old, new in LEGACY_METRICS.items() if new.startswith("rollout/")]) == 11
    assert "train/kept_groups" not in LEGACY_METRICS
    assert LEGACY_METRICS["train/lr"] == LR
    old = write_run(tmp_path / "old", {"seed": 0})
    path = old / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    legacy = [{k.replace("rollout/", "train/").replace("optim/", "train/"): v for k, v in r.items()} for r in rows]
    legacy[1]["train/kept_groups"] = 4
    path.write_text("".join(json.dumps(r) + "\n" for r in legacy))
    metrics = load_run(old).metrics
    assert not any(c.startswith("train/") and c != "train/kept_groups" for c in metrics.columns)
    assert metrics.loc[1, LR] == 1e-4
    assert metrics.loc[5, SUCCESS] == pytest.approx(success_at(5, 0, "parallel"))
    # A revived run of an old parent holds both names: the parent's rows fill in the new column.
    mixed = legacy[:6] + rows[6:]
    path.write_text("".join(json.dumps(r) + "\n" for r in mixed))
    metrics = load_run(old).metrics
    assert "train/success" not in metrics.columns
    assert metrics[SUCCESS].notna().all()
    assert metrics.loc[2, SUCCESS] == pytest.approx(success_at(2, 0, "parallel"))


def test_exact_policy_metrics_get_their_plot_and_lead_the_table(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", {"seed": 0})
    path = run / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        if SUCCESS in r:
            r.update({"policy/target_mass": 0.5, "policy/effective_solutions": 3.0, "policy/coverage@64": 0.1})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    files = build_report([run], tmp_path / "report")
    assert "policy" in files["plots"]
    assert "heatmap" not in files["plots"]  # no policy_probs.jsonl
    assert analyse([run]).headline == [
        "policy/effective_solutions",
        "policy/target_mass",
        EVAL_SUCCESS,
        "eval/pass@16",
    ]


def test_truncated_last_line_is_tolerated(sweep: Path) -> None:
    path = sweep / "0" / "metrics.jsonl"
    path.write_text(path.read_text() + '{"step": 11, "train/succ')
    assert load_run(sweep / "0").metrics.index.max() == STEPS


def test_eval_run_metrics_json_is_one_row(tmp_path: Path, sweep: Path) -> None:
    ev = tmp_path / "eval"
    ev.mkdir()
    (ev / "metrics.json").write_text(json.dumps({EVAL_SUCCESS: 0.5, **{f"eval/pass@{k}": 0.5 for k in KS}}))
    (ev / "config.yaml").write_text(
        yaml.safe_dump({"task": {"name": "path"}, "sampler": {"name": "parallel"}, "seed": 0})
    )
    (ev / "run.json").write_text(json.dumps({"command": "eval", "overrides": ["ckpt=x/checkpoints/step_10"]}))
    runs, _ = load_runs([sweep, ev])
    assert runs[-1].metrics.shape == (1, 1 + len(KS))
    assert runs[-1].group == "command=eval,sampler=parallel"  # ckpt and train.steps follow the command
    summary = summarize(runs)
    assert summary.query("metric == 'eval/pass@4'")["group"].nunique() == 3
    assert summary.query("metric == 'eval/pass@4'")["run"].nunique() == 5


def test_multirun_skips_job_without_metrics(sweep: Path) -> None:
    (sweep / "4" / ".hydra").mkdir(parents=True)
    runs, notes = load_runs([sweep])
    assert len(runs) == 4
    assert notes == [f"skipped {sweep / '4'}: no metrics.jsonl"]


def test_a_glob_takes_every_matching_sweep(tmp_path: Path) -> None:
    for name in ("a", "b"):
        write_multirun(tmp_path / "multirun" / name)
    runs, _ = load_runs([str(tmp_path / "multirun" / "*")])
    assert len(runs) == 8
    assert {r.group for r in runs} == {"sampler=parallel", "sampler=sequential"}
    with pytest.raises(ConfigError, match="no directory matches"):
        load_runs([str(tmp_path / "nothing*")])


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


# ------------------------------------------------------------------------- the collapse -> revive -> report answer
def _workflow(tmp_path: Path, seeds: tuple[int, ...], parallel: float, sequential: float) -> list[Path]:
    """The README's workflow, fabricated: collapsed runs, then their revivals with each sampler (``parallel`` and
    ``sequential``: each revival's final policy/effective_solutions, plus 0.1 per seed)."""
    runs = []
    for s in seeds:
        parent = write_run(tmp_path / f"collapse{s}", {"experiment": "collapse_revival", "seed": s}, policy=True)
        runs.append(parent)
        for sampler, value in (("parallel", parallel), ("sequential", sequential)):
            runs.append(write_revival(tmp_path / f"revive_{sampler}{s}", parent, at=6,
                                      overrides={"sampler": sampler}, solutions=value + 0.1 * s))  # fmt: skip
    return runs


def test_the_revivals_are_compared_with_each_other_by_default_and_the_answer_is_one_sentence(tmp_path: Path) -> None:
    report = analyse(_workflow(tmp_path, (0,), parallel=1.0, sequential=2.86))
    assert len(report.labels) == 3  # the collapsed run and the two revivals
    assert report.labels[report.baseline] == "[2] revive parallel"
    assert [report.labels[g] for g in report.compare["group"].unique()] == ["[3] revive sequential"]
    assert report.answer() == (
        "[3] revive sequential kept more solutions than [2] revive parallel: policy/effective_solutions 2.86 against "
        "1.00 (difference +1.86; one seed: no interval)."
    )
    tables = console_tables(report)
    solutions = next(rows for title, _, rows in tables if title.startswith("policy/effective_solutions"))
    assert ["[2]", "1.00", "one seed: no interval", "baseline", ""] in solutions
    assert ["[3]", "2.86", "one seed: no interval", "+1.86", "one seed: no interval"] in solutions
    # the other way round, and with seeds: the interval, and whether it holds 0
    report = analyse(_workflow(tmp_path / "seeds", (0, 1, 2), parallel=3.0, sequential=1.0))
    answer = report.answer()
    assert answer is not None
    assert answer.startswith("[2] revive parallel kept more solutions than [3] revive sequential: ")
    assert "policy/effective_solutions 3.10 against 1.10 (difference -2.00, 95% interval [-2.00, -2.00])." in answer
    files = write_report(report, tmp_path / "report")
    markdown = files["markdown"].read_text()
    assert f"**{answer}**" in markdown
    assert "### Difference to [2] revive parallel" in markdown
    assert html.escape(answer) in files["html"].read_text()


def test_a_tie_or_an_interval_holding_zero_is_said(tmp_path: Path) -> None:
    report = analyse(_workflow(tmp_path, (0,), parallel=2.0, sequential=2.0))
    assert report.answer() == (
        "[2] revive parallel and [3] revive sequential kept as many solutions: policy/effective_solutions 2.00 each "
        "(difference 0; one seed: no interval)."
    )
    runs = _workflow(tmp_path / "noisy", (0, 1), parallel=2.0, sequential=2.0)
    # seed 1's sequential revival keeps fewer than its parallel one, seed 0's more: the interval holds 0
    for path, value in (
        (tmp_path / "noisy" / "revive_sequential1", 1.5),
        (tmp_path / "noisy" / "revive_sequential0", 2.8),
    ):
        lines = (path / "metrics.jsonl").read_text().splitlines()
        last = json.loads(lines[-1])
        last[metric_key("policy/effective_solutions")] = value
        (path / "metrics.jsonl").write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    answer = analyse(runs).answer()
    assert answer is not None
    assert answer.startswith("Neither kept clearly more solutions: policy/effective_solutions ")
    assert answer.endswith(", which holds 0).")


def test_the_heatmap_shows_every_group(tmp_path: Path) -> None:
    from sesa_cli.report.heatmap import PANELS_PER_ROW

    # five groups (more than a row of panels), each with policy_probs.jsonl
    paths = [write_run(tmp_path / a, {"algo": a, "seed": 0}, policy=True) for a in ("grpo", "dapo", "rloo", "a", "b")]
    report = analyse(paths, compare=["grpo", "dapo"])
    files = write_report(report, tmp_path / "report")
    from matplotlib import image

    height, width = image.imread(files["plots"]["heatmap"]).shape[:2]
    assert len(paths) > PANELS_PER_ROW
    one_row = analyse(paths[:2], compare=["grpo", "dapo"])
    two = write_report(one_row, tmp_path / "report2")
    h2, w2 = image.imread(two["plots"]["heatmap"]).shape[:2]
    assert width > w2  # three panels to a row, not the first two
    assert height > h2  # and a second row for the other two


# ------------------------------------------------------------------------------------------- marks (issue 49)
def _set_final(run_dir: Path, **values: float) -> None:
    """Overwrite the run's last evaluation row with ``values`` (metric keys with ``/`` written as ``__``)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if metric_key("eval/success") in json.loads(line))
    row = json.loads(lines[last])
    row.update({name.replace("__", "/"): value for name, value in values.items()})
    lines[last] = json.dumps(row)
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_a_run_whose_exact_metrics_miss_its_samples_is_marked_and_the_verdict_reads_a_sampled_metric(
    tmp_path: Path,
) -> None:
    """Issue 49: the parallel baseline won with replies its exact walk counted invalid (eval/success 0.815, exact
    target mass 0.017). Its group is marked in the headline, the note says why, and the verdict does not rest on
    policy/effective_solutions but on the evaluation's distinct correct answers, and says so."""
    sweep = write_multirun(tmp_path / "sweep", policy=True, seeds=(0, 1, 2))
    clean = analyse([sweep])
    assert clean.marks == []
    assert clean.answer().startswith(
        "[2] sequential kept more solutions than [1] parallel: policy/effective_solutions"
    )
    _set_final(sweep / "0", policy__sampled_gap=41.0, eval__exact_instances_success=0.815, policy__target_mass=0.017)
    report = analyse([sweep])
    assert [(m.group, m.run, m.kind) for m in report.marks] == [(report.baseline, "0", "gap")]
    headline = report.headline_frame()
    assert list(headline["group"]) == ["[1] parallel (!)", "[2] sequential"]
    # the exact figure covers the whole policy: the gap names the run, it does not mark the cells
    assert not any(str(cell).endswith(EXACT_MARK) for cell in headline.iloc[0])
    note = next(n for n in report.notes if n.startswith("warning: [1] parallel, seed 0:"))
    assert "0.815" in note
    assert "0.017" in note
    assert "41.0 standard deviations" in note
    answer = report.answer()
    assert answer is not None
    assert "policy/effective_solutions" not in answer.partition(".")[0]
    assert f"{metric_key('eval/distinct_correct@{k}', k=16)} " in answer
    assert answer.endswith(
        "Not read on the exact policy/* metrics: those of [1] parallel do not describe what it samples."
    )
    groups = next(rows for title, _, rows in console_tables(report) if title == "groups")
    assert groups[0][1].endswith("(!)")
    markdown = write_report(report, tmp_path / "report")["markdown"].read_text()
    assert "| [1] parallel (!) |" in markdown
    assert "warning: [1] parallel, seed 0:" in markdown
    # a low valid mass marks the run too
    sweep2 = write_multirun(tmp_path / "sweep2", policy=True)
    _set_final(sweep2 / "3", policy__valid_mass=0.27)
    report = analyse([sweep2])
    assert [(report.labels[m.group], m.run, m.kind) for m in report.marks] == [("[2] sequential", "1", "exact")]
    assert "policy/valid_mass is 0.270" in report.marks[0].text


def test_unfinished_runs_are_marked(tmp_path: Path) -> None:
    """A run still training, killed, interrupted or failed, or shorter than its group: its last values are not
    final ones, and the report says so (issue 49: mid-run values were reported as final)."""
    from sesa_cli import run_lock

    sweep = write_multirun(tmp_path / "sweep", seeds=(0, 1, 2))
    info = json.loads((sweep / "0" / "run.json").read_text())
    (sweep / "0" / "run.json").write_text(json.dumps({**info, "status": "interrupted", "exit_code": 130}))
    # still training: a live process (this one) holds the dir
    (sweep / "1" / run_lock.LOCK_NAME).write_text(json.dumps(run_lock._record("train", [])))
    # killed: no end recorded, stopped at step 6 of 10 (the first 9 lines: steps 0-6 and two evaluations)
    lines = (sweep / "2" / "metrics.jsonl").read_text().splitlines()
    (sweep / "2" / "metrics.jsonl").write_text("\n".join(lines[:9]) + "\n")
    # shorter than its group but finished (status written): it ended early
    lines = (sweep / "3" / "metrics.jsonl").read_text().splitlines()
    (sweep / "3" / "metrics.jsonl").write_text("\n".join(lines[:9]) + "\n")
    info = json.loads((sweep / "3" / "run.json").read_text())
    (sweep / "3" / "run.json").write_text(json.dumps({**info, "status": "finished"}))
    report = analyse([sweep])
    texts = {(report.labels[m.group], m.run): m.text for m in report.marks}
    assert set(texts) == {("[1] parallel", "0"), ("[1] parallel", "1"), ("[1] parallel", "2"), ("[2] sequential", "0")}
    assert texts["[1] parallel", "0"].startswith("an interrupted train run (exit code 130)")
    assert texts["[1] parallel", "1"].startswith("still training (step 10 of 10)")
    assert texts["[1] parallel", "2"].startswith("killed at step 6 of 10")
    assert texts["[2] sequential", "0"].startswith("ended at step 6, before its group's 10")
    assert all(m.kind == "status" for m in report.marks)
    assert list(report.headline_frame()["group"]) == ["[1] parallel (!)", "[2] sequential (!)"]


def test_iid_sampling_is_the_baseline_whatever_the_order_of_runs(tmp_path: Path) -> None:
    parallel = [write_run(tmp_path / f"p{s}", {"sampler": "parallel", "seed": s}) for s in (0, 1)]
    sequential = [write_run(tmp_path / f"s{s}", {"sampler": "sequential", "seed": s}) for s in (0, 1)]
    for runs in ([*sequential, *parallel], [*parallel, *sequential]):
        report = analyse(runs)
        assert report.labels[report.baseline].endswith("parallel")
        assert next(report.labels[g] for g in report.compare["group"].unique()).endswith("sequential")


def test_the_cpu_each_group_ran_on_is_named_where_groups_differ(tmp_path: Path) -> None:
    """run.json records the CPU (model, vector extensions, the kernels torch chose: issue 49); the report names it
    per group where groups differ, and shows it per run."""
    from sesa_cli.runs import environment

    cpu = environment()["cpu"]
    assert cpu["model"]
    assert isinstance(cpu["vector_extensions"], list)
    assert cpu["kernels"]
    runs = []
    for sampler, model, kernels in (("parallel", "Xeon A", "AVX512"), ("sequential", "Xeon B", "AVX2")):
        for s in (0, 1):
            run = write_run(tmp_path / f"{sampler}{s}", {"sampler": sampler, "seed": s})
            info = json.loads((run / "run.json").read_text())
            info["cpu"] = {"model": model, "vector_extensions": ["avx2"], "kernels": kernels}
            (run / "run.json").write_text(json.dumps(info))
            runs.append(run)
    report = analyse(runs)
    assert "cpu per group: parallel: Xeon A; sequential: Xeon B" in report.notes
    assert "kernels per group: parallel: AVX512; sequential: AVX2" in report.notes
    from sesa_cli.report.environment import runs_table

    assert list(runs_table(report.runs, report.labels)["cpu"]) == ["Xeon A (AVX512)"] * 2 + ["Xeon B (AVX2)"] * 2


def test_best_values_follow_each_metrics_declared_direction() -> None:
    """Issue 53: "best" took the maximum of every metric, so the best policy/pruned_mass and step time shown were
    the worst. Now the maximum where higher is better, the minimum where lower is, and no best value for a metric
    without a direction, as sesa_cli.metric_keys declares them."""
    from types import SimpleNamespace

    from sesa_cli.metric_keys import better
    from sesa_cli.report.tables import best_table, group_summary, summarize

    own = pd.DataFrame(
        {
            "eval/success": [0.2, 0.9, 0.5],
            "policy/pruned_mass": [0.9, 0.1, 0.3],
            "time/step_s": [2.0, 1.0, 3.0],
            "rollout/entropy": [0.1, 0.5, 0.2],
        }
    )
    assert [better(m) for m in own.columns] == ["higher", "lower", "lower", ""]
    run = SimpleNamespace(own=own, group="g", seed="0", path=Path("run"))
    summary = summarize([run])  # type: ignore[list-item]
    best = dict(zip(summary["metric"], summary["best"], strict=True))
    assert (best["eval/success"], best["policy/pruned_mass"], best["time/step_s"]) == (0.9, 0.1, 1.0)
    assert math.isnan(best["rollout/entropy"])
    assert dict(zip(summary["metric"], summary["final"], strict=True))["time/step_s"] == 3.0
    table = best_table(group_summary(summary))
    assert set(table.index) == {"eval/success", "policy/pruned_mass (lowest)", "time/step_s (lowest)"}
    assert table.loc["time/step_s (lowest)"].iloc[0].startswith("1.00")
