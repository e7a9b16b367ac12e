"""Every level of a warm-started model the tests still assert, with the value measured and the margin it keeps.

Most tests construct the property they check (a hand-set head, fixed logits, a policy made to favour some tokens) or
assert a relation (sampled log-probs equal scored ones; an update raises the log-prob of rewarded rows). A few need
the test base to reach some competence before their check means anything: enough valid answers to compare, enough
cut items to see what follows a cut. Those assert ``LEVELS[name].check(value)`` and nothing else about the level.

Each level records the bound the test asserts, the value measured on the machine that set it (the session's test
base, warm-started on one torch thread, torch 2.13.0+cpu, transformers 5.24.0, an AVX-512 Xeon under its own
kernels) and ``drift``: the largest change of the value seen between bases that differ only in float rounding
(another thread count, another CPU, a rebuilt warm start). Since issue 49 the test bases are measured under three
kernel choices of that CPU, its own (ATen's AVX512), ``ATEN_CPU_CAPABILITY=avx2`` and ``ATEN_CPU_CAPABILITY=default``
(the portable kernels): another CPU rounds as one of these does, and the drift covers all three. The bound sits at least ``MARGIN`` drifts away from the measured value: tests/test_levels.py checks
that for every level, and that each level is asserted by a test. When a run sees a value that moved by more than
the documented drift, ``check`` warns (``LevelDriftWarning``, in pytest's summary) before the bound is reached:
widen ``drift`` and the bound then, do not tighten the test. ``SESA_LEVELS_LOG=FILE`` appends every checked value
to FILE (``name value`` lines), to re-measure them.

Audited and left as they are (no float drift to keep a margin from): the warm-start corpora's statistics
(``random.Random`` with a fixed seed and the task's own code: the same text on every machine; tests/test_countdown.py,
test_math_task.py, test_agent_tasks.py), timing bounds of graders and parsers (wide CPU-time limits, not quality),
and bounds that hold by construction (probabilities in [0, 1], a mass of disjoint answers at most 1).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

MARGIN = 3.0
"""A bound sits at least this many drifts from the measured value."""


class LevelDriftWarning(UserWarning):
    """A level moved by more than its documented drift (still within its bound)."""


@dataclass(frozen=True)
class Level:
    test: str
    """The test that asserts it (file::name)."""
    what: str
    side: str
    """``min``: the value must be >= bound; ``max``: <= bound."""
    bound: float
    measured: float
    drift: float
    drift_source: str
    """Where the drift figure comes from: a change seen between two bases, or (stated so) an assumption."""
    why: str
    """Why the test needs the level at all."""

    def margin(self, value: float | None = None) -> float:
        """How far ``value`` (default: the measured one) is from the bound, on the side it must stay."""
        value = self.measured if value is None else value
        return value - self.bound if self.side == "min" else self.bound - value

    def check(self, value: float, name: str = "") -> None:
        log = os.environ.get("SESA_LEVELS_LOG")
        if log:
            with open(log, "a") as fh:
                fh.write(f"{name or self.what} {value!r}\n")
        assert self.margin(value) >= 0, (
            f"{self.what} = {value} is past the bound {self.bound} ({self.side}); measured {self.measured} "
            f"with a documented drift of {self.drift} (tests/levels.py)"
        )
        if abs(value - self.measured) > self.drift:
            warnings.warn(
                f"{self.what} = {value} moved {abs(value - self.measured):.4g} from the measured {self.measured}, "
                f"more than the documented drift {self.drift}: update tests/levels.py",
                LevelDriftWarning,
                stacklevel=2,
            )


# The 4x4x4 test world's base is warm-started for 600 steps (tests/conftest.py's TINY): at the smoke's 300 its
# competence swung with the kernels (valid answers among 128 draws 34, 76 and 119 under AVX-512, AVX2 and the
# portable kernels; rewarded rows 7 to 37), at 600 it holds (107, 89, 128; rewarded rows 27 to 37). Counts without a
# measurement on a second base take a drift of 20% of their value.
ASSUMED = "not measured on a second base: 20% of the value assumed"
LEVELS: dict[str, Level] = {
    "sampled_answers_checked": Level(
        test="test_policy_metrics.py::test_solution_probabilities_match_the_samplers_own_logps",
        what="answers among 128 draws that are an enumerated leaf (their log-probs are compared)",
        side="min",
        bound=8,
        measured=107,
        drift=21,
        drift_source="107, 89 and 128 under AVX-512, AVX2 and the portable kernels (600-step base): 21 seen",
        why="the relation (sampled log-prob = exact log-prob) needs some answers to compare",
    ),
    "cut_items_at_5_tokens": Level(
        test="test_chains.py::test_a_cut_solution_is_followed_by_the_stop_before_the_next_one",
        what="chain items (of 12) cut by a 5-token budget",
        side="min",
        bound=3,
        measured=12,
        drift=2.2,
        drift_source=ASSUMED,
        why="what follows a cut item is only checked on cut items",
    ),
    "stage_two_followed": Level(
        test="test_chains.py::test_stage_two_follows_its_sketch_at_the_test_base",
        what="share of stage-II paths that start with their sketched region (32 chains, test base)",
        side="min",
        bound=0.38,
        measured=0.71875,
        drift=0.11,
        drift_source="0.828, 0.719 and 0.816 under an Intel Xeon's AVX-512, AVX2 and portable kernels, 0.695, 0.645 "
        "and 0.609 under an AMD EPYC's (600-step base): the value is the Intel AVX2 one, the middle of the six, "
        "0.110 seen from it (the bound, 4.8 sd of 256 paths above chance, sits 3 drifts below)",
        why="sampler.stage1=auto's choice for the path task rests on its base following its sketches (chance: 0.25)",
    ),
    "agent_plans_followed": Level(
        test="test_chains.py::test_agent_plans_are_carried_out_at_the_test_base",
        what="share of stage-II FrozenLake episodes that play their plan's first turn (16 chains of 8, test base)",
        side="min",
        bound=0.6,
        measured=0.953125,
        drift=0.1,
        drift_source="0.945, 0.938 and 0.945 under AVX-512, AVX2 and the portable kernels: 0.016 seen; 0.1 kept",
        why="two-stage sampling is SESA only when stage II carries out its plans (issue 29; chance: 1 in 20)",
    ),
    "sokoban_plans_followed": Level(
        test="test_chains.py::test_sokoban_plans_are_carried_out_at_a_small_base",
        what="share of stage-II Sokoban episodes that play their plan's first move (16 chains of 4, small base)",
        side="min",
        bound=0.6,
        measured=0.921875,
        drift=0.1,
        drift_source="0.922, 0.953 and 0.9375 under AVX-512, AVX2 and the portable kernels: 0.031 seen; 0.1 kept",
        why="two-stage sampling is SESA only when stage II carries out its plans (issue 29; chance: 1 in 4)",
    ),
    "countdown_stage_two_followed": Level(
        test="test_chains.py::test_countdown_stage_two_carries_out_its_sketch_at_a_small_base",
        what="share of stage-II answers that perform their sketched step (16 puzzles x 8, small countdown base)",
        side="min",
        bound=0.5,
        measured=0.71875,
        drift=0.06,
        drift_source="0.719, 0.711 and 0.734 under AVX-512, AVX2 and the portable kernels; 0.719, 0.711 and 0.742 on "
        "bases warm-started with learning rates 1e-7 apart (relative): 0.031 "
        "seen, taken as 0.06",
        why="stage II carries out Countdown's sketches only through the step word its solve prompt ends with "
        "(the layout before it followed 0.18 at the full base)",
    ),
    "stage_one_cut": Level(
        test="test_chains.py::test_stage_two_follows_its_sketch_at_the_test_base",
        what="share of sketches cut by their budget (32 chains, test base)",
        side="max",
        bound=0.35,
        measured=0.01953125,
        drift=0.08,
        drift_source="0.020, 0.043 and 0.031 under AVX-512, AVX2 and the portable kernels (600-step base): 0.024 seen; "
        "0.048 seen between two earlier bases, taken as 0.08",
        why="a sketch cut by the budget names no region to follow",
    ),
    "rewarded_rows": Level(
        test="test_trainer.py::test_update_raises_the_logprob_of_rewarded_samples",
        what="rewarded rows of one batch when half the 64 leaves are targets",
        side="min",
        bound=1,
        measured=32,  # sampler=parallel; 27 with sampler=sequential
        drift=6,
        drift_source="parallel 32, 27, 37 and sequential 27, 28, 29 under an Intel Xeon's AVX-512, AVX2 and portable "
        "kernels, 38, 36, 35 and 33, 28, 31 under an AMD EPYC's (600-step base): 6 seen from 32",
        why="the relation (an update raises rewarded rows' log-probs) needs rewarded rows",
    ),
    "multi_turn_episodes": Level(
        test="test_episodes.py::test_episode_is_the_tasks_transcript",
        what="FrozenLake episodes (of 24) that ran more than one turn",
        side="min",
        bound=1,
        measured=23,
        drift=4.6,
        drift_source=ASSUMED,
        why="feedback between turns is only checked on episodes with a second turn",
    ),
    # the slow test on the default 8x8x8 world (its own base: minutes): docs/samplers.md's means over sampling seeds
    # 0-4, 64 chains each, where the test draws 64 chains of seed 0
    "default_base_followed": Level(
        test="test_chains.py::test_default_path_base_meets_issue_16_chain_health",
        what="share of stage-II paths that follow their sketch (default world, 64 chains)",
        side="min",
        bound=0.7,
        measured=0.975,
        drift=0.07,
        drift_source="the test base's 0.04 seen, scaled to a wider margin: 0.07 assumed",
        why="Task.sketch_followed (stage1=auto picks sketches for the path task) claims at least 80% on average",
    ),
    "default_base_cut": Level(
        test="test_chains.py::test_default_path_base_meets_issue_16_chain_health",
        what="share of sketches cut by their budget (default world, 64 chains)",
        side="max",
        bound=0.2,
        measured=0.0,
        drift=0.05,
        drift_source="the test base's 0.048 seen",
        why="issue 16: the sketch budget fits the default world's regions",
    ),
    "default_base_distinct": Level(
        test="test_chains.py::test_default_path_base_meets_issue_16_chain_health",
        what="distinct valid sketches per chain of 8 (default world, 64 chains)",
        side="min",
        bound=4,
        measured=6.58,
        drift=0.5,
        drift_source="not measured on a second base: 8% of the value assumed (the followed share's relative move)",
        why="issue 16: a chain of 8 sketches names most of the 8 regions",
    ),
}
