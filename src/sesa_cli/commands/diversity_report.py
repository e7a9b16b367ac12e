"""``sesa diversity-report runs=[...]``: tables and plots comparing finished runs, from their files only.

Never imports torch (the report reads metrics files), so it starts in well under 3 seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from sesa_cli.commands.common import hydra_context, user_errors
from sesa_cli.config import ConfigError, DiversityReportConfig, conf_dir, register_configs, to_object

register_configs()


def run(cfg: DiversityReportConfig, out_dir: Path) -> dict[str, Any]:
    """Build the report for ``cfg.runs`` into ``out_dir``; print the headline table; return the written files."""
    from rich.console import Console
    from rich.table import Table

    from sesa_cli.report import build_report, format_table_for_console

    if not cfg.runs:
        raise ConfigError(
            "runs=[...] is empty; pass run dirs or a multirun dir, e.g. runs=[outputs/train/multirun/...]"
        )
    files = build_report([str(r) for r in cfg.runs], out_dir)
    headers, rows = format_table_for_console(files["summary"])
    table = Table(*headers, title="diversity report (final values)")
    for row in rows:
        table.add_row(*row)
    console = Console()
    console.print(table)
    for note in files.get("notes", []):
        console.print(f"note: {note}")
    console.print(f"report: {files['html']}")
    return dict(files)


@hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name="diversity_report")
def main(cfg: DictConfig) -> None:
    with user_errors("diversity-report"):
        config = to_object(cfg)
        out_dir, _ = hydra_context()
        run(config, out_dir)
