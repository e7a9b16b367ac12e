"""Diversity report: compare runs (or whole multirun sweeps) with tables and plots.

Public API::

    files = build_report(["outputs/train/multirun/2026-11-22/10-00-00"], Path("report"), compare=[1, 2])
    files["summary"], files["groups"], files["compare"]   # summary.csv (per run), groups.csv, compare.csv
    files["markdown"], files["html"]                       # report.md, self-contained report.html
    files["plots"]                                         # {"policy": .../policy.png, ...} (drawn plots only)
    files["notes"]                                         # skipped job dirs / plots, environment warnings

    report = analyse(runs, compare=["sampler=parallel", "sampler=sequential"])   # the numbers, nothing written
    write_report(report, out_dir); console_tables(report)                        # what the command prints

Lower level: :func:`load_runs` (expand + load + group), :func:`summarize` (per-run final/best),
:func:`group_summary` (mean and bootstrap interval per group), :func:`compare_groups` (differences),
:func:`wide_table` (metric × group strings), :mod:`sesa_cli.report.stats` (the bootstrap and number formats).

This package imports pandas and (lazily) matplotlib, and never torch or transformers: ``sesa diversity-report``
must start fast on any machine. Only ``sesa_cli.config`` is imported from the rest of sesa.
"""

from __future__ import annotations

from sesa_cli.report.document import (
    Report,
    ReportFiles,
    analyse,
    build_report,
    console_tables,
    resolve_compare,
    write_report,
)
from sesa_cli.report.runs import Run, load_runs
from sesa_cli.report.tables import (
    COMPARE_COLUMNS,
    GROUP_COLUMNS,
    SUMMARY_COLUMNS,
    compare_groups,
    group_summary,
    summarize,
    wide_table,
)

__all__ = [
    "COMPARE_COLUMNS",
    "GROUP_COLUMNS",
    "SUMMARY_COLUMNS",
    "Report",
    "ReportFiles",
    "Run",
    "analyse",
    "build_report",
    "compare_groups",
    "console_tables",
    "group_summary",
    "load_runs",
    "resolve_compare",
    "summarize",
    "wide_table",
    "write_report",
]
