"""What a command prints when it ends: the summary of a run (base -> trained), its run dir on one line and the next
commands; how to resume after Ctrl-C; how to report on a sweep. Everything goes through the one console
(sesa_cli.progress)."""

from __future__ import annotations

import math
import os
import shlex
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from rich.table import Table

from sesa_cli.commands.sweep import clear_records, resume_command, summary
from sesa_cli.config import SEQUENTIAL_ONLY
from sesa_cli.intervals import exact_text, over_pruned, pruned_note
from sesa_cli.metric_keys import key
from sesa_cli.paths import hydra_value, sesa_program
from sesa_cli.progress import console


def shown_path(path: Path | str) -> str:
    """``path`` as a user would type it here: relative to the working directory when inside it (quote it with the
    key it is the value of: :func:`arg`)."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def arg(key: str, path: Path | str, listed: bool = False) -> str:
    """``key=path`` (``key=[path]`` when ``listed``) as a command-line word: the path quoted for Hydra's override
    grammar where it needs it (:func:`hydra_value`), the whole word quoted for the shell where that needs it."""
    text = hydra_value(shown_path(path))
    return shlex.quote(f"{key}=[{text}]" if listed else f"{key}={text}")


HEADLINE = tuple(
    key(name)
    for name in (
        "eval/success", "eval/pass@{k}", "eval/coverage@{k}", "eval/distinct_correct@{k}", "eval/greedy_success",
        "eval/valid", "eval/entropy", "eval/turns", "policy/target_mass", "policy/effective_solutions",
        "policy/solution_entropy", "policy/coverage@{k}", "policy/pruned_mass", "policy/sampled_gap",
    )
)  # fmt: skip
"""The summary's metrics, in this order, where a row has them (an ``@{k}`` family at its largest k); every other key
is in metrics.jsonl (training) or metrics.json (eval). The exact ``policy/*`` figures come with the mass the walk
pruned and the sampled-gap check, and are shown as bounds or marked where it pruned too much
(:func:`sesa_cli.intervals.exact_text`)."""


def _headline(row: dict[str, Any]) -> list[str]:
    """The keys of ``row`` the summary shows (:data:`HEADLINE`)."""
    keys = []
    for name in HEADLINE:
        if name.endswith("@{k}"):
            ks = [int(k.rsplit("@", 1)[1]) for k in row if k.startswith(name[:-3]) and k.rsplit("@", 1)[1].isdigit()]
            if ks:
                keys.append(name.format(k=max(ks)))
        elif isinstance(row.get(name), (int, float)):
            keys.append(name)
    return keys


def number(value: Any, spec: str = ".4g") -> str:
    """A table cell: ``–`` for a value that is missing or not a number (NaN: nothing to measure, e.g. no chain
    item), a float in ``spec``, anything else as it is."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:{spec}}" if isinstance(value, float) else str(value)


def _value(value: Any) -> str:
    return number(value)


def _exact(name: str, row: dict[str, Any]) -> str:
    """``row[name]`` as the summary shows it: a ``policy/*`` figure as a bound or marked where ``row``'s walk pruned
    too much (:func:`sesa_cli.intervals.exact_text`)."""
    value = row.get(name)
    if not isinstance(value, float) or not math.isfinite(value):
        return _value(value)
    return exact_text(name, value, row, number)


def base_row(rows: list[dict[str, Any]], start: int) -> dict[str, Any] | None:
    """The evaluation a run started from: the last evaluation row at or before step ``start`` (the step-0 base of a
    fresh run, the checkpoint's figures of a revived one), or None when there was none (``train.eval_before=false``)."""
    evals = [r for r in rows if r.get("step", 0) <= start and any(k.startswith("eval/") for k in r)]
    return evals[-1] if evals else None


def train_summary(command: str, final: dict[str, Any], base: dict[str, Any] | None, protocol: str, run_dir: Path,
                  remaining: int = 100, ran: int | None = None, baseline_of: list[str] | None = None) -> None:  # fmt: skip
    """The ending of ``sesa train``/``revive``: base (a revival's checkpoint) -> trained for the headline metrics,
    the run dir on a line of its own (never wrapped, so it copies whole) and the commands a user runs next.
    ``ran``: the steps this command ran (a revival's ``more_steps``; None = ``final``'s step). ``baseline_of``: the
    overrides of a sequential ``sesa train``, whose ending then also names its parallel baseline
    (:func:`parallel_baseline`)."""
    step = final.get("step")
    ran = step if ran is None else ran
    first = None if base is None else base.get("step", 0)
    done = f"done, {ran} steps" + (f" (step {first} -> {step})" if first else "")
    table = Table(title=f"sesa {command}: {done}", title_justify="left")
    table.add_column("metric")
    if base is not None:
        start = "checkpoint" if command == "revive" else "base"
        table.add_column(f"{start} (step {first})", justify="right")
    table.add_column(f"trained (step {step})", justify="right")
    for name in _headline(final):
        cells = [name, *([_exact(name, base)] if base is not None else []), _exact(name, final)]
        table.add_row(*cells)
    if "collapse/flag" in final:
        table.add_row("collapse/flag", *(["-"] if base is not None else []), _value(final["collapse/flag"]))
    console.print(table)
    pruned = [p for p in (over_pruned(final), None if base is None else over_pruned(base)) if p is not None]
    if pruned:
        console.print(pruned_note(pruned[0]), soft_wrap=True, markup=False, highlight=False)
    console.print(f"eval/*, policy/*: {protocol}; every metric is in metrics.jsonl", soft_wrap=True, markup=False,
                  highlight=False)  # fmt: skip
    console.print(f"run dir: {shown_path(run_dir)}", soft_wrap=True, markup=False, highlight=False)
    next_commands(run_dir, more_steps=remaining, baseline_of=baseline_of)


def parallel_baseline(run_dir: Path, overrides: list[str]) -> tuple[str, str, list[str]]:
    """The ``sesa train`` of a sequential run's parallel baseline, the report that compares the two runs, and the
    overrides the baseline cannot keep.

    The baseline keeps every override that means the same under ``sampler=parallel`` (``sampler.group_size=6``,
    ``sampler.temperature=0.7``, a batch filter, every other group's settings), adds ``sampler=parallel`` and runs
    into ``<run dir>-parallel``; it leaves out the sampler choice, Hydra's own settings (its run dir is its own) and
    the sequential-only settings (:data:`~sesa_cli.config.SEQUENTIAL_ONLY`: ``sampler=parallel`` never reads them
    and refuses them on its command line), which the ending names (the baseline once dropped every
    ``sampler.*`` override and ran at group size 8 and temperature 1 after ``sampler.group_size=6``)."""
    kept: list[str] = []
    dropped: list[str] = []
    for line in overrides:
        key = line.partition("=")[0].lstrip("+~")
        if key == "sampler" or key.startswith(("hydra.", "hydra/")):
            continue
        (dropped if key in SEQUENTIAL_ONLY else kept).append(line)
    other = Path(f"{run_dir}-parallel")
    sesa = sesa_program()
    train = " ".join([sesa, "train", *map(shlex.quote, kept), "sampler=parallel", arg("hydra.run.dir", other)])
    runs = shlex.quote(f"runs=[{hydra_value(shown_path(run_dir))},{hydra_value(shown_path(other))}]")
    return train, f"{sesa} diversity-report {runs}", dropped


def next_commands(run_dir: Path, more_steps: int = 100, baseline_of: list[str] | None = None) -> None:
    """The commands that take a training run's dir, each under a comment line saying what it does; with
    ``baseline_of`` (a sequential run's overrides) its parallel baseline and the report comparing the two first,
    except in a sweep's job (the sweep names its runs, and the sweep's own report compares them)."""
    ckpt = arg("ckpt", run_dir)
    sesa = sesa_program()
    baseline = []
    if baseline_of is not None and not in_sweep():
        train, report, dropped = parallel_baseline(run_dir, baseline_of)
        them = "it" if len(dropped) == 1 else "them"
        unread = f" (without {' '.join(dropped)}: sampler=parallel does not read {them})" if dropped else ""
        baseline = [(f"its parallel baseline: the same settings with sampler=parallel{unread}", train),
                    ("then compare the two runs", report)]  # fmt: skip
    _print_next(
        [
            *baseline,
            ("evaluate its last checkpoint (the same protocol)", f"{sesa} eval {ckpt}"),
            (
                "continue training from its last checkpoint (add overrides to change settings, e.g. sampler=sequential)",
                f"{sesa} revive {ckpt} more_steps={more_steps}",
            ),
            (
                "tables and plots (add run dirs to compare)",
                f"{sesa} diversity-report {arg('runs', run_dir, listed=True)}",
            ),
        ]
    )


def eval_ending(out_dir: Path, ckpt: Path | None, sequential: bool, more_steps: int = 100) -> None:
    """The ending of ``sesa eval``: what was evaluated and where the results are, each on a line of its own (never
    wrapped, so a path copies whole), and the commands a user runs next."""
    evaluated = shown_path(ckpt) if ckpt else "the base model (no ckpt=)"
    for line in (f"evaluated: {evaluated}", f"eval dir: {shown_path(out_dir)} (metrics.json, samples.jsonl)"):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    ckpt_arg = arg("ckpt", ckpt) if ckpt else None
    sesa = sesa_program()
    lines = []
    if not sequential:
        of = f"{ckpt_arg} " if ckpt_arg else ""
        lines.append(("the chain health of sequential sampling from it", f"{sesa} eval {of}sampler=sequential"))
    if ckpt_arg:
        lines.append(("continue training from it", f"{sesa} revive {ckpt_arg} more_steps={more_steps}"))
    else:
        lines.append(("train from this base (add overrides, e.g. task=path)", f"{sesa} train"))
    _print_next(lines)


def _print_next(lines: list[tuple[str, str]]) -> None:
    """Each command under a comment line saying what it does, so no line is wider than its command and a terminal
    never wraps a description into the next command."""
    console.print("next:", markup=False, highlight=False)
    for what, cmd in lines:
        console.print(f"  # {what}\n  {cmd}", soft_wrap=True, markup=False, highlight=False)


def resume_hint(run_dir: Path, step: int, steps: int, command: str = "train") -> None:
    """After Ctrl-C, SIGTERM or SIGUSR1: the checkpoint the trainer saved and the commands that continue from it:
    the command that resumes the run (:func:`resume_line`: train.resume=auto) and a revival from the checkpoint."""
    again = f"{resume_line(run_dir, command)} or " if command in ("train", "revive") else ""
    console.print(
        f"stopped at step {step} of {steps}; continue with: {again}{sesa_program()} revive {arg('ckpt', run_dir)} "
        f"more_steps={max(1, steps - step)}",
        soft_wrap=True, markup=False, highlight=False,
    )  # fmt: skip


def in_sweep() -> bool:
    """Whether this process runs a job of a sweep (``sesa <command> -m``: Hydra's multirun)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return False
    mode = HydraConfig.get().mode
    return getattr(mode, "name", str(mode)) == "MULTIRUN"


def resume_line(run_dir: Path, command: str) -> str:
    """What resumes the stopped run in ``run_dir``: for a sweep's job, the sweep's own command (which skips the
    finished jobs: sesa_cli.commands.sweep); else this command with its overrides and its run dir."""
    from hydra.core.hydra_config import HydraConfig

    why = "(train.resume=auto)"
    if not HydraConfig.initialized():
        return f"rerun the same command with {arg('hydra.run.dir', run_dir)} {why}"
    hc = HydraConfig.get()
    if in_sweep():
        sweep = resume_command() or f"the sweep's command with {arg('hydra.sweep.dir', hc.sweep.dir)}"
        return f"{sweep} (its finished jobs are skipped, this one resumes: train.resume=auto)"
    mine = [str(o) for o in hc.overrides.hydra if not str(o).startswith("hydra.mode=")]
    if not any(o.lstrip("+").startswith("hydra.run.dir=") for o in mine):
        mine.append(arg("hydra.run.dir", run_dir))
    words = [shlex.quote(str(o)) for o in hc.overrides.task] + [o if o.startswith(("hydra.run.dir=", "'")) else
                                                                 shlex.quote(o) for o in mine]  # fmt: skip
    return " ".join([sesa_program(), command, *words, why])


class SweepEnding(Callback):
    """Hydra callback (added by ``sesa <command> -m``, sesa_cli.commands.sweep.prepare_sweep): before the first job,
    the sweep's records start afresh; after the last, the summary of how each job ended (N finished, M refused, K
    failed, each with its dir) and how to report on the sweep. The exit code is non-zero only if a job failed (1)
    or the sweep was stopped (128 + the signal)."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        clear_records(Path(str(config.hydra.sweep.dir)))

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        sweep = str(config.hydra.sweep.dir)
        lines, code = summary(Path(sweep))
        for line in lines:
            console.print(line, soft_wrap=True, markup=False, highlight=False)
        console.print(f"sweep dir: {shown_path(sweep)}", soft_wrap=True, markup=False, highlight=False)
        if code > 1 and resume_command():
            console.print(f"resume:    {resume_command()}", soft_wrap=True, markup=False, highlight=False)
        if os.environ.get("RANK", "0") == "0" and config.hydra.job.name in ("train", "revive", "eval"):
            report = f"{sesa_program()} diversity-report {arg('runs', sweep, listed=True)}"
            console.print(f"report:    {report}", soft_wrap=True,
                          markup=False, highlight=False)  # fmt: skip
        if code:
            raise SystemExit(code)
