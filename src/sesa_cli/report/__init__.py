"""Diversity report: compare runs (or whole multirun sweeps) with tables and plots.

Public API::

    files = build_report(["outputs/train/multirun/2026-11-22/10-00-00"], Path("report"))
    files["summary"], files["markdown"], files["html"]   # summary.csv, report.md, report.html
    files["plots"]                                        # {"success": .../success.png, ...} (drawn plots only)
    files["notes"]                                        # skipped job dirs / plots, also written in the report

    headers, rows = format_table_for_console(files["summary"])   # strings for a rich.table.Table

Lower level: :func:`load_runs` (expand + load + label), :func:`summarize` (the summary DataFrame),
:func:`wide_table` (metric × group, ``mean ± std`` strings).

This package imports pandas and (lazily) matplotlib, and never torch or transformers: ``sesa diversity-report``
must start fast on any machine. Only ``sesa_cli.config`` is imported from the rest of sesa.
"""

from __future__ import annotations

from sesa_cli.report.document import ReportFiles, build_report
from sesa_cli.report.runs import Run, load_runs
from sesa_cli.report.tables import SUMMARY_COLUMNS, format_table_for_console, summarize, wide_table

__all__ = [
    "SUMMARY_COLUMNS",
    "ReportFiles",
    "Run",
    "build_report",
    "format_table_for_console",
    "load_runs",
    "summarize",
    "wide_table",
]
