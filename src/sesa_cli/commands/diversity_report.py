"""``sesa diversity-report runs=[...]``: tables and plots comparing finished runs, from their files only.

Never imports torch (the report reads metrics files), so it starts in well under 3 seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from sesa_cli.commands.common import hydra_context
from sesa_cli.commands.schemas import register_configs
from sesa_cli.commands.sweep import run_command
from sesa_cli.config import ConfigError, DiversityReportConfig, conf_dir, to_object

register_configs()


def run(cfg: DiversityReportConfig, out_dir: Path) -> dict[str, Any]:
    """Build the report for ``cfg.runs`` into ``out_dir``; print the headline tables; return the written files."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from sesa_cli.commands.rundir import publish_report, report_dir_of
    from sesa_cli.paths import writing
    from sesa_cli.report import analyse, console_tables, write_report
    from sesa_cli.report.stats import METHOD

    if not cfg.runs:
        raise ConfigError(
            "runs=[...] is empty; pass run dirs or a multirun dir, e.g. runs=[outputs/train/multirun/...]"
        )
    report = analyse([str(r) for r in cfg.runs], cfg.compare, cfg.metrics)
    # A full disk or a read-only file system while a table or a figure is written: one line naming the report dir
    # (the staging dir is removed and an earlier report stays: sesa_cli.commands.rundir.discard_staged)
    with writing(report_dir_of(out_dir)):
        written = write_report(report, out_dir)
    # written into a staging dir beside the report dir, which now takes its place whole (sesa_cli.commands.rundir)
    files: dict[str, Any] = moved(dict(written), out_dir, publish_report(out_dir))
    console = Console()
    console.print(report.intro())
    for title, headers, rows in console_tables(report):
        table = Table(
            *headers,
            title=title,
            box=box.SIMPLE_HEAD,
            show_edge=False,
            title_justify="left",
            min_width=min(len(title), 80),
        )
        for row in rows:
            table.add_row(*row)
        console.print()
        console.print(table)
    answer = report.answer()
    if answer is not None:
        console.print()
        console.print(answer, style="bold", markup=False, highlight=False)
    console.print(METHOD, style="dim")
    for note in files.get("notes", []):
        console.print(f"note: {note}")
    console.print(f"report: {files['html']}")
    return dict(files)


def moved(value: Any, old: Path, new: Path) -> Any:
    """``value`` (paths, and dicts and lists of them) with every path under ``old`` moved under ``new``."""
    if isinstance(value, dict):
        return {k: moved(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [moved(v, old, new) for v in value]
    if isinstance(value, Path) and value.is_relative_to(old):
        return new / value.relative_to(old)
    return value


def job(cfg: DictConfig) -> tuple[Path, dict[str, Any]]:
    """The command inside its Hydra job (``main`` and sesa_cli.api run it): (report dir, the written files)."""
    config = to_object(cfg)
    out_dir, _ = hydra_context()
    files = run(config, out_dir)
    return Path(files["html"]).parent, files


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="diversity_report")
def main(cfg: DictConfig) -> None:
    run_command("diversity-report", lambda: job(cfg))
