"""The runs a report is over, as the reader checks them: the environment each ran in (threads, package versions, the
CPU), with a note where the runs of a group, or the groups, differ in it, and the table of runs."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from sesa_cli.report.runs import Run, short_label


def environment_notes(runs: Sequence[Run]) -> list[str]:
    """A note per group whose runs ran with different thread counts or package versions (their numbers may differ
    for that alone), one for groups that differ from each other, and one for runs that did not record them."""
    notes = []
    by_group: dict[str, list[Run]] = {}
    for run in runs:
        by_group.setdefault(run.group, []).append(run)
    seen: dict[str, set[str]] = {}
    for members in by_group.values():
        keys = sorted({k for run in members for k in run.environment})
        for key in keys:
            values: dict[str, list[str]] = {}
            for run in members:
                if key in run.environment:
                    values.setdefault(run.environment[key], []).append(run.seed or run.name)
            seen.setdefault(key, set()).update(values)
            if len(values) > 1:
                detail = "; ".join(f"{v}: seed {', '.join(s)}" for v, s in values.items())
                notes.append(f"warning: the runs of {short_label(members[0])} differ in {key} ({detail})")
    across = [k for k, v in seen.items() if len(v) > 1]
    if len(by_group) > 1 and across and not notes:
        notes.append(f"warning: groups differ in {', '.join(across)} (see the runs table)")
    for key in (k for k in across if k in CPU_KEYS):  # float results differ across CPUs: each group's, named
        values = {short_label(members[0]): sorted({r.environment.get(key, "?") for r in members})
                  for members in by_group.values()}  # fmt: skip
        notes.append(f"{key} per group: " + "; ".join(f"{g}: {', '.join(v)}" for g, v in values.items()))
    missing = [run for run in runs if not run.environment]
    if missing and len(missing) < len(runs):
        notes.append(f"{len(missing)} of {len(runs)} runs did not record their thread count and package versions")
    return notes


CPU_KEYS = ("cpu", "vector extensions", "kernels")
"""The environment keys (``Run.environment``) that describe the CPU: shown in their own column, and per group where
groups differ in them."""


def runs_table(runs: Sequence[Run], labels: dict[str, str]) -> pd.DataFrame:
    """One row per run: its group, seed, command, how far it got, where it ran from, threads and versions."""
    rows = []
    for run in runs:
        env = run.environment
        rows.append(
            {
                "group": labels[run.group],
                "seed": run.seed if run.seed is not None else "",
                "command": run.info.get("command", ""),
                "last step": int(run.metrics.index.max()),
                "revived at": "" if run.parent_step is None else run.parent_step,
                "threads": env.get("torch threads", ""),
                "versions": " ".join(f"{k} {v}" for k, v in env.items() if k not in ("torch threads", *CPU_KEYS)),
                "cpu": f"{env['cpu']} ({env.get('kernels', '?')})" if "cpu" in env else "",
                "run": str(run.path),
            }
        )
    frame = pd.DataFrame(rows)
    empty = [
        c for c in ("seed", "command", "revived at", "threads", "versions", "cpu") if not frame[c].astype(bool).any()
    ]
    return frame.drop(columns=empty)
