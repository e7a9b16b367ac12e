"""What a figure covers (issue 66): exact figures beside their pruned mass and marked or bounded beyond it, runs lost
counted beside a group's mean, Cover@τ and the pass@k curve at every k from each instance's counts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sesa_cli import metrics as M
from sesa_cli.intervals import EXACT_MARK, PRUNED_LIMIT, exact_text, gap_fails, over_pruned
from sesa_cli.metric_keys import key as metric_key
from sesa_cli.report import analyse, write_report
from sesa_cli.report.columns import with_pruned
from sesa_cli.report.document import AGAINST
from sesa_cli.report.plots import Layout, pass_at_k_finals
from tests.fake_runs import compute_block, write_multirun, write_sized_head_to_head
from tests.test_report import _set_final

PRUNED = metric_key("policy/pruned_mass")


# ------------------------------------------------------------------------------------------ exact figures
def test_an_exact_figure_of_a_walk_that_pruned_too_much_is_a_bound_or_marked() -> None:
    row = {"policy/target_mass": 0.081, "policy/pruned_mass": 0.679, "policy/effective_solutions": 22.06}

    def shown(v: float) -> str:
        return f"{v:.3g}"

    assert over_pruned(row) == pytest.approx(0.679)
    assert exact_text("policy/target_mass", 0.081, row, shown) == "[0.081, 0.76]"  # the interval it lies in
    assert exact_text("policy/effective_solutions", 22.06, row, shown) == f"22.1 {EXACT_MARK}"
    assert exact_text("policy/sampled_gap", 0.0, row, shown) == "0 (fails: untestable)"
    assert exact_text("policy/pruned_mass", 0.679, row, shown) == "0.679"  # says how far to trust the rest
    assert exact_text("eval/success", 0.342, row, shown) == "0.342"  # sampled: not the walk's
    covered = {**row, "policy/pruned_mass": PRUNED_LIMIT}
    assert over_pruned(covered) is None
    assert exact_text("policy/effective_solutions", 22.06, covered, shown) == "22.1"


def test_the_sampled_gap_check_fails_where_the_interval_is_too_wide_to_test() -> None:
    assert not gap_fails(0.0, 0.01)
    assert gap_fails(3.5, 0.01)  # the sampled success lies outside the exact interval
    assert gap_fails(0.0, 0.679)  # a pass would say nothing: the interval [0.081, 0.760] holds almost anything


def test_the_pruned_mass_stands_after_the_exact_figures_of_a_table() -> None:
    logged = {"eval/success", "policy/target_mass", "policy/effective_solutions", PRUNED}
    assert with_pruned(["eval/success", "policy/target_mass", "policy/effective_solutions"], logged) == [
        "eval/success",
        "policy/target_mass",
        "policy/effective_solutions",
        PRUNED,
    ]
    assert with_pruned(["eval/success"], logged) == ["eval/success"]  # no exact figure shown: no column
    assert with_pruned(["policy/target_mass"], {"policy/target_mass"}) == ["policy/target_mass"]  # path task


def test_a_report_over_a_run_whose_walk_pruned_too_much_marks_its_cells_and_reads_no_verdict_on_them(
    tmp_path: Path,
) -> None:
    sweep = write_multirun(tmp_path / "sweep", policy=True, seeds=(0, 1, 2))
    for job in range(6):
        _set_final(sweep / str(job), policy__pruned_mass=0.01)
    clean = analyse([sweep])
    assert PRUNED in clean.headline
    assert clean.answer().startswith(
        "[2] sequential kept more solutions than [1] parallel: policy/effective_solutions"
    )
    _set_final(sweep / "4", policy__pruned_mass=0.32)  # seed 1 of the sequential group
    report = analyse([sweep])
    assert [(report.labels[m.group], m.run, m.kind) for m in report.marks] == [("[2] sequential", "1", "exact")]
    assert "cut 0.320 of the policy's mass" in report.marks[0].text
    headline = report.headline_frame()
    row = headline[headline["group"].str.startswith("[2]")].iloc[0]
    assert row[metric_key("policy/effective_solutions")].endswith(EXACT_MARK)
    assert not row[PRUNED].endswith(EXACT_MARK)
    assert not row[metric_key("eval/success")].endswith(EXACT_MARK)
    other = headline[headline["group"].str.startswith("[1]")].iloc[0]
    assert not other[metric_key("policy/effective_solutions")].endswith(EXACT_MARK)
    answer = report.answer()
    assert answer is not None
    assert "policy/effective_solutions" not in answer.partition(".")[0]  # the verdict reads a sampled metric
    difference = report.difference_frame()
    assert difference is not None
    assert difference.iloc[0][metric_key("policy/effective_solutions")].endswith(EXACT_MARK)


# ------------------------------------------------------------------------------------------ runs lost
def test_a_group_that_lost_a_run_says_so_in_its_table_and_headline(tmp_path: Path) -> None:
    sweep = write_multirun(tmp_path / "sweep", seeds=(0, 1, 2, 3, 4))
    assert analyse([sweep]).lost_sentence() is None
    _set_final(sweep / "7", eval__valid=0.02)  # sequential seed 2: its replies went to invalid text
    report = analyse([sweep])
    headline = report.headline_frame()
    assert list(headline["runs lost"]) == ["0", "1 of 5 runs lost"]
    answer = report.answer()
    assert answer is not None
    assert answer.endswith("Runs lost (ended broken, kept in the means): [2] sequential: 1 of 5 runs lost.")
    lost = [m for m in report.marks if m.kind == "lost"]
    assert [(m.run, m.text) for m in lost] == [("2", "lost: valid replies 0.02 at the end")]
    markdown = write_report(report, tmp_path / "report")["markdown"].read_text()
    assert "| [2] sequential (!) | 5 | 1 of 5 runs lost |" in markdown  # the note says which seed and why
    assert "1 of 5 runs lost." in markdown


def test_success_below_the_base_or_a_non_finite_loss_is_a_run_lost(tmp_path: Path) -> None:
    sweep = write_multirun(tmp_path / "sweep", seeds=(0, 1, 2))
    _set_final(sweep / "0", eval__success=0.01)  # the base (step 0) of seed 0 succeeds 0.05
    lines = (sweep / "4").joinpath("metrics.jsonl").read_text().splitlines()
    row = json.loads(lines[3])
    row[metric_key("optim/nonfinite_losses")] = 1.0
    lines[3] = json.dumps(row)
    (sweep / "4" / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    report = analyse([sweep])
    texts = {(report.labels[m.group], m.run): m.text for m in report.marks if m.kind == "lost"}
    assert texts == {
        ("[1] parallel", "0"): "lost: success 0.010 below the base model's 0.050",
        ("[2] sequential", "1"): "lost: a non-finite loss",
    }
    assert report.lost() == {report.baseline: (1, 3), next(g for g in report.labels if g != report.baseline): (1, 3)}


# ------------------------------------------------------------------------------------------ Cover@tau and pass@k
def test_cover_at_tau_counts_the_prompts_solved_reliably() -> None:
    # 4 prompts of 8 samples: 8, 4, 3 and 0 correct; at tau 0.5 two are covered (8/8, 4/8), at 0.8 one
    assert M.cover_at([8, 4, 3, 0], [8, 8, 8, 8], 0.5) == 0.5
    assert M.cover_at([8, 4, 3, 0], [8, 8, 8, 8], 0.8) == 0.25
    # a guesser: every prompt solved once in 8 (pass@8 = 1 everywhere), none covered
    assert M.cover_at([1, 1, 1, 1], [8, 8, 8, 8], 0.5) == 0.0
    assert M.pass_at_k(8, 1, 8) == 1.0
    with pytest.raises(ValueError, match="tau"):
        M.cover_at([1], [2], 0.0)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        M.cover_at([3], [2], 0.5)


def test_the_pass_at_k_curve_from_counts_holds_every_k_and_agrees_with_the_logged_powers_of_two(
    tmp_path: Path,
) -> None:
    sweep = write_multirun(tmp_path / "sweep", seeds=(0, 1))
    counts = {"step": 10, "samples": [16, 16, 16], "correct": [0, 3, 16]}
    for job in range(4):
        (sweep / str(job) / "eval_counts.jsonl").write_text(json.dumps(counts) + "\n")
        row = {f"eval__pass@{k}": sum(M.pass_at_k(16, c, k) for c in counts["correct"]) / 3 for k in (1, 2, 4, 8)}
        _set_final(sweep / str(job), **row)
    report = analyse([sweep])
    curves = pass_at_k_finals(Layout.of(report.runs))
    assert curves is not None
    frame = next(iter(curves.values()))
    assert list(frame.index) == list(range(1, 17))  # every k up to the samples, not only the logged powers of two
    for k in (1, 2, 4, 8):
        logged = report.runs[0].own[metric_key("eval/pass@{k}", k=k)].dropna().iloc[-1]
        assert frame.iloc[k - 1, 0] == pytest.approx(logged, rel=1e-12)
    assert frame.iloc[15, 0] == pytest.approx(2 / 3)  # pass@16: the two prompts with a success
    assert math.isclose(frame.iloc[0, 0], (0 + 3 / 16 + 1) / 3)
    files = write_report(report, tmp_path / "report")
    assert "pass_at_k" in files["plots"]


# ------------------------------------------------------------------------------------------ cost
def test_each_group_shows_its_training_cost_relative_to_the_baseline(tmp_path: Path) -> None:
    sweep = write_multirun(tmp_path / "sweep", seeds=(0, 1))
    assert "cost" not in analyse([sweep]).headline_frame().columns  # runs written before compute was recorded
    for job, flops in enumerate((100, 140, 150, 150)):  # parallel seeds 0, 1; sequential seeds 0, 1
        info = json.loads((sweep / str(job) / "run.json").read_text())
        (sweep / str(job) / "run.json").write_text(json.dumps({**info, "compute": compute_block(flops * 10**9)}))
    report = analyse([sweep])
    assert list(report.headline_frame()["cost"]) == ["1.00x", "1.25x"]  # 150 / 120: sequential's mean over GRPO's
    difference = report.difference_frame()
    assert difference is not None
    assert list(difference["cost"]) == ["1.25x"]


def test_each_group_is_set_against_grpo_given_the_compute_nearest_its_own(tmp_path: Path) -> None:
    """The head to head at equal compute (issue 69): a method costing twice GRPO's group of 8 is set against GRPO's
    group of 16, a method costing as much against the group of 8; GRPO at its other size is a baseline, not a row."""
    sweep, more = write_sized_head_to_head(tmp_path)
    report = analyse([sweep, more], ["1", "*"])
    groups = list(report.labels)  # parallel, sequential, parallel group_size=16, passk
    assert report.sized_baselines() == pytest.approx({groups[0]: 1.0, groups[2]: 2.0})
    equal = report.equal_compute_frame()
    assert equal is not None
    pairs = zip(equal["group"], equal[AGAINST], strict=True)
    rows = {group.split(" ", 1)[0]: against.split(" ", 1)[0] for group, against in pairs}
    assert rows == {"[2]": "[3]", "[4]": "[1]"}  # sequential (2.1x) against the group of 16 (2.0x), passk against 8
    difference = report.difference_frame()
    assert difference is not None
    success = "eval/success" if "eval/success" in equal.columns else equal.columns[3]
    passk = list(difference["group"]).index(equal["group"].iloc[1])
    assert equal[success].iloc[1] == difference[success].iloc[passk]  # against the baseline itself: the same cell
    sized_only = analyse([sweep], ["1", "*"])
    assert sized_only.equal_compute_frame() is None  # GRPO at one size: nothing to set a method against
