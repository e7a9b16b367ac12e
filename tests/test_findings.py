"""The README's "What sesa found" table is what scripts/findings.py makes of docs/results.md (issue 53), and the
script's reading of a page: which group, which table, which phrase."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tests.scripts import load

findings = load("findings")


def test_the_readme_table_is_generated_from_the_results_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert findings.block(page) in readme, "README.md's findings table is stale: run python scripts/findings.py"
    assert findings.rewrite(readme, page) == readme
    assert readme.count(findings.START) == 1


@pytest.mark.parametrize(
    ("cell", "answer"),
    [
        ("+0.066 [0.031, 0.106]", "higher"),
        ("-0.0217 [-0.0379, -0.0057]", "lower"),
        ("+0.0346 [-0.0150, 0.0842]", "no clear difference"),
        ("0 [-0.300, 0.300]", "no clear difference"),
        ("+1.89 [0.03, 4.00]", "higher"),
        ("-0.0125 [-0.0147, -0.0104]", "lower"),
    ],
)
def test_a_phrase_follows_the_interval_alone(cell, answer):
    assert findings.phrase(cell) == answer


PAGE = """# Results

## I. Parallel sampling collapses

Text.

| group | n | policy/effective_solutions | eval/success |
|---|---|---|---|
| [1] collapse parallel | 10 | 1.02 [1.01, 1.05] | 0.989 [0.981, 0.997] |

## IV. The agent task: FrozenLake

| group | n | eval/success | eval/pass@16 |
|---|---|---|---|
| [1] parallel | 5 | 0.859 [0.819, 0.898] | 0.903 [0.872, 0.931] |
| [2] sequential | 5 | 0.893 [0.877, 0.910] | 0.969 [0.950, 0.988] |

Difference to [1] parallel (group − baseline, final values, paired by seed):

| group | eval/success | eval/pass@16 |
|---|---|---|
| [2] sequential | +0.0346 [-0.0150, 0.0842] | +0.066 [0.031, 0.106] |
"""
ROWS = (
    findings.Row("I", "Collapse?", 1, (("policy/effective_solutions", "effective solutions"),), level=True),
    findings.Row("IV", "FrozenLake", 2, (("eval/success", "success"), ("eval/pass@16", "pass@16"))),
)


def test_a_row_reads_its_group_from_the_headline_or_the_difference_table():
    lines = findings.findings(PAGE, ROWS)
    assert (
        lines[2]
        == "| [I](docs/results.md#i-parallel-sampling-collapses) | Collapse? | effective solutions 1.02 [1.01, 1.05] |"
    )
    assert lines[3] == (
        "| [IV](docs/results.md#iv-the-agent-task-frozenlake) | FrozenLake | success no clear difference: "
        "+0.0346 [-0.0150, 0.0842]; pass@16 higher: +0.066 [0.031, 0.106] |"
    )


@pytest.mark.parametrize(
    ("row", "why"),
    [
        (findings.Row("II", "?", 1, (("eval/success", "success"),)), "no claim II"),
        (findings.Row("IV", "?", 3, (("eval/success", "success"),)), r"no group \[3\]"),
        (findings.Row("IV", "?", 2, (("eval/pass@4", "pass@4"),)), "no eval/pass@4 column"),
        (findings.Row("I", "?", 1, (("eval/success", "success"),)), "no difference table"),
        # a row whose group is not the sampler it reads as (a reordered page) is refused, not printed
        (findings.Row("IV", "?", 2, (("eval/success", "success"),), level=True), "not sampler=parallel"),
    ],
)
def test_a_page_without_what_a_row_reads_is_an_error(row, why):
    with pytest.raises(findings.PageError, match=why):
        findings.findings(PAGE, (row,))


H2H_PAGE = """## IX. Exploration methods head to head: FrozenLake

Difference to [1] parallel grpo (group − baseline, final values, paired by seed):

| group | eval/success | policy/effective_solutions |
|---|---|---|
| [2] sequential grpo | -0.01 [-0.03, 0.01] | +2.31 [0.62, 4.00] |
| [3] parallel passk | -0.05 [-0.08, -0.02] | +0.40 [0.10, 0.70] |
| [4] parallel outcome_bonus | -0.02 [-0.04, 0.00] | +0.90 [-0.10, 1.90] |
| [5] sequential outcome_bonus | -0.02 [-0.04, 0.00] | +3.10 [2.00, 4.20] |
"""
LTE_ROW = "| [6] lte grpo | +0.00 [-0.02, 0.02] | +1.20 [0.30, 2.10] |\n"


def test_a_best_row_names_the_published_method_with_the_highest_mean_difference():
    """Of the published methods' groups only (i.i.d. and LTE; SESA and its combinations are not), the highest mean:
    [4] here, though its interval spans 0 and [5], a SESA combination, is higher still; with an LTE group above it,
    LTE."""
    row = findings.Row("IX", "best: {method} − GRPO", 0, (("policy/effective_solutions", "d"),),
                       best="policy/effective_solutions")  # fmt: skip
    line = findings.findings(H2H_PAGE, (row,))[2]
    assert "| best: outcome_bonus − GRPO | d no clear difference: +0.90 [-0.10, 1.90] |" in line
    line = findings.findings(H2H_PAGE + LTE_ROW, (row,))[2]
    assert "| best: LTE − GRPO | d higher: +1.20 [0.30, 2.10] |" in line
    # GRPO given another budget (claim XV's group, listed in IX) is no published method, however many it keeps
    items = {"IX": {"[2]": {"sampler": "sequential", "algo": "grpo"}, "[3]": {"sampler": "parallel", "algo": "passk"},
                    "[4]": {"sampler": "parallel", "algo": "outcome_bonus"},
                    "[5]": {"sampler": "sequential", "algo": "outcome_bonus"},
                    "[6]": {"sampler": "parallel", "algo": "grpo", "sampler.group_size": "16"}}}  # fmt: skip
    bigger = "| [6] parallel grpo group_size=16 | +0.00 [-0.02, 0.02] | +5.00 [4.00, 6.00] |\n"
    line = findings.findings(H2H_PAGE + bigger, (row,), items)[2]
    assert "| best: outcome_bonus − GRPO | d no clear difference: +0.90 [-0.10, 1.90] |" in line
    with pytest.raises(findings.PageError, match="no published method's group with a eval/pass@16"):
        findings.findings(H2H_PAGE, (findings.Row("IX", "?", 0, (("eval/success", "s"),), best="eval/pass@16"),))


def test_no_answer_rests_on_a_marked_exact_figure_and_runs_lost_are_said():
    page = """# Results

## IV. The agent task: FrozenLake

| group | n | runs lost | eval/success | policy/effective_solutions | policy/pruned_mass |
|---|---|---|---|---|---|
| [1] parallel | 5 | 1 of 5 runs lost | 0.859 [0.819, 0.898] | 1.20 [1.10, 1.30] | 0.002 [0.001, 0.003] |
| [2] sequential (!) | 5 | 0 | 0.893 [0.877, 0.910] | 2.10 [1.90, 2.30] † | 0.200 [0.010, 0.390] |

Difference to [1] parallel (group − baseline, final values, paired by seed):

| group | eval/success | policy/effective_solutions | policy/pruned_mass |
|---|---|---|---|
| [2] sequential | +0.0346 [-0.0150, 0.0842] | +0.90 [0.70, 1.10] † | +0.198 [0.009, 0.388] |
"""
    rows = (findings.Row("IV", "q", 2, (("eval/success", "success"), findings.EXACT_DIVERSITY)),)
    (line,) = findings.findings(page, rows)[2:]
    assert "success no clear difference: +0.0346 [-0.0150, 0.0842]" in line
    assert "winning episodes (exact policy) not read (†" in line
    assert "higher" not in line
    assert line.endswith("; baseline 1 of 5 runs lost |")


def test_what_a_group_is_is_read_from_its_sections_items_not_its_label():
    """A section whose groups.csv records each group's items: the best published method and the fixed group's check
    read them (here the labels' words would say otherwise: [4] is a SESA combination, [3] Pass@k at k=2)."""
    items = {"IX": {"[2]": {"sampler": "sequential", "algo": "grpo"}, "[3]": {"sampler": "parallel", "algo": "passk",
                                                                           "algo.advantage.k": "2"},
                    "[4]": {"sampler": "sequential", "algo": "outcome_bonus"},
                    "[5]": {"sampler": "parallel", "algo": "darling"}}}  # fmt: skip
    row = findings.Row("IX", "best: {method} − GRPO", 0, (("policy/effective_solutions", "d"),),
                       best="policy/effective_solutions")  # fmt: skip
    line = findings.findings(H2H_PAGE, (row,), items)[2]
    assert "| best: darling − GRPO | d higher: +3.10 [2.00, 4.20] |" in line
    fixed = findings.Row("IX", "k=2", 3, (("eval/success", "s"),), label=(("algo.advantage.k", "2"),))
    assert "k=2" in findings.findings(H2H_PAGE, (fixed,), items)[2]
    wrong = findings.Row("IX", "k=2", 2, (("eval/success", "s"),), label=(("algo.advantage.k", "2"),))
    with pytest.raises(findings.PageError, match=r"not algo\.advantage\.k=2"):
        findings.findings(H2H_PAGE, (wrong,), items)


TUNED_PAGE = """## XIX. Equal tuning: FrozenLake 4x4

Difference to [1] parallel grpo (group − baseline, final values, paired by seed):

| group | eval/success | eval/distinct_correct@16 |
|---|---|---|
| [2] parallel passk | -0.10 [-0.20, -0.05] | +4.00 [3.00, 5.00] |
| [3] parallel passk advantage.k=2 | -0.01 [-0.03, 0.01] | +1.50 [0.50, 2.50] |

Each pick at equal compute: against the GRPO group whose cost (relative to [1] parallel grpo) is nearest its own:

| method | pick | cost | GRPO at the nearest compute | eval/success − it | eval/distinct_correct@16 − it |
|---|---|---|---|---|---|
| passk | algo.advantage.k=2 | 1.09x | [1] parallel grpo (1.00x) | -0.01 [-0.03, 0.01] | +1.50 [0.50, 2.50] |

{winner}

## XX. Equal tuning: the picks on other seeds

Claim XIX's picks on these seeds, which chose nothing: 1 of 1 agree.

| method | pick | eval/success − [1] parallel grpo, here | eval/distinct_correct@16 − [1] parallel grpo, here | agree |
|---|---|---|---|---|
| passk | algo.advantage.k=2 | +0.01 [-0.01, 0.03] | +0.90 [0.10, 1.70] | yes |
"""


def test_an_equal_tuning_row_reads_the_winner_its_section_names_at_equal_compute_and_on_other_seeds():
    """The winner is the group the section's winner line names (its criterion is scripts/results.py's, not
    re-derived here), with its difference at equal compute and whether the check claim's seeds agree; a section
    whose picks all fell below the floor says so."""
    row = findings.Row("XIX", "tuned: {method} − GRPO", 0, (("eval/success", "success"),
                       ("eval/distinct_correct@16", "ways")), check="XX")  # fmt: skip
    items = {"XIX": {"[2]": {"sampler": "parallel", "algo": "passk"},
                     "[3]": {"sampler": "parallel", "algo": "passk", "algo.advantage.k": "2"}}}  # fmt: skip
    page = TUNED_PAGE.format(winner=f"{findings.WINNER} [3] **passk** (algo.advantage.k=2; the criterion): ...")
    line = findings.findings(page, (row,), items)[2]
    assert "| tuned: passk − GRPO | success no clear difference: -0.01 [-0.03, 0.01]; ways higher: +1.50" in line
    assert "ways higher: +1.50 [0.50, 2.50]; the same at equal compute; claim XX's" in line  # GRPO's own group
    pick = "| passk | algo.advantage.k=2 | 1.09x | [1] parallel grpo (1.00x) |"
    sized = page.replace(pick, "| passk | algo.advantage.k=2 | 1.09x | [4] parallel grpo group_size=10 (1.10x) |")
    line = findings.findings(sized, (row,), items)[2]
    assert "at equal compute (against GRPO with 10 a prompt, 1.10x): success -0.01 [-0.03, 0.01], ways +1.50" in line
    assert findings._grpo_at("[41] parallel grpo group_size=10 (1.19x)") == "GRPO with 10 a prompt, 1.19x"
    assert "claim XX's seeds agree (success +0.01 [-0.01, 0.03], ways +0.90 [0.10, 1.70])" in line
    page = TUNED_PAGE.format(winner=f"{findings.WINNER} none; no pick's success clears [1] parallel grpo's -0.02.")
    assert "| tuned: none − GRPO | no pick's success clears the floor |" in findings.findings(page, (row,), items)[2]
    with pytest.raises(findings.PageError, match="no line"):
        findings.findings(TUNED_PAGE.format(winner=""), (row,), items)


def test_the_page_names_its_winner_as_the_readme_table_reads_it():
    from tests.scripts import results

    assert results.WINNER == findings.WINNER
