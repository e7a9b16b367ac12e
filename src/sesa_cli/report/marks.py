"""Why a report must not take a run's final numbers at face value: marks on runs, and on their groups (docs/metrics.md).

Four kinds:

* **exact** — the run's exact ``policy/*`` metrics cover little of its policy: at its last evaluation the walk cut
  more than :data:`sesa_cli.intervals.PRUNED_LIMIT` of the policy's mass (its figures are bounds, and the sampled-gap
  check cannot pass), or ``policy/valid_mass`` is below :data:`VALID_MASS_LOW` (most of the policy's episodes are not
  what the exact metrics enumerate). A group with such a run does not get a verdict on the exact metrics
  (:meth:`sesa_cli.report.document.Report.answer`), and its exact cells carry :data:`sesa_cli.intervals.EXACT_MARK`.
* **gap** — the run's sampled success on the exact-policy instances lies more than
  :data:`sesa_cli.intervals.GAP_LIMIT` standard deviations from the exact success probability
  (``policy/sampled_gap``): one of the two does not say what the other does. The exact figure covers the whole
  policy, so its cells are not marked; the note names the run, and the report bases no verdict on the group's exact
  metrics. One evaluation's draws can do it: every group of a seed draws its evaluation from the same random
  numbers, so one unlikely draw shows in every group of that seed (docs/metrics.md).
* **lost** — the run ended broken (:func:`lost_reasons`): its final success is below the base model's, under half
  of its final replies are valid, or its loss went non-finite. It is a result of its method, not an accident of the
  report: it stays in its group's mean, and every table and headline counts it (``1 of 5 runs lost``).
* **status** — the run did not end as a finished run of its group: it is still training (a live process holds its
  dir), it was killed (no end recorded and no live holder, fewer steps than it was set to), failed or was
  interrupted (``run.json``), or it has fewer steps than another run of its group. Its last values are mid-run
  values, not final ones.

Torch-free, like the rest of the report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sesa_cli import run_lock
from sesa_cli.intervals import GAP_LIMIT, PRUNED, PRUNED_LIMIT
from sesa_cli.metric_keys import key
from sesa_cli.report.runs import Run
from sesa_cli.runs import ended_badly

VALID_MASS_LOW = 0.5
"""Below this ``policy/valid_mass`` most of the policy's mass is on episodes the exact metrics do not enumerate
(invalid replies, pruned branches): its effective solutions describe a minority of what it does."""
MARK = "(!)"
"""What a marked group's label carries in the headline tables."""

SAMPLED_GAP = key("policy/sampled_gap")
VALID_MASS = key("policy/valid_mass")
TARGET_MASS = key("policy/target_mass")
EXACT_SUCCESS = key("eval/exact_instances_success")


@dataclass(frozen=True)
class Mark:
    """One reason to read a run's numbers with care."""

    group: str
    run: str
    """The run's seed (or dir name)."""
    kind: str
    """``exact``, ``gap``, ``lost`` or ``status`` (see the module docstring)."""
    text: str

    def line(self, labels: dict[str, str]) -> str:
        return f"warning: {labels.get(self.group, self.group)}, seed {self.run}: {self.text}"


def _final(run: Run, metric: str) -> float:
    """The run's last logged value of ``metric`` (its own rows), NaN when it never logged it."""
    if metric not in run.own.columns:
        return math.nan
    values = run.own[metric].dropna()
    return float(values.iloc[-1]) if len(values) else math.nan


def exact_marks(run: Run) -> list[str]:
    """Why the run's exact metrics cover too little of its policy, if they do (an ``exact`` mark: see the module)."""
    out = []
    pruned = _final(run, PRUNED)
    if pruned > PRUNED_LIMIT:
        out.append(
            f"its exact walk cut {pruned:.3f} of the policy's mass (more than {PRUNED_LIMIT:g}): its exact figures "
            "describe part of the policy, and its sampled-gap check cannot pass"
        )
    valid = _final(run, VALID_MASS)
    if valid < VALID_MASS_LOW:
        out.append(
            f"policy/valid_mass is {valid:.3f}: its exact metrics cover under {VALID_MASS_LOW:.0%} of its episodes"
        )
    return out


def gap_marks(run: Run) -> list[str]:
    """Why the run's exact metrics and its samples disagree, if they do (a ``gap`` mark: see the module)."""
    out = []
    gap = _final(run, SAMPLED_GAP)
    if gap > GAP_LIMIT:
        out.append(
            f"its sampled success on the exact-policy instances, {_final(run, EXACT_SUCCESS):.3f}, and its exact "
            f"target mass, {_final(run, TARGET_MASS):.3f}, are {gap:.1f} standard deviations apart: the exact "
            "metrics do not describe what it samples"
        )
    return out


VALID_LOW = 0.5
"""A run whose final ``eval/valid`` (the share of its evaluation replies that are valid) is below this is lost."""
SUCCESS = key("eval/success")
VALID = key("eval/valid")
NONFINITE = key("optim/nonfinite_losses")


def base_success(run: Run) -> float:
    """``eval/success`` of the model the run's lineage started from: its first evaluation row, a revived run's
    parent's step 0 included (NaN when it was never evaluated there)."""
    if SUCCESS not in run.metrics.columns:
        return math.nan
    values = run.metrics[SUCCESS].dropna()
    return float(values.iloc[0]) if len(values) and int(values.index[0]) == int(run.metrics.index.min()) else math.nan


def lost_reasons(run: Run) -> list[str]:
    """Why the run ended broken, if it did: final success below its base model's (:func:`base_success`), fewer than
    :data:`VALID_LOW` of its final replies valid, or a non-finite loss (logged, or the run stopped for it)."""
    out = []
    final, base = _final(run, SUCCESS), base_success(run)
    if final < base:
        out.append(f"success {final:.3f} below the base model's {base:.3f}")
    valid = _final(run, VALID)
    if valid < VALID_LOW:
        out.append(f"valid replies {valid:.2f} at the end")
    skipped = run.own[NONFINITE].fillna(0).sum() if NONFINITE in run.own.columns else 0
    if skipped > 0 or "non-finite loss" in str(run.info.get("reason") or ""):
        out.append("a non-finite loss")
    return out


def _planned_steps(run: Run) -> int | None:
    """The step a train run is set to end at (``train.steps``); None for other commands or an unreadable config."""
    train = run.config.get("train")
    steps = train.get("steps") if isinstance(train, dict) else None
    if run.info.get("command") not in (None, "train") or not isinstance(steps, int):
        return None
    return steps


def status_marks(run: Run, group_last: int) -> list[str]:
    """Why the run's last values are not a finished run's final values, if they are not (``group_last``: the last
    step of its group's longest run)."""
    last = int(run.metrics.index.max())
    bad = ended_badly(run.path)
    if bad:
        return [f"{bad}; its values are those of step {last}"]
    status = run.info.get("status")
    holder = run_lock.recorded_holder(run.path) if status is None else {}
    planned = _planned_steps(run)
    if holder and run_lock.alive(holder):
        return [f"still training (step {last}{f' of {planned}' if planned else ''}): its values are mid-run ones"]
    if status is None and (holder or (planned is not None and last < planned)):
        return [f"killed at step {last}{f' of {planned}' if planned else ''} (no end recorded)"]
    if last < group_last:
        return [f"ended at step {last}, before its group's {group_last}: its final values are earlier ones"]
    return []


def run_marks(runs: Sequence[Run]) -> list[Mark]:
    """Every mark of every run, in the order of ``runs``."""
    last: dict[str, int] = {}
    for run in runs:
        last[run.group] = max(last.get(run.group, 0), int(run.metrics.index.max()))
    marks = []
    for run in runs:
        name = run.seed or run.name
        marks += [Mark(run.group, name, "exact", text) for text in exact_marks(run)]
        marks += [Mark(run.group, name, "gap", text) for text in gap_marks(run)]
        marks += [Mark(run.group, name, "lost", "lost: " + "; ".join(why)) for why in [lost_reasons(run)] if why]
        marks += [Mark(run.group, name, "status", text) for text in status_marks(run, last[run.group])]
    return marks
