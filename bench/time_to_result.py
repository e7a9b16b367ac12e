"""Time to result (issue 32): `nox -s bench` or `python bench/time_to_result.py [--page docs/measurements.md]`.

Prints each wall-time goal of issue 32 beside the figure it was set against, measured in the same run where it can be:

* the default ``sesa train`` (README's first command, after installation) from an empty warm-start cache to its final
  evaluation, run as a subprocess with a fresh ``model.cache_dir`` and run dir, twice in one bench run: the code of
  ``--before`` (a commit before issue 32's changes; its ``src/`` and ``conf/`` taken with ``git archive`` into a
  temporary directory and run from there) and today's, one after the other on the same machine, so the ratio holds
  where the seconds do not. Each run's own final ``eval/success`` is printed too, so a faster run that learns less
  shows;
* the wall time of ``nox -s results``' sweeps as docs/results.md records it (``Compute: the sections' sweeps took
  ...``, read by scripts/findings.py, which keeps every page quoting it equal to it): the sweeps take hours, so this
  bench reads the figure of the last ``nox -s results`` rather than rerunning them.

The ratio goals (two-stage step against the parallel one, sesa's step against TRL's) are printed by bench/rollout.py
and bench/trl_compare.py, measured against their peer in the same run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from docs_block import write_block

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_GOAL_S = 120.0
BEFORE_COMMIT = "69e14bb"
"""main before issue 32's changes of 2026-11-27 (the default run took 5 min 48 s and 6 min 44 s to 8 min 7 s there,
on other days of this machine)."""
RESULTS_GOAL_S = 30 * 60.0
RESULTS_BEFORE = "1 h 26 min when filed; 2 h 19 min after issue 30 (path claims on 10 seeds, 120 steps)"


def minutes(seconds: float) -> str:
    """``5 min 48 s`` / ``1 h 26 min``."""
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 60} min {s % 60} s"


UNITS = {"h": 3600, "min": 60, "s": 1}


def seconds(text: str) -> float:
    """``1 h 26 min`` / ``12 min 5 s`` -> seconds."""
    return float(sum(int(n) * UNITS[u] for n, u in re.findall(r"(\d+) (h|min|s)\b", text)))


def _findings() -> ModuleType:
    """scripts/findings.py, whose reader of the results page's wall time every page quoting it goes through."""
    name = "sesa_scripts.findings"  # the name tests/scripts.py loads it under: one module, loaded once
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "findings.py")
        assert spec is not None
        assert spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)  # its dataclasses look their module up there
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def results_time(text: str) -> str | None:
    """The wall time of the sweeps behind docs/results.md as the page records it (``3 h 34 min``: the sum of its
    sections' own figures, written by scripts/results.py); None when the page records none."""
    findings = _findings()
    try:
        return str(findings.results_time(text))
    except findings.PageError:
        return None


def default_run(extra: list[str], source: Path | None = None) -> tuple[float, float | None]:
    """Wall seconds of the default ``sesa train`` from an empty cache, and its final ``eval/success``; ``source``: a
    directory holding another version's ``src/`` and ``conf/`` to run instead of the installed sesa."""
    with tempfile.TemporaryDirectory(prefix="sesa-ttr-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "sesa_cli", "train", f"model.cache_dir={tmp}/cache", f"hydra.run.dir={run_dir}"]
        env = {**os.environ, "PYTHONPATH": str(source / "src")} if source is not None else None
        start = time.perf_counter()
        subprocess.run([*cmd, *extra], check=True, stdout=subprocess.DEVNULL, env=env)
        took = time.perf_counter() - start
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        evals = [r["eval/success"] for r in rows if "eval/success" in r]
        return took, (evals[-1] if evals else None)


def checkout(commit: str, into: Path) -> Path:
    """``src/`` and ``conf/`` of ``commit`` of this repository, unpacked into ``into`` (git archive): the directory to
    run that version from."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "src", "conf"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def goal_row(what: str, goal_s: float, before: str, today_s: float, note: str = "", shown: str | None = None) -> str:
    """Print one wall-time goal beside its before-figure and today's, and return it as a row of the page's table
    (``shown``: today's figure as the row shows it, by default :func:`minutes` of ``today_s``)."""
    verdict = "holds" if today_s <= goal_s else "not met"
    extra = f", {note}" if note else ""
    print(f"{what}: {minutes(today_s)} (goal <= {minutes(goal_s)}: {verdict}; before issue 32: {before}){extra}")
    today = (shown or minutes(today_s)) + (f" ({note})" if note else "")
    return f"| {what} <= {minutes(goal_s)} | {before} | {today} | {verdict} |"


def success_note(success: float | None) -> str:
    return f"final eval/success {success:.3f}" if success is not None else "no final evaluation"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--page", help="also write the figures into this Markdown file's bench:time_to_result block")
    parser.add_argument("--results", default=str(ROOT / "docs" / "results.md"), help="the page nox -s results wrote")
    parser.add_argument("--before", default=BEFORE_COMMIT, help="the commit whose default run is the before-figure")
    parser.add_argument("overrides", nargs="*", help="added to the default sesa train (e.g. train.steps=2 to try)")
    args = parser.parse_args()

    cmd = "sesa train" + "".join(f" {o}" for o in args.overrides)
    with tempfile.TemporaryDirectory(prefix="sesa-before-") as tmp:
        before_s, before_success = default_run(args.overrides, checkout(args.before, Path(tmp)))
    took, success = default_run(args.overrides)
    before = f"{minutes(before_s)} at {args.before} ({success_note(before_success)}), in this run"
    print(f"`{cmd}` from an empty cache: {minutes(took)} today, {before}: {took / before_s:.2f}x")
    note = f"{took / before_s:.2f}x the before-run; {success_note(success)}"
    lines = [
        "| goal (issue 32) | before | today | holds? |",
        "|---|---|---|---|",
        goal_row(f"`{cmd}` from an empty cache", DEFAULT_GOAL_S, before, took, note),
    ]
    results = Path(args.results)
    swept = results_time(results.read_text()) if results.is_file() else None
    if swept is None:
        print(f"{results}: no sweep wall time recorded")
    else:  # the page's own figure, in the span scripts/findings.py keeps equal to it
        findings = _findings()
        lines.append(goal_row(f"`nox -s results`' sweeps (as {results.name} records them)", RESULTS_GOAL_S,
                              RESULTS_BEFORE, seconds(swept), shown=findings.TIME_START + swept + findings.TIME_END))  # fmt: skip
    if args.page:
        write_block(Path(args.page), "time_to_result", lines)


if __name__ == "__main__":
    main()
