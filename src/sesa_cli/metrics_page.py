"""``docs/metrics.md``: every metric key sesa writes, from sesa_cli.metric_keys and the methods' own declarations.

``python -m sesa_cli.metrics_page > docs/metrics.md`` writes it (a test keeps the page equal to :func:`markdown`);
importing sesa_cli.methods registers sesa's methods, whose classes declare their keys.
"""

from __future__ import annotations

from sesa_cli import methods  # noqa: F401  (registers the methods: their keys are declared)
from sesa_cli.metric_keys import METRIC_KEYS, RENAMED, declared

__all__ = ["PRUNED_SECTION", "SOLUTION_SECTION", "markdown"]

SOLUTION_SECTION = """## What a solution is

Every count of solutions reads one key per answer, ``Score.key`` (sesa_cli.tasks.base): `distinct@{k}`,
`distinct_correct@{k}`, `coverage@{k}`, the exact `policy/effective_solutions`, `policy/solutions_above_1pct` and
`policy/solution_entropy` (answers with the same key are summed into one solution), `rollout/distinct*`,
`chain/distinct` (a sketch's key), and every method that rewards or counts solutions (the outcome bonuses, the
unlikeliness reward, SESA's `distinct_solutions` loss and found-solutions term, LTE's distinct wrong answers).

* Path task: the leaf named. Countdown: the equation up to commutativity, associativity and sign moves. Math: the
  final answer.
* Agent tasks (FrozenLake, Sokoban, Sudoku): what the episode *did*, not what its replies typed
  (`task.solution_key`). The default, `route`, is the states the episode went through (FrozenLake the player's cell,
  Sokoban the player and the boxes, Sudoku the board) with every loop erased, written as the moves between them: a
  move into a wall, a push against a blocked box or a placement that changes nothing adds nothing, and neither
  does a detour that comes back to a state it left. `states` keeps such detours (only consecutive repeats go);
  `actions` is every executed action as typed, the key before 2026-12-07, under which a policy rewarded for new
  keys learned to make them by bumping into walls (docs/findings.md). A valid episode that never changed its state
  has the key `stay`; an invalid reply none. Runs written before `task.solution_key` existed reload with `actions`,
  the key their metrics were computed with. The three readings once, on FrozenLake 4x4 final checkpoints (`sesa eval
  ckpt=RUN task.solution_key=route|states|actions`, 2026-12-07): the default run (SESA, seed 0) has 2.12 effective
  solutions by route, 2.16 by states, 3.23 by actions; the outcome bonus, trained on routes (claim IX, seeds 0-4),
  7.5, 8.5, 10.8, 6.0 and 12.9 by route, 8.0, 8.6, 10.8, 6.0 and 12.9 by states, 17.2, 15.5, 22.3, 16.0 and 28.8 by
  actions (0.14-0.42 of its mass pruned). Detours that come back are rare in what these policies win; strings that
  differ by moves that change nothing are not. The page reports routes, the stricter reading."""
"""docs/metrics.md's section on what a solution key is (:func:`markdown`); code points readers to it."""
PRUNED_SECTION = """## Exact figures and pruned mass

An agent task's exact `policy/*` figures come from a walk over every episode the policy can play, cut where a
branch is less probable than `eval.walk_min_prob` (1e-4) or beyond the `eval.walk_branches` (32) most probable
branches live at once; `policy/pruned_mass` is the probability it cut. The true success probability lies in
[`policy/target_mass`, `policy/target_mass` + `policy/pruned_mass`], the true valid mass likewise, and the other
figures (effective solutions, solutions above 1%, solution entropy) describe the walked part of the policy only.
So `policy/pruned_mass` stands beside the exact figures in every table that shows them (the run's final table, the
live view, `sesa eval`, every report table and docs/results.md), and above 0.05 (`sesa_cli.intervals.PRUNED_LIMIT`)
an exact figure is never shown bare: the mass figures as the interval they lie in, the others marked †. The
sampled-gap check (`policy/sampled_gap` against 3 standard deviations) fails there too: an interval that wide tests
nothing, so a pass would say nothing. A report's tables are means over seeds: there a group's exact cells carry †
where any of its runs' exact figures cover too little of its policy (its walk cut more than 0.05, or under half of
its mass is valid; the notes name the run and the reason), and the report bases no verdict on them: its sentence
rests on a sampled metric instead. A run whose sampled success lies more than 3 standard deviations from its exact
interval is named in the notes and the report bases no verdict on its group's exact figures either, but its cells
are not marked: the exact figure covers the whole policy, and one evaluation's draws can make the gap. Every group
of a seed draws its evaluation from the same random numbers (groups differ by their policies, not their luck), so
one unlikely draw shows in every group of that seed: on the path task, seed 4's final evaluation finds 4 failures
in 64 samples of a collapsed policy whose exact success is 0.992 (4.8 sd by the normal approximation; the binomial
tail is 0.002), and the same checkpoint evaluated at `seed=1234` finds 1 (0.65 sd).

Where it costs: the warm-started base spreads its mass over millions of episodes, so the walk cuts nearly all of it
at step 0 (its figures are marked, as they should be); a trained policy concentrates. The default recipes at their
last step stay under the bound with the default walk (docs/measurements.md, "The exact walk's budget")."""
"""docs/metrics.md's section on the exact walk's pruned mass (:func:`markdown`)."""


def markdown() -> str:
    """``docs/metrics.md``: the table of every key, then the renamed ones."""
    lines = [
        "# Metric keys",
        "",
        "Generated from `sesa_cli/metric_keys.py` and the methods' own declarations",
        "(`python -m sesa_cli.metrics_page > docs/metrics.md`); a test keeps this page equal to it. `{k}` stands for a",
        "sample count (1, 2, 4, ..., n). *better*: which way is good (the report's best value over a run's steps",
        "follows it; empty: a diagnostic, a count or a setting, no best value).",
        "",
        "| key | meaning | formula | live label | better |",
        "|---|---|---|---|---|",
    ]
    for entry in METRIC_KEYS:
        formula = f"`{entry.formula}`" if entry.formula else ""
        label = f"`{entry.label}`" if entry.label else ""
        lines.append(f"| `{entry.pattern}` | {entry.meaning} | {formula} | {label} | {entry.better} |")
    if declared():
        lines += ["", "## Metrics the methods declare", ""]
        lines += ["Each method's class carries the keys it writes (a plug-in's are declared the same way).", ""]
        lines += ["| key | meaning | declared by | better |", "|---|---|---|---|"]
        for entry, by in declared():
            lines.append(f"| `{entry.pattern}` | {entry.meaning} | {by} | {entry.better} |")
    lines += ["", *SOLUTION_SECTION.splitlines(), "", *PRUNED_SECTION.splitlines()]
    lines += ["", "Renamed keys (run dirs that hold the old names still load under the new ones):", ""]
    lines += ["| old | current |", "|---|---|"]
    lines += [f"| `{old}` | `{new}` |" for old, new in RENAMED.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
