"""``docs/results.md`` from one command: the claims' sweeps, run where missing, then the page from their reports.

``nox -s results`` runs ``python scripts/results.py``, which reads the claims and their sweeps from
``scripts/claims.yaml`` (:data:`CLAIMS_FILE`) and

1. runs every sweep that is not complete yet (seeds 0-9 for the path claims, 0-4 for the agent
   claims; two sweeps at a time, one job of one thread each, :func:`run_sweeps`): the collapse runs, sequential
   runs from scratch, revivals from each seed's collapse checkpoint (once the collapse runs exist), the agent tasks. The
   commands are the ones in the recipes' header comments (``conf/experiment/*.yaml``; a test holds the two
   together);
2. builds a diversity report per claim from the complete runs, under ``<root>/reports/``;
3. writes ``docs/results.md``: per claim the commands, where its numbers come from (seeds, runs, commits), the
   headline table (mean and 95% bootstrap interval over
   seeds), the differences to the baseline, and a few of the report's PNGs copied under ``docs/results/``.

It is resumable: a job whose run dir holds its final evaluation is never rerun. A job left incomplete (killed, or
crashed) is moved aside to ``.<job>.incomplete`` in its sweep dir (kept, not deleted) and rerun in a new sweep dir
``<sweep>.retry<N>``. ``--render`` writes the page from the runs already there without starting any; ``--claims``
reruns and rewrites the sections named, keeping every other section as the page has it. ``--smoke``
shrinks every sweep (a small world, a few steps) to check the machinery end to end in minutes; it writes its page
under the root, never over docs/. ``--launcher ray --address auto`` runs the sweeps' jobs on a Ray cluster instead,
every ready sweep at once, one CPU per job (docs/scaling.md, "The results page on a cluster"); any other Hydra
launcher goes by its name (``--launcher NAME``, its settings among the overrides).

Nothing here imports torch: the runs are ``sesa`` subprocesses.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from sesa_cli.config import ConfigError
from sesa_cli.metric_keys import find, key
from sesa_cli.report.columns import COST, cost_text, lost_text, with_pruned
from sesa_cli.report.document import Report, analyse, write_report
from sesa_cli.report.runs import METRICS_JSONL, parse_overrides
from sesa_cli.report.stats import METHOD, difference_interval, format_interval, mean_interval
from sesa_cli.report.tables import at_k_values, markdown_table, method_name
from sesa_cli.runs import git_commit, read_metrics

CLAIMS_FILE = Path(__file__).with_name("claims.yaml")
"""The claims and their sweeps, as data (the seeds, the small world of --smoke, each sweep's overrides, each claim's
prose)."""


def _flat(items: Sequence[Any]) -> tuple[str, ...]:
    """A YAML list with lists inside it (an alias of another list) as one flat tuple of strings."""
    return tuple(str(x) for item in items for x in (item if isinstance(item, list) else [item]))


@dataclass(frozen=True)
class Sweep:
    """One Hydra multirun: ``sesa <command> -m <overrides> seed=...`` (train) or ``ckpt=...`` (revive)."""

    name: str
    """Its sweep dir under the root; also the name the recipes' header commands use (``outputs/claims/<name>``)."""
    command: str
    overrides: tuple[str, ...]
    """Fixed and swept overrides (``key=a,b`` sweeps), the seed or checkpoint axis excluded."""
    recipe: str
    """The conf/experiment recipe whose header comment gives this sweep's command."""
    smoke: tuple[str, ...]
    """What --smoke adds (replacing overrides of the same key)."""
    parent: str | None = None
    """revive: the sweep whose run of each seed is that seed's checkpoint."""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Its seeds (a revival's: those of its parent's runs it revives); ``--seeds`` replaces them for every sweep."""


@dataclass(frozen=True)
class Claim:
    key: str
    title: str
    sweeps: tuple[str, ...]
    compare: tuple[str, ...]
    """``compare=`` of the report: the baseline first (empty: one group, nothing compared)."""
    text: str
    plots: tuple[str, ...] = ("heatmap", "policy")
    """The report's PNGs the page shows (copied under docs/results/<key>/)."""
    headline: tuple[str, ...] = ()
    """The headline metrics of the claim's tables, those the runs logged (empty: the report's own choice)."""
    gains: bool = False
    """Also the paper's form (an agent claim): each group's gain in success over the base, and relative to the
    baseline's gain (:func:`gains_table`)."""


def _declared(name: str) -> str:
    """A metric key of the claims file, refused (``KeyError``) when no declaration matches it (a renamed key)."""
    if find(name) is None:
        raise KeyError(f"{CLAIMS_FILE.name}: metric key {name!r} is not declared in sesa_cli.metric_keys")
    return name


def load_claims(path: Path = CLAIMS_FILE) -> tuple[tuple[Sweep, ...], tuple[Claim, ...], dict[str, Any]]:
    """(the sweeps, the claims, the whole file) of a claims file (:data:`CLAIMS_FILE`)."""
    data = yaml.safe_load(path.read_text())
    smoke = {name: _flat(items) for name, items in data["smoke"].items()}
    sweeps = tuple(
        Sweep(
            s["name"],
            s["command"],
            _flat(s["overrides"]),
            s["recipe"],
            smoke[s["smoke"]],
            s.get("parent"),
            tuple(int(seed) for seed in s["seeds"]),
        )
        for s in data["sweeps"]
    )
    headlines = {name: tuple(_declared(m) for m in metrics) for name, metrics in data["headlines"].items()}
    claims = tuple(
        Claim(
            str(c["key"]),
            c["title"],
            tuple(c["sweeps"]),
            tuple(str(x) for x in c.get("compare", ())),
            " ".join(c["text"].split()),
            tuple(c.get("plots", ("heatmap", "policy"))),
            headlines[c["headline"]] if "headline" in c else (),
            bool(c.get("gains", False)),
        )
        for c in data["claims"]
    )
    return sweeps, claims, data


SWEEPS, CLAIMS, _DATA = load_claims()
RUN_MINUTES: dict[str, float] = {str(k): float(v) for k, v in _DATA["run_minutes"].items()}
"""A run's minutes per recipe (one thread, measured once): only the order in which the lanes take sweeps."""
HEAD_TO_HEAD: dict[str, Any] = _DATA["head_to_head"]
"""The figure of the head-to-head claims (:func:`head_to_head_figure`): the success metric, and which claims with the
diversity metric of each."""
DIVERSITY_LABELS = {
    "policy/effective_solutions": "effective solutions (exact policy)",
    "eval/distinct_correct@16": "distinct winning episodes (answers) in 16 samples",
}
SMALL_PATH_WORLD = _flat(_DATA["small_path_world"])
"""The path task's small world and short warm start (tests/conftest.py reads the same list from the file)."""
AGENT_HEADLINE = tuple(_declared(m) for m in _DATA["headlines"]["agent"])
TUNING: dict[str, Any] = _DATA["tuning"]
"""Equal tuning (:func:`tuning_section`): the rule the settings were chosen by, the criterion of the pick and its
floor, and per tuned claim its check claim (seeds 5-9), the metrics the criterion reads there (``success``,
``diversity``) and the picks as recorded."""
WINNER = "Winner at equal tuning:"
"""How a tuned claim's section names its winner (``Winner at equal tuning: [18] **method** ...``, or ``... none``):
scripts/findings.py reads it."""
TUNING_CSV = "tuning.csv"
"""A tuned claim's settings and picks beside its figures (docs/results/<key>/): what its check claim reads."""


# ------------------------------------------------------------------------------------------------ the jobs
@dataclass(frozen=True)
class Launcher:
    """The Hydra launcher the multiruns go through (``--launcher``, ``--address``): joblib on this machine (the
    page's default), Ray on a cluster, or any other launcher by name (its settings among the overrides)."""

    name: str = "joblib"
    address: str | None = None
    """ray: the cluster's address (``hydra.launcher.ray.init.address``); None: each multirun starts a local Ray."""

    def overrides(self, jobs: int) -> list[str]:
        """The launcher's overrides of a multirun, ``jobs`` at a time on joblib; a Ray job asks for one CPU (it runs
        one torch thread)."""
        if self.name == "joblib":
            return ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"]
        if self.name != "ray":
            return [f"hydra/launcher={self.name}"]
        connect = []
        if self.address:
            # the launcher asks ray.init for a small object store, which ray.init refuses when it joins a cluster
            connect = [
                f"hydra.launcher.ray.init.address={self.address}",
                "+hydra.launcher.ray.init.object_store_memory=null",
            ]
        return ["hydra/launcher=ray", *connect, "+hydra.launcher.ray.remote.num_cpus=1"]

    def lanes(self) -> int | None:
        """How many multiruns at once by default: joblib :data:`LANES`; a local Ray one (each multirun would start
        its own); a cluster every ready sweep (None: its scheduler shares the cores among their jobs)."""
        if self.name == "joblib":
            return LANES
        return 1 if self.name == "ray" and not self.address else None


@dataclass(frozen=True)
class Session:
    """Where the runs go and what every job gets."""

    root: Path
    """Sweep dirs live under it, one per sweep (``<root>/<sweep name>``, then ``.retryN`` dirs)."""
    seeds: tuple[int, ...] | None = None
    """Every sweep's seeds (``--seeds``); None: each sweep's own (:attr:`Sweep.seeds`)."""
    extra: tuple[str, ...] = ()
    """Overrides for every job (e.g. ``model.cache_dir=...``), after the sweep's own (and its smoke settings)."""
    smoke: bool = False
    launcher: Launcher = Launcher()

    def overrides(self, sweep: Sweep) -> list[str]:
        """The sweep's overrides with the smoke settings and ``extra`` replacing those of the same key."""
        return _merge(_merge(sweep.overrides, sweep.smoke if self.smoke else ()), self.extra)

    def seeds_of(self, sweep: Sweep) -> tuple[int, ...]:
        """The seeds ``sweep`` runs in this session."""
        return sweep.seeds if self.seeds is None else self.seeds

    def claim_seeds(self, claim: Claim) -> tuple[int, ...]:
        """Every seed of ``claim``'s sweeps, sorted."""
        return tuple(sorted({s for name in claim.sweeps for s in self.seeds_of(sweep_named(name))}))

    def jobs(self, sweep: Sweep, ckpts: dict[int, Path] | None = None) -> list[dict[str, str]]:
        """Every job as ``{key: value}`` of its swept keys and its seed (train) or checkpoint (revive: ``ckpts``,
        seed -> the parent run; seeds without one are left out)."""
        _, swept = _axes(self.overrides(sweep))
        seeds = self.seeds_of(sweep)
        if ckpts is None:
            axis = {"seed": [str(s) for s in seeds]}
        else:
            axis = {"ckpt": [str(ckpts[s]) for s in seeds if s in ckpts]}
        axes = {**swept, **axis}
        return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]

    def checkpoints(self, sweep: Sweep) -> dict[int, Path] | None:
        """revive sweeps: seed -> the parent sweep's complete run of that seed; None for train sweeps."""
        if sweep.parent is None:
            return None
        parent = sweep_named(sweep.parent)
        return {int(job["seed"]): path for job, path in self.complete(parent)}

    def missing(self, sweep: Sweep, ckpts: dict[int, Path] | None) -> list[dict[str, str]]:
        """The jobs of ``sweep`` (over ``ckpts``, :meth:`checkpoints`) that have no complete run."""
        done = {tuple(job.values()) for job, _ in self.complete(sweep)}
        return [job for job in self.jobs(sweep, ckpts) if tuple(job.values()) not in done]

    def complete(self, sweep: Sweep) -> list[tuple[dict[str, str], Path]]:
        """(job, its complete run dir) for every job of the sweep that has one (the latest, if it ran twice)."""
        expected = self.jobs(sweep, self.checkpoints(sweep))
        if not expected:
            return []
        keys = list(expected[0])
        found: dict[tuple[str, ...], Path] = {}
        for job_dir in _job_dirs(self.root, sweep):
            identity = _identity(job_dir, keys)
            if identity is not None and is_complete(job_dir):
                found[identity] = job_dir
        return [(job, found[tuple(job.values())]) for job in expected if tuple(job.values()) in found]


def sweep_named(name: str) -> Sweep:
    """The sweep called ``name``."""
    return next(s for s in SWEEPS if s.name == name)


def _axes(overrides: Sequence[str]) -> tuple[list[str], dict[str, list[str]]]:
    """(fixed overrides, swept key -> values) of a sweep's overrides (``key=a,b`` sweeps)."""
    fixed, swept = [], {}
    for item in overrides:
        key, _, value = item.partition("=")
        if "," in value and not value.startswith("["):
            swept[key] = value.split(",")
        else:
            fixed.append(item)
    return fixed, swept


def _merge(base: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``base`` with every override of ``extra`` replacing the one of the same key (or appended)."""
    keys = {o.partition("=")[0] for o in extra}
    return [o for o in base if o.partition("=")[0] not in keys] + list(extra)


def is_complete(run_dir: Path) -> bool:
    """The run holds its final evaluation: an ``eval/success`` row at the step its config trains to."""
    config, metrics = run_dir / "config.yaml", run_dir / METRICS_JSONL
    if not config.is_file() or not metrics.is_file():
        return False
    try:
        steps = int(yaml.safe_load(config.read_text())["train"]["steps"])
        rows = read_metrics(metrics)
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError, ConfigError):
        return False  # a damaged run dir is an incomplete one: it is moved aside and rerun
    done = key("eval/success")
    return any(r.get("step") == steps and done in r and not r.get(key("revive/parent")) for r in rows)


def _job_dirs(root: Path, sweep: Sweep) -> list[Path]:
    """Job dirs of a sweep's first multirun and its retries, oldest first."""
    retries = sorted(root.glob(f"{sweep.name}.retry*"), key=lambda p: int(p.name.rpartition("retry")[2] or 0))
    dirs = [root / sweep.name, *retries]
    return [job for d in dirs if d.is_dir() for job in sorted(d.iterdir(), key=lambda p: p.name) if job.name.isdigit()]


def _identity(run_dir: Path, keys: Sequence[str]) -> tuple[str, ...] | None:
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return None
    overrides = parse_overrides(yaml.safe_load(path.read_text()))
    if overrides.get("ckpt"):  # typed by hand relative to the repository (as the recipes' headers do), or absolute
        overrides["ckpt"] = str(Path(overrides["ckpt"]).resolve())
    return tuple(overrides.get(k, "") for k in keys)


# ----------------------------------------------------------------------------------------------- running
def command(session: Session, sweep: Sweep, axes: dict[str, list[str]], sweep_dir: Path, jobs: int = 2) -> list[str]:
    """The ``sesa`` argv of a multirun of ``sweep`` over ``axes`` (its swept keys and the seed or ckpt axis), through
    the session's launcher, on joblib ``jobs`` at a time (the recipes' headers: 2, a sweep alone on the machine; the
    page's lanes: 1 each, :func:`run_sweeps`)."""
    fixed, _ = _axes(session.overrides(sweep))
    return [
        "sesa",
        sweep.command,
        "-m",
        *fixed,
        *(f"{k}={','.join(v)}" for k, v in axes.items()),
        *session.launcher.overrides(jobs),
        f"hydra.sweep.dir={sweep_dir}",
    ]


def recipe_command(sweep: Sweep) -> list[str]:
    """The command a recipe's header gives for ``sweep``: its seeds under ``outputs/claims``; revivals from the
    parent sweep's jobs of those seeds (job n is seed n: the parent ran its seeds 0..n-1 as one multirun)."""
    session = Session(Path("outputs/claims"))
    _, swept = _axes(session.overrides(sweep))
    if sweep.parent is None:
        axes = {**swept, "seed": [str(s) for s in sweep.seeds]}
    else:
        axes = {**swept, "ckpt": [f"outputs/claims/{sweep.parent}/{s}" for s in sweep.seeds]}
    return command(session, sweep, axes, Path("outputs/claims") / sweep.name)


def report_command(claim: Claim) -> str:
    """The ``sesa diversity-report`` command a recipe's header gives for ``claim``'s sweeps under outputs/claims."""
    runs = ",".join(f"outputs/claims/{name}" for name in claim.sweeps)
    compare = f" 'compare=[{','.join(claim.compare)}]'" if claim.compare else ""
    return f"sesa diversity-report runs=[{runs}]{compare}"


def run_sweep(session: Session, sweep: Sweep, log: Path, jobs: int = 2) -> list[str]:
    """Run the jobs of ``sweep`` that have no complete run, ``jobs`` at a time; returns notes on jobs that could not
    run or did not finish."""
    ckpts = session.checkpoints(sweep)
    notes = []
    if ckpts is not None:
        notes += [
            f"{sweep.name}: no complete {sweep.parent} run of seed {s} to revive"
            for s in session.seeds_of(sweep)
            if s not in ckpts
        ]
    missing = session.missing(sweep, ckpts)
    if not missing:
        return notes
    _set_aside_incomplete(session.root, sweep)
    # Settings of the swept keys that lack the same seeds (or checkpoints) run as one multirun when they form a
    # Cartesian product (always, on a first run), else one multirun each.
    axis = "seed" if ckpts is None else "ckpt"
    lacking: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for job in missing:
        lacking.setdefault(tuple((k, v) for k, v in job.items() if k != axis), []).append(job[axis])
    batches: dict[tuple[str, ...], list[tuple[tuple[str, str], ...]]] = {}
    for setting, values in lacking.items():
        batches.setdefault(tuple(values), []).append(setting)
    for seeds_or_ckpts, settings in batches.items():
        product = {k: list(dict.fromkeys(dict(s)[k] for s in settings)) for k, _ in settings[0]}
        if len(settings) == math.prod(len(v) for v in product.values()):
            multiruns = [product]
        else:
            multiruns = [{k: [v] for k, v in setting} for setting in settings]
        for swept in multiruns:
            if _STOPPING.is_set():  # Ctrl-C in the other lane's time: start nothing new
                break
            sweep_dir = _next_sweep_dir(session.root, sweep)
            _run(command(session, sweep, {**swept, axis: list(seeds_or_ckpts)}, sweep_dir, jobs), log, sweep.name)
    notes += [f"{sweep.name}: job {job} did not finish" for job in session.missing(sweep, ckpts)]
    return notes


def _set_aside_incomplete(root: Path, sweep: Sweep) -> None:
    """Move incomplete job dirs out of the report's way (a dot-name is skipped), never deleting them."""
    for job_dir in _job_dirs(root, sweep):
        if not is_complete(job_dir):
            job_dir.rename(job_dir.with_name(f".{job_dir.name}.incomplete.{int(time.time())}"))


def _next_sweep_dir(root: Path, sweep: Sweep) -> Path:
    first = root / sweep.name
    if not first.exists():
        return first
    n = 1
    while (root / f"{sweep.name}.retry{n}").exists():
        n += 1
    return root / f"{sweep.name}.retry{n}"


LANES = 2
"""How many multiruns the page runs at once, each one job at a time (:func:`run_sweeps`): the cores of the 2-core
machine the page is made on, one torch thread per job."""

_STOPPING = threading.Event()
"""Set when the page's session is stopping: no lane starts another multirun."""

_SESSION_LOCK = threading.Lock()
"""Serializes the lanes' writes to ``session.log`` and ``session.json``."""


def run_sweeps(session: Session, sweeps: Sequence[Sweep], log: Path, lanes: int | None = LANES) -> list[str]:
    """Run ``sweeps`` (:func:`run_sweep` each) in ``lanes`` lanes at once, one job at a time in each; returns their
    notes. A free lane takes the costliest sweep that is ready (a revival once its parent sweep is done; a parent
    counts the revivals waiting on it), so the cores stay busy across sweeps: a sweep run alone, two jobs at a time,
    leaves a core idle while its last job runs and while its base is built. ``lanes=1``: one sweep after another,
    two jobs at a time (how the page was made before). ``lanes=None``: every sweep as soon as it is ready (a
    cluster's launcher, whose scheduler runs the jobs of them all as its cores free up)."""
    lanes = lanes or max(len(sweeps), 1)
    cost = {s.name: _missing(session, s) * RUN_MINUTES.get(s.recipe, 1.0) for s in sweeps}
    priority = {s.name: cost[s.name] + sum(cost[c.name] for c in sweeps if c.parent == s.name) for s in sweeps}
    pending, notes = list(sweeps), []
    running: dict[Future[list[str]], Sweep] = {}
    _STOPPING.clear()
    with ThreadPoolExecutor(max_workers=lanes) as pool:
        try:
            while pending or running:
                waiting = {s.name for s in pending} | {s.name for s in running.values()}
                ready = sorted((s for s in pending if s.parent not in waiting), key=lambda s: -priority[s.name])
                for sweep in ready[: lanes - len(running)]:
                    pending.remove(sweep)
                    running[pool.submit(run_sweep, session, sweep, log, 1 if lanes > 1 else 2)] = sweep
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    del running[future]
                    notes += future.result()
        except BaseException:
            # Ctrl-C (the multiruns get it too and stop their jobs as `sesa` does): the lanes finish the multirun
            # they are in, then start nothing more; what finished stays, what did not is rerun next time
            _STOPPING.set()
            raise
    return notes


def _missing(session: Session, sweep: Sweep) -> int:
    """How many of ``sweep``'s jobs lack a complete run (a revival whose parent has not run: all of them)."""
    ckpts = session.checkpoints(sweep)
    if sweep.parent is not None and not ckpts:
        return len(session.jobs(sweep))
    return len(session.missing(sweep, ckpts))


def _run(argv: list[str], log: Path, name: str) -> None:
    """Run one ``sesa`` multirun (one torch thread per job; on joblib ``OMP_NUM_THREADS=1``): its output goes to
    ``logs/<sweep dir>.log`` beside ``log``, its command and exit to ``log``, its start and wall time to
    ``session.json`` beside ``log``."""
    exe = shutil.which("sesa") or str(Path(sys.executable).with_name("sesa"))
    # joblib's workers on this machine: one thread each; Ray sets a task's OMP_NUM_THREADS to its CPUs (one)
    threads = {"OMP_NUM_THREADS": "1"} if "hydra/launcher=joblib" in argv else {}
    env = {**os.environ, **threads}
    shell = "".join(f"{k}={v} " for k, v in threads.items()) + " ".join(argv)
    sweep_dir = Path(argv[-1].partition("=")[2])
    own = log.parent / "logs" / f"{sweep_dir.name}.log"
    own.parent.mkdir(parents=True, exist_ok=True)
    print(f"[results] {name}: {' '.join(argv)}", flush=True)
    with _SESSION_LOCK, log.open("a") as out:
        out.write(f"\n$ {shell}\n(output: {own.relative_to(log.parent)})\n")
    started, start = time.strftime("%Y-%m-%dT%H:%M:%S"), time.time()
    with own.open("a") as out:
        out.write(f"$ {shell}\n")
        out.flush()
        code = subprocess.run([exe, *argv[1:]], stdout=out, stderr=subprocess.STDOUT, env=env, check=False).returncode
    seconds = time.time() - start
    timing = log.with_name("session.json")
    with _SESSION_LOCK:
        record = json.loads(timing.read_text()) if timing.is_file() else {"sweeps": []}
        record["sweeps"].append(
            {
                "sweep": name,
                "argv": argv,
                "started": started,
                "seconds": round(seconds, 1),
                "exit_code": code,
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
        )
        timing.write_text(json.dumps(record, indent=2))
        with log.open("a") as out:
            out.write(f"{name}: exit {code} after {seconds / 60:.1f} min\n")
    print(f"[results] {name}: exit {code} after {seconds / 60:.1f} min", flush=True)


def machine_shares(records: Sequence[dict[str, Any]]) -> list[float]:
    """Each multirun's share of the machine in seconds: while ``k`` multiruns ran at once (the page's lanes), each
    had ``1/k`` of every second, so the shares of a session add up to its wall time whatever ran beside what. A
    record without ``started`` (written before the lanes) ran alone and ended at ``finished``."""
    spans = []
    for r in records:
        if "started" in r:
            start = time.mktime(time.strptime(r["started"], "%Y-%m-%dT%H:%M:%S"))
            spans.append((start, start + float(r["seconds"])))
        else:
            end = time.mktime(time.strptime(r["finished"], "%Y-%m-%dT%H:%M:%S"))
            spans.append((end - float(r["seconds"]), end))
    shares = [0.0] * len(spans)
    cuts = sorted({t for span in spans for t in span})
    for lo, hi in itertools.pairwise(cuts):
        active = [i for i, (a, b) in enumerate(spans) if a <= lo and hi <= b]
        for i in active:
            shares[i] += (hi - lo) / len(active)
    return shares


CORES = (16, 64, 256)
"""The core counts the page states its sweeps' least time on (:func:`cores_sentence`)."""


def run_seconds(run_dir: Path) -> tuple[float, Path | None] | None:
    """(a run's seconds, the run it revived or None) from its run.json: its ``started`` to its ``ended``, which is the
    time of its last process after its model load (a base's warm start, or an earlier stretch of a resumed run, not
    counted); None where run.json lacks either."""
    info = json.loads((run_dir / "run.json").read_text())
    if not info.get("started") or not info.get("ended"):
        return None
    start, end = (time.mktime(time.strptime(info[k], "%Y-%m-%dT%H:%M:%S")) for k in ("started", "ended"))
    parent = info.get("parent_run")
    return max(end - start, 0.0), Path(parent).resolve() if parent else None


def least_time(runs: dict[Path, tuple[float, Path | None]], cores: int) -> float:
    """A lower bound on the seconds ``runs`` (run -> its seconds and the run it revived, :func:`run_seconds`) take
    on ``cores`` cores, one job each: their total over the cores, or the longest chain of a run and the revivals
    that wait on it, whichever is longer (scheduling, start-up and a sweep waiting on its whole parent sweep come
    on top)."""
    chains: dict[Path, float] = {}

    def chain(run: Path) -> float:
        if run not in chains:
            seconds, parent = runs[run]
            chains[run] = seconds + (chain(parent) if parent in runs else 0.0)
        return chains[run]

    if not runs:
        return 0.0
    return max(sum(seconds for seconds, _ in runs.values()) / cores, max(chain(run) for run in runs))


def cores_sentence(run_dirs: Sequence[Path], cores: Sequence[int] = CORES) -> str:
    """What the page's runs took on one core each and the least their sweeps would take on ``cores`` cores
    (:func:`least_time`); empty where no run recorded its end."""
    runs = {path.resolve(): timed for path in run_dirs if (timed := run_seconds(path)) is not None}
    if not runs:
        return ""
    total = sum(seconds for seconds, _ in runs.values())
    bounds = [_duration(least_time(runs, n)) for n in cores]
    return (
        f" The page's {len(runs)} runs took {total / 3600:.1f} core-hours (each run.json's start to end, its model "
        f"load excluded); on {', '.join(map(str, cores[:-1]))} or {cores[-1]} cores, one job each, their sweeps would "
        f"take at least {', '.join(bounds[:-1])} or {bounds[-1]} (a lower bound: the total over the cores, or the "
        "longest run with its revival where that is longer)."
    )


def _duration(seconds: float) -> str:
    """``42 s``, ``17 min`` or ``3 h 05 min``."""
    return f"{seconds:.0f} s" if seconds < 60 else _minutes(round(seconds / 60))


def _minutes(minutes: int) -> str:
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


# ----------------------------------------------------------------------------------------------- the page
def render(session: Session, docs: Path, claims: Sequence[Claim] = CLAIMS, notes: Sequence[str] = ()) -> Path:
    """Write ``docs/results.md`` (and its PNGs under ``docs/results/``): the sections of ``claims`` from the complete
    runs under the root; the section of every other claim as the page already has it (each section names its own
    seeds, runs and commits), or from the runs under the root where the page has none. So one claim can be rerun and
    its section rewritten without rerunning the others."""
    figures = docs / "results"
    page = docs / "results.md"
    kept = page_sections(page.read_text()) if page.is_file() else {}
    chosen = {c.key for c in claims}
    names = dict.fromkeys(name for claim in CLAIMS for name in claim.sweeps)
    complete = {name: [path for _, path in session.complete(sweep_named(name))] for name in names}
    sections = []
    for claim in CLAIMS:
        if claim.key in kept and claim.key not in chosen:
            sections += kept[claim.key]
            continue
        runs = [path for name in claim.sweeps for path in complete[name]]
        sections += _claim_section(session, claim, runs, figures, docs)
    glance = head_to_head_figure(figures)
    every = [path for paths in complete.values() for path in paths]
    preamble = _preamble(session, notes, _sections_time(sections), cores_sentence(every))
    if glance is not None:
        glance_text = (
            f"At a glance, claims {', '.join(HEAD_TO_HEAD['claims'])}: every method's final success against the "
            "diversity of what it wins, one panel per task (mean over seeds, 95% bootstrap interval of each mean; "
            "SESA and its combinations in red, GRPO at GRPO's rollouts in black, GRPO given more compute in grey):"
        )
        preamble += [glance_text, "", f"![head to head]({glance.relative_to(docs)})", ""]
    at_compute = equal_compute_figure(figures)
    if at_compute is not None:
        at_compute_text = (
            "The same at equal compute: every method's difference to GRPO given the group size whose cost is nearest "
            'its own (the tables "At equal compute"; 0 is GRPO at the method\'s compute):'
        )
        preamble += [
            at_compute_text,
            "",
            f"![head to head at equal compute]({at_compute.relative_to(docs)})",
            "",
        ]
    page.write_text("\n".join([*preamble, *sections]))
    return page


EQUAL_COMPUTE_CSV = "equal_compute.csv"
"""Each head-to-head section's table "At equal compute" as numbers beside its figures: what
:func:`equal_compute_figure` reads."""
GROUPS_CSV = "groups.csv"
"""Each section's group summary beside its figures (docs/results/<key>/): what :func:`head_to_head_figure` reads,
so the figure can be redrawn from a section the page keeps without its runs."""


def write_groups(report: Report, path: Path) -> None:
    """The final values of ``report``'s headline metrics per group (mean, 95% interval, seeds), labelled as the
    page's tables label the groups, with what each group is as data (``items``: JSON of Report.items, which the
    figure and scripts/findings.py read instead of a label's words)."""
    rows = report.groups[report.groups["metric"].isin(report.headline)]
    table = rows[["group", "metric", "n_seeds", "final_mean", "final_low", "final_high"]].copy()
    lost = report.lost()
    table["lost"] = table["group"].map(lambda g: lost[g][0])
    table["items"] = table["group"].map(lambda g: json.dumps(report.items.get(g, {}), sort_keys=True))
    table["group"] = table["group"].map(report.labels)
    table.to_csv(path, index=False)


def group_method(table: pd.DataFrame, group: str) -> str:
    """The method of ``group`` (a label) in a section's groups table: sesa_cli.report.tables.method_name of its
    ``items``; its label itself for a table written before groups carried their items."""
    if "items" not in table.columns:
        return group
    return method_name(json.loads(table.loc[table["group"] == group, "items"].iloc[0]))


def _panels(figures: Path, csv_name: str, metric_column: str) -> list[tuple[str, pd.DataFrame, str]]:
    """The head-to-head claims' (:data:`HEAD_TO_HEAD`) tables ``csv_name`` under ``figures`` that hold both the
    claim's diversity metric and success in ``metric_column``: (panel title, table, diversity metric)."""
    panels = []
    for key_, x in HEAD_TO_HEAD["claims"].items():
        csv = figures / key_ / csv_name
        if csv.is_file():
            table = pd.read_csv(csv)
            if {x, HEAD_TO_HEAD["success"]} <= set(table[metric_column]):
                title = next(c.title for c in CLAIMS if c.key == key_).split(": ")[-1]
                panels.append((f"{key_}. {title}", table, x))
    return panels


def _method_styles(names: Sequence[str]) -> dict[str, tuple[Any, str]]:
    """A colour and marker per method name, alike in every figure: GRPO black, GRPO given another method's compute
    (a larger group) in greys, one marker per size; SESA red."""
    from matplotlib import colormaps

    others = iter(colormaps["tab20"].colors)
    sized = iter(zip(("dimgray", "gray", "darkgray", "silver", "lightgray"), "DdHhp", strict=True))
    style: dict[str, tuple[Any, str]] = {}
    for n, name in enumerate(names):
        if name.startswith("GRPO"):
            style[name] = ("black", "s") if name == "GRPO" else next(sized, ("gray", "D"))
        elif name.startswith("SESA"):
            style[name] = ("tab:red", "*" if name == "SESA" else "P^v"[n % 3])
        else:
            color = next(others)
            style[name] = (color if color[0] < 0.8 or color[1] > 0.3 else next(others), "o^vD<>p"[n % 7])
    return style


def _point(ax: Any, px: Any, py: Any, style: tuple[Any, str], lost: int, seeds: int, prefix: str) -> None:
    """One group's point at (``px``, ``py``): rows with ``{prefix}mean``, ``{prefix}low`` and ``{prefix}high``, the
    95% intervals as bars; hollow where the group lost runs, which it says beside the point."""
    color, marker = style
    ax.errorbar(
        [px[f"{prefix}mean"]],
        [py[f"{prefix}mean"]],
        xerr=[[px[f"{prefix}mean"] - px[f"{prefix}low"]], [px[f"{prefix}high"] - px[f"{prefix}mean"]]],
        yerr=[[py[f"{prefix}mean"] - py[f"{prefix}low"]], [py[f"{prefix}high"] - py[f"{prefix}mean"]]],
        color=color,
        marker=marker,
        mfc="none" if lost else color,  # hollow: the group lost runs (their values are in its mean)
        ms=9 if marker == "*" else 6,
        capsize=2,
        lw=0.8,
        alpha=0.85,
    )
    if lost:
        ax.annotate(f"{lost}/{seeds} lost", (px[f"{prefix}mean"], py[f"{prefix}mean"]), fontsize=7, xytext=(4, -9),
                    textcoords="offset points", color=color)  # fmt: skip


def _save_panels(panels: list[tuple[str, pd.DataFrame, str]], draw: Any, ylabel: str, xlabel: str, path: Path) -> Path:
    """A figure of one panel per claim: ``draw(ax, table, x, styles)`` fills each; one legend of every method."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    names = list(dict.fromkeys(group_method(table, g) for _, table, _ in panels for g in table["group"]))
    style = _method_styles(names)
    fig = Figure(figsize=(3.6 * len(panels), 4.3))
    for i, (title, table, x) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        draw(ax, table, x, style)
        ax.set_xlabel(textwrap.fill(xlabel.format(DIVERSITY_LABELS.get(x, x)), 32))  # labels side by side stay apart
        ax.set_ylabel(ylabel if i == 0 else "")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    handles = [
        Line2D([], [], color=c, marker=m, ls="", ms=9 if m == "*" else 6, label=n) for n, (c, m) in style.items()
    ]
    ncol = min(len(handles), 7, 2 * len(panels) + 1)  # a legend no wider than the panels
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 + 0.04 * ((len(handles) - 1) // ncol), 1, 1))
    fig.savefig(path, dpi=110)
    return path


def head_to_head_figure(figures: Path) -> Path | None:
    """``head_to_head.png`` under ``figures``: one panel per head-to-head claim (:data:`HEAD_TO_HEAD`), one point per
    group at its final diversity (the claim's metric there) and success, with the 95% bootstrap interval of each mean
    as bars; read from the sections' :data:`GROUPS_CSV`. GRPO at GRPO's rollouts is the black square, GRPO given more
    compute the grey points. None where no section has one."""
    panels = _panels(figures, GROUPS_CSV, "metric")
    if not panels:
        return None

    def draw(ax: Any, table: pd.DataFrame, x: str, style: dict[str, tuple[Any, str]]) -> None:
        for group in dict.fromkeys(table["group"]):
            rows = table[table["group"] == group].set_index("metric")
            if x in rows.index and HEAD_TO_HEAD["success"] in rows.index:
                py = rows.loc[HEAD_TO_HEAD["success"]]
                lost = int(py.get("lost", 0))  # a section written before runs lost were counted has none
                style_ = style[group_method(table, group)]
                _point(ax, rows.loc[x], py, style_, lost, int(py["n_seeds"]), "final_")

    success = f"{HEAD_TO_HEAD['success']} (final)"
    return _save_panels(panels, draw, success, "{}", figures / "head_to_head.png")


def equal_compute_figure(figures: Path) -> Path | None:
    """``equal_compute.png`` under ``figures``: the head to head at equal compute, one point per method at its
    difference to GRPO given the compute nearest its own (the sections' tables "At equal compute", read from their
    :data:`EQUAL_COMPUTE_CSV`), in the claim's diversity metric and in success, with their 95% intervals; 0 is GRPO at
    the method's compute. None where no section has one."""
    panels = _panels(figures, EQUAL_COMPUTE_CSV, "metric")
    if not panels:
        return None

    def draw(ax: Any, table: pd.DataFrame, x: str, style: dict[str, tuple[Any, str]]) -> None:
        ax.axhline(0, color="black", lw=0.8)
        ax.axvline(0, color="black", lw=0.8)
        for group in dict.fromkeys(table["group"]):
            rows = table[table["group"] == group].set_index("metric")
            if x in rows.index and HEAD_TO_HEAD["success"] in rows.index:
                py = rows.loc[HEAD_TO_HEAD["success"]]
                style_ = style[group_method(table, group)]
                _point(ax, rows.loc[x], py, style_, int(py["lost"]), int(py["n_seeds"]), "diff_")

    success = f"{HEAD_TO_HEAD['success']} − GRPO at its compute"
    return _save_panels(panels, draw, success, "{} − GRPO at its compute", figures / "equal_compute.png")


def write_equal_compute(report: Report, path: Path) -> None:
    """:attr:`Report.equal_compute`'s differences in the headline metrics (``diff_mean``, ``diff_low``,
    ``diff_high``), each group labelled as the page labels it, with the group it is set against, its runs lost and
    seeds and its ``items``: what :func:`equal_compute_figure` reads."""
    compare = report.equal_compute
    assert compare is not None
    rows = compare[compare["metric"].isin(report.headline)]
    lost = report.lost()
    table = pd.DataFrame(
        {
            "group": rows["group"].map(report.labels),
            "against": rows["baseline"].map(report.labels),
            "metric": rows["metric"],
            "n_seeds": rows["n_group"],
            "diff_mean": rows["difference"],
            "diff_low": rows["low"],
            "diff_high": rows["high"],
            "lost": rows["group"].map(lambda g: lost[g][0]),
            "items": rows["group"].map(lambda g: json.dumps(report.items.get(g, {}), sort_keys=True)),
        }
    )
    table.to_csv(path, index=False)


def _sections_time(lines: Sequence[str]) -> str:
    """The wall time of the page's sweeps: the sum of what each section says its own sweeps took (a section kept
    from an earlier session keeps its time, so the page's total is never one session's alone)."""
    minutes = 0
    for line in lines:
        m = re.search(r"its sweeps took (?:(\d+) h )?(\d+) min of wall time", line)
        if m:
            minutes += 60 * int(m.group(1) or 0) + int(m.group(2))
    return _minutes(minutes)


def page_sections(text: str) -> dict[str, list[str]]:
    """A written page's claim sections by key (``## IV. ...`` up to the next ``## `` heading), as lines."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line.startswith("## ")]
    return {
        lines[i][3:].split(".", 1)[0]: lines[i:end] for i, end in zip(starts, [*starts[1:], len(lines)], strict=True)
    }


def _claim_section(session: Session, claim: Claim, runs: list[Path], figures: Path, docs: Path) -> list[str]:
    lines = [f"## {claim.key}. {claim.title}", "", claim.text, "", _provenance(session, claim, runs), ""]
    recipes = dict.fromkeys(sweep_named(name).recipe for name in claim.sweeps)
    named = ", ".join(f"`conf/experiment/{r}.yaml`" for r in recipes)
    lines += [
        f"Recipe{'s' * (len(recipes) > 1)}: {named}. The sweeps and the report, as the header comments give them:",
        "",
        "```",
    ]
    lines += [f"OMP_NUM_THREADS=1 {' '.join(recipe_command(sweep_named(name)))}" for name in claim.sweeps]
    lines += [report_command(claim), "```", ""]
    for name in claim.sweeps:
        sweep = sweep_named(name)
        expected = math.prod(len(v) for v in _axes(session.overrides(sweep))[1].values()) * len(
            session.seeds_of(sweep)
        )
        found = len(session.complete(sweep))
        if found < expected:
            lines += [f"- **Incomplete:** {found} of the {expected} jobs of sweep `{name}` have finished.", ""]
    if not runs:
        return [*lines, "Not run yet.", ""]
    n_groups = len({_group_key(p) for p in runs})
    compare = claim.compare if n_groups > 1 else ()
    if compare and compare[0].isdigit() and int(compare[0]) > n_groups:  # its sweep has not run yet
        lines += [f"- No differences yet: the baseline, group [{compare[0]}], has no runs.", ""]
        compare = ()
    report = analyse(runs, compare)
    use_headline(report, claim.headline)
    out = session.root / "reports" / claim.key
    files = write_report(report, out)
    lines += [f"{report.intro()} Full report: `{shown(out / 'report.html', session.root)}`.", ""]
    lines += [markdown_table(report.headline_frame(), index=False), ""]
    difference = report.difference_frame()
    if difference is not None:
        lines += [f"{report.difference_title()}:", "", markdown_table(difference, index=False), ""]
    # a tuned claim sets its picks at equal compute in its own table (tuning_section)
    target = figures / claim.key
    target.mkdir(parents=True, exist_ok=True)
    equal = None if claim.key in _tuned_claims() or not _beyond_baseline(report) else report.equal_compute_frame()
    if equal is not None:
        lines += [f"{report.equal_compute_title()}:", "", markdown_table(equal, index=False), ""]
        write_equal_compute(report, target / EQUAL_COMPUTE_CSV)
    else:
        (target / EQUAL_COMPUTE_CSV).unlink(missing_ok=True)
    if claim.gains and report.baseline is not None:
        lines += gains_table(report)
    lines += one_answer_note(report)
    lines += tuning_section(claim, report, figures)
    write_groups(report, target / GROUPS_CSV)
    for name in claim.plots:
        if name in files["plots"]:
            shutil.copyfile(files["plots"][name], target / f"{name}.png")
            lines += [f"![{name}]({(target / f'{name}.png').relative_to(docs)})", ""]
    lines += [f"- {note}" for note in files["notes"]]
    return [*lines, ""]


# ------------------------------------------------------------------------------------------------ equal tuning
def _beyond_baseline(report: Report) -> bool:
    """Whether the table "At equal compute" sets some group against another GRPO group than the baseline (else it
    would repeat rows of the difference table)."""
    pairs = report.equal_compute
    return pairs is not None and set(pairs["baseline"]) != {report.baseline}


def _tuned_claims() -> set[str]:
    """The claims of :data:`TUNING`: the tuned ones and their checks."""
    return {*TUNING["tasks"], *(task["check"] for task in TUNING["tasks"].values())}


def setting_of(items: dict[str, str]) -> str:
    """A group's setting of its method's knobs, from its structured items: the keys its runs set beside the sampler
    and algo options (``algo.advantage.k=2``), or ``as shipped``."""
    keys = [f"{k}={v}" for k, v in sorted(items.items()) if k not in ("algo", "sampler")]
    return ", ".join(keys) or "as shipped"


def _finals(report: Report, group: str, metric: str) -> dict[str, float]:
    """``{seed: final value}`` of ``metric`` in ``group``'s runs."""
    rows = report.per_run[(report.per_run["group"] == group) & (report.per_run["metric"] == metric)]
    return {str(seed or run): float(v) for seed, run, v in zip(rows["seed"], rows["run"], rows["final"], strict=True)}


def _versus(
    report: Report, base: str, group: str, metrics: dict[str, str]
) -> dict[str, tuple[float, float, float, bool]]:
    """``group`` minus ``base`` in the tuning's two ``metrics`` (``success``, ``diversity``: their keys), paired by
    seed (:func:`difference_interval`)."""
    return {
        name: difference_interval(_finals(report, base, metric), _finals(report, group, metric))
        for name, metric in metrics.items()
    }


def _difference_columns(diff: dict[str, tuple[float, float, float, bool]]) -> dict[str, Any]:
    """:func:`_versus`'s differences as a tuning frame's columns (``success_diff``, ``success_low``, ...), with
    ``clears``: whether the success difference is no lower than the floor."""
    columns: dict[str, Any] = {
        f"{name}_{part}": diff[name][i] for name in diff for i, part in enumerate(("diff", "low", "high"))
    }
    return {**columns, "clears": diff["success"][0] >= TUNING["floor"]}


def _titled_table(intro: str, rows: list[dict[str, Any]]) -> list[str]:
    """A page's table of ``rows`` under the line ``intro``, as the sections' lines."""
    return [intro, "", markdown_table(pd.DataFrame(rows), index=False), ""]


def _is_grpo(method: str) -> bool:
    """GRPO itself and GRPO given another group size: the baselines, not methods to tune."""
    return method == "GRPO" or method.startswith("GRPO (")


def tuning_frame(report: Report, metrics: dict[str, str]) -> pd.DataFrame:
    """Per setting of every method of ``report`` (GRPO's groups excluded): its method and setting, its cost
    relative to the baseline, its success and diversity (``metrics``) minus the baseline's (paired by seed), its runs
    lost, whether its success clears the floor (TUNING["floor"] below the baseline's), and whether it is its method's
    pick: of the settings that clear the floor, the one with the most diversity; where none does, the one with the
    highest success (the criterion of ``scripts/claims.yaml``, ``tuning:``)."""
    assert report.baseline is not None
    cost = report.costs
    lost = report.lost()
    records = []
    for group in report.labels:
        items = report.items.get(group, {})
        method = method_name(items)
        if group == report.baseline or _is_grpo(method):
            continue
        records.append(
            {
                "method": method,
                "setting": setting_of(items),
                "group": report.labels[group],
                "cost": cost.get(group, math.nan),
                **_difference_columns(_versus(report, report.baseline, group, metrics)),
                "lost": lost[group][0],
                "runs": lost[group][1],
            }
        )
    return mark_picks(pd.DataFrame.from_records(records))


def mark_picks(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (a row per method and setting: ``success_diff``, ``diversity_diff``, ``clears``) with a ``pick``
    column: per method, of the settings that clear the floor, the one with the most diversity; where none does, the
    one with the highest success; a tie goes to the setting listed first (the shipped one, in the claims' order)."""
    frame = frame.copy()
    frame["pick"] = False
    for _, rows in frame.groupby("method", sort=False):
        cleared = rows[rows["clears"].astype(bool)]
        best = cleared["diversity_diff"].idxmax() if not cleared.empty else rows["success_diff"].idxmax()
        frame.loc[best, "pick"] = True
    return frame


def agrees(tuned: Any, checked: Any) -> bool:
    """Whether a pick's result on the check seeds agrees with its result on the tuning seeds: its diversity
    difference to GRPO has the same sign on both, and its success clears the floor on both or on neither."""
    same_sign = bool(np.sign(checked["diversity_diff"]) == np.sign(tuned["diversity_diff"]))
    return same_sign and bool(checked["clears"]) == bool(tuned["clears"])


def _interval(row: Any, name: str) -> str:
    return format_interval(row[f"{name}_diff"], row[f"{name}_low"], row[f"{name}_high"], sign=True)


def winner(frame: pd.DataFrame) -> Any | None:
    """The task's winner among the picks: the most diversity among those that clear the floor (None where none
    does)."""
    cleared = frame[frame["pick"].astype(bool) & frame["clears"].astype(bool)]
    return None if cleared.empty else cleared.loc[cleared["diversity_diff"].idxmax()]


def tuning_section(claim: Claim, report: Report, figures: Path) -> list[str]:
    """A tuned claim's tables (every setting and the picks, the picks at equal compute, the winner; written to
    :data:`TUNING_CSV` too), or a check claim's (each pick on the other seeds beside its tuning-seed result, and
    whether they agree); nothing for any other claim."""
    tasks = TUNING["tasks"]
    checks = {task["check"]: key_ for key_, task in tasks.items()}
    if report.baseline is None or claim.key not in _tuned_claims():
        return []
    tuned = checks.get(claim.key, claim.key)
    metrics = {"success": tasks[tuned]["success"], "diversity": tasks[tuned]["diversity"]}
    frame = tuning_frame(report, metrics)
    if frame.empty:
        return []
    success, diversity = metrics["success"], metrics["diversity"]
    base = report.labels[report.baseline]
    if claim.key in checks:
        return _check_section(tuned, frame, figures, base, metrics)
    recorded = tasks[claim.key].get("picks") or {}
    rows = [
        {
            "method": row["method"],
            "setting": row["setting"],
            COST: cost_text(row["cost"]),
            f"{success} − {base}": _interval(row, "success"),
            f"{diversity} − {base}": _interval(row, "diversity"),
            "runs lost": lost_text(row["lost"], row["runs"]),
            f"success ≥ {base}'s {TUNING['floor']:+}": "yes" if row["clears"] else "no",
            "pick": "pick" if row["pick"] else "",
        }
        for _, row in frame.iterrows()
    ]
    lines = _titled_table(
        f"Equal tuning. The rule the settings were chosen by, before any of them ran: {' '.join(TUNING['rule'].split())}"
        f" The pick, per method: {' '.join(TUNING['criterion'].split())} Each setting against {base} on seeds "
        f"{', '.join(report.seeds)} (paired by seed):",
        rows,
    )
    picks = frame[frame["pick"]]
    differs = [
        f"{row['method']} (recorded {recorded.get(row['method'], 'none')!r}, measured {row['setting']!r})"
        for _, row in picks.iterrows()
        if recorded.get(row["method"]) != row["setting"]
    ]
    if differs:
        lines += [
            f"- **The picks recorded in scripts/claims.yaml differ from the criterion's:** {'; '.join(differs)}.",
            "",
        ]
    compute_lines, at_compute = _equal_compute(report, picks, base, metrics)
    lines += compute_lines
    best = winner(frame)
    best_at_compute = None if at_compute.empty else winner(at_compute)
    frame["winner"] = ""
    if best is not None:
        frame.loc[best.name, "winner"] = "rollouts"
    if best_at_compute is not None:
        won = (frame["method"] == best_at_compute["method"]) & (frame["setting"] == best_at_compute["setting"])
        frame.loc[won, "winner"] = frame.loc[won, "winner"].map(lambda w: "both" if w else "compute")
    frame.to_csv(figures / claim.key / TUNING_CSV, index=False)
    at_rollouts = (
        "none; no pick's success clears the floor"
        if best is None
        else (
            f"{best['group'].split(' ', 1)[0]} **{best['method']}** ({best['setting']}): {diversity} "
            f"{_interval(best, 'diversity')} and {success} {_interval(best, 'success')} against {base}, at "
            f"{cost_text(best['cost'])} its compute"
        )
    )
    if at_compute.empty:
        lines += [
            f"{WINNER} {at_rollouts} (the criterion among the picks; no GRPO group at another compute here).",
            "",
        ]
        return lines
    lines += [f"At GRPO's rollouts, the criterion among the picks chooses {at_rollouts}.", ""]
    best = best_at_compute
    if best is None:
        lines += [f"{WINNER} none; no pick's success clears the floor against GRPO at its compute.", ""]
        return lines
    lines += [
        (
            f"{WINNER} {best['group'].split(' ', 1)[0]} **{best['method']}** ({best['setting']}; the criterion among "
            f"the picks, each against GRPO at the compute nearest its own): {diversity} {_interval(best, 'diversity')} "
            f"and {success} {_interval(best, 'success')} against {best['against']}, at "
            f"{best['cost'] / best['against_cost']:.2f}x its compute."
        ),
        "",
    ]
    return lines


def _equal_compute(
    report: Report, picks: pd.DataFrame, base: str, metrics: dict[str, str]
) -> tuple[list[str], pd.DataFrame]:
    """Each pick against the GRPO group whose cost is nearest its own (GRPO given a larger group: equal compute), as
    a table and as a frame the criterion reads (:func:`winner`); nothing where the claim has GRPO at one size only.
    The nearest is the report's (:meth:`Report.nearest_sized`), as in every section's table "At equal compute"."""
    grpo = report.sized_baselines()
    if len(grpo) < 2:
        return [], pd.DataFrame()
    by_label = {label: group for group, label in report.labels.items()}
    rows, records = [], []
    for _, row in picks.iterrows():
        group = by_label[row["group"]]
        nearest = report.nearest_sized(group)
        if nearest is None:  # its runs recorded no cost
            continue
        record = {
            **row.to_dict(),
            **_difference_columns(_versus(report, nearest, group, metrics)),
            "against": report.labels[nearest],
            "against_cost": grpo[nearest],
        }
        records.append(record)
        rows.append(
            {
                "method": row["method"],
                "pick": row["setting"],
                COST: cost_text(row["cost"]),
                "GRPO at the nearest compute": f"{report.labels[nearest]} ({cost_text(grpo[nearest])})",
                f"{metrics['success']} − it": _interval(record, "success"),
                f"{metrics['diversity']} − it": _interval(record, "diversity"),
                f"success ≥ its {TUNING['floor']:+}": "yes" if record["clears"] else "no",
            }
        )
    title = (
        "Each pick at equal compute: against the GRPO group whose cost (relative to "
        f"{base}) is nearest its own, paired by seed:"
    )
    return _titled_table(title, rows), pd.DataFrame.from_records(records)


def _check_section(tuned: str, frame: pd.DataFrame, figures: Path, base: str, metrics: dict[str, str]) -> list[str]:
    """Each pick of claim ``tuned`` on this claim's seeds beside its result on the tuning seeds: they agree when its
    diversity difference has the same sign on both and its success clears the floor on both or on neither."""
    csv = figures / tuned / TUNING_CSV
    if not csv.is_file():
        return [f"- No picks to check: claim {tuned}'s section has no tuning table yet.", ""]
    tuning = pd.read_csv(csv)
    picks = tuning[tuning["pick"].astype(bool)].set_index("method")
    here = frame.set_index(["method", "setting"])
    success, diversity = metrics["success"], metrics["diversity"]
    rows, agree = [], 0
    missing = []
    for method, pick in picks.iterrows():
        if (method, pick["setting"]) not in here.index:
            missing.append(f"{method} ({pick['setting']})")
            continue
        row = here.loc[(method, pick["setting"])]
        same = agrees(pick, row)
        agree += same
        rows.append(
            {
                "method": method,
                "pick": pick["setting"],
                f"{success} − {base}, tuning seeds": _interval(pick, "success"),
                f"{success} − {base}, here": _interval(row, "success"),
                f"{diversity} − {base}, tuning seeds": _interval(pick, "diversity"),
                f"{diversity} − {base}, here": _interval(row, "diversity"),
                "runs lost here": lost_text(int(row["lost"]), int(row["runs"])),
                "agree": "yes" if same else "no",
            }
        )
    lines = _titled_table(
        f"Claim {tuned}'s picks on these seeds, which chose nothing: they agree when the pick's {diversity} "
        f"difference has the same sign here as on the tuning seeds and its success clears {base}'s "
        f"{TUNING['floor']:+} on both or on neither. {agree} of {len(rows)} agree.",
        rows,
    )
    if missing:
        lines += [f"- **Not run here yet:** {', '.join(missing)}.", ""]
    checked = frame.merge(picks.reset_index()[["method", "setting"]], on=["method", "setting"])
    here_best = winner(checked.assign(pick=True))
    won = tuning["winner"].fillna("") if "winner" in tuning else pd.Series("", index=tuning.index)
    at_compute = tuning[won.isin(("compute", "both"))]
    at_rollouts = tuning[won.isin(("rollouts", "both"))]
    said = []
    if not at_compute.empty:
        method = at_compute.iloc[0]["method"]
        held = next((r["agree"] for r in rows if r["method"] == method), "not run here")
        said.append(f"Claim {tuned}'s winner at equal compute, {method}, agrees here: {held}")
    if not at_rollouts.empty:
        method = at_rollouts.iloc[0]["method"]
        here = "none clears the floor" if here_best is None else f"it chooses {here_best['method']}"
        said.append(f"at GRPO's rollouts claim {tuned}'s criterion chose {method}; on these seeds {here}")
    if said:
        said[0] = said[0][0].upper() + said[0][1:]
        lines += [f"{'; '.join(said)} (the criterion among the picks, at GRPO's rollouts here).", ""]
    return lines


def use_headline(report: Report, metrics: Sequence[str]) -> None:
    """Make those of ``metrics`` the runs logged the report's headline (none logged, or none given: keep its own)."""
    logged = set(report.per_run["metric"])
    report.headline = with_pruned([m for m in metrics if m in logged] or report.headline, logged)


def gains_table(report: Report, metric: str = "eval/success") -> list[str]:
    """The paper's form of an agent claim ("+0.25 absolute over the base model, an additional N% relative
    improvement over baseline RL"): per group the base model's value (each run's evaluation at step 0, before any
    update: the seed's warm-started base), the final value, the gain (paired by seed) and the gain relative to the
    baseline group's gain, gain / baseline gain - 1 (a ratio of means, no interval; undefined when the baseline did
    not gain)."""
    column = key(metric)
    start: dict[str, dict[str, float]] = {}
    end: dict[str, dict[str, float]] = {}
    for run in report.runs:
        values = run.own[column].dropna() if column in run.own else None
        if values is None or 0 not in values.index or run.seed is None:
            continue
        start.setdefault(run.group, {})[run.seed] = float(values.loc[0])
        end.setdefault(run.group, {})[run.seed] = float(values.iloc[-1])
    if report.baseline not in start:
        return []
    gains = {g: difference_interval(start[g], end[g]) for g in start}
    reference = gains[report.baseline][0]
    cost = report.costs
    rows = []
    for group in [g for g in report.labels if g in start]:
        gain = gains[group]
        if group == report.baseline:
            relative = "baseline"
        elif reference > 0:
            relative = f"{gain[0] / reference - 1:+.0%}"
        else:
            relative = f"undefined ({report.labels[report.baseline]} did not gain)"
        rows.append(
            {
                "group": report.labels[group],
                f"base {metric}": format_interval(*mean_interval(list(start[group].values()))),
                f"final {metric}": format_interval(*mean_interval(list(end[group].values()))),
                "gain over the base (paired by seed)": format_interval(*gain[:3], sign=True),
                f"gain relative to {report.labels[report.baseline]}'s": relative,
                **({COST: cost_text(cost.get(group, math.nan))} if cost else {}),
            }
        )
    title = (
        f"The paper's form: {metric} gained over the base model (the evaluation at step 0) and that gain relative to "
        f"{report.labels[report.baseline]}'s (gain / its gain - 1)"
    )
    return _titled_table(f"{title}:", rows)


def one_answer_note(report: Report) -> list[str]:
    """A line when every run's final evaluation found at most one distinct winning answer per instance (distinct
    correct@k equal to pass@k at the largest k): the diversity columns then repeat pass@k, by what the policy
    drew, not by a fault of the metric."""
    ks = at_k_values(report.headline, "eval/distinct_correct")
    if not ks:
        return []
    k = max(ks)
    correct, passed = key("eval/distinct_correct@{k}", k=k), key("eval/pass@{k}", k=k)
    finals = [run.own[[correct, passed]].dropna() for run in report.runs if {correct, passed} <= set(run.own)]
    if not finals or any(f.empty or abs(f.iloc[-1][correct] - f.iloc[-1][passed]) > 1e-9 for f in finals):
        return []
    note = (
        f"In every run's final evaluation each solved instance had exactly one distinct winning answer among its {k} "
        f"samples ({correct} = {passed}), so the diversity columns repeat {passed}."
    )
    return [note, ""]


def _group_key(run_dir: Path) -> tuple[str, ...]:
    """Overrides minus seed (and the ckpt of a revival): enough to count the groups before the report forms them."""
    overrides = parse_overrides(yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text()))
    return tuple(sorted(f"{k}={v}" for k, v in overrides.items() if k not in ("seed", "ckpt")))


def shown(path: Path, root: Path) -> str:
    """A path as the page names it, never a directory of the machine that wrote it: relative to the repository (the
    working directory the page is written from) when under it, else under the run root written ``<root>``."""
    path, root = path.resolve(), root.resolve()
    repository = Path.cwd().resolve()
    if path.is_relative_to(repository):
        return path.relative_to(repository).as_posix() or "."
    if path.is_relative_to(root):
        return "/".join(["<root>", *path.relative_to(root).parts])
    return f"<outside the repository>/{path.name}"


def _provenance(session: Session, claim: Claim, runs: Sequence[Path]) -> str:
    """Where a section's numbers come from: the seeds, the runs (their commits and environment), the wall time of its
    sweeps, and when and at which commit the section was written."""
    # a sweep an earlier claim also reads (IX-XII's GRPO and SESA runs) is timed in that claim's section only
    earlier = [c for c in CLAIMS[: CLAIMS.index(claim)] if set(c.sweeps) & set(claim.sweeps)]
    counted = {name for c in earlier for name in c.sweeps}
    took = _wall_time(session, [name for name in claim.sweeps if name not in counted]) + " of wall time"
    if earlier:
        keys = ", ".join(c.key for c in earlier)
        took += f" (claim {keys}'s sweeps counted in {'its' if len(earlier) == 1 else 'their'} section)"
    environments, commits = set(), set()
    for run in runs:
        info = json.loads((run / "run.json").read_text())
        commits.add(str(info.get("git_commit") or "unknown")[:7])
        threads = info.get("torch_threads")
        versions = ", ".join(f"{k} {v}" for k, v in sorted((info.get("versions") or {}).items()))
        text = "thread count unrecorded" if threads is None else f"{threads} torch thread{'s' * (threads != 1)}"
        cpu = info.get("cpu") or {}
        if cpu:
            text = f"{cpu.get('model', 'CPU')}, {cpu.get('kernels', '?')} kernels, " + text
        environments.add(text + (f", {versions}" if versions else ""))
    env_text = "; ".join(sorted(environments))
    root = shown(session.root, session.root)
    return (
        f"Seeds {', '.join(map(str, session.claim_seeds(claim)))}: {len(runs)} runs under `{root}`"
        f"{' (a --root outside the repository)' if root == '<root>' else ''}, made at commit "
        f"{', '.join(sorted(commits)) or '–'} ({env_text or 'none yet'}); its sweeps took {took}; "
        f"written {time.strftime('%Y-%m-%d %H:%M')} at commit {(git_commit() or 'unknown')[:7]}."
    )


def _wall_time(session: Session, names: Sequence[str] | None = None) -> str:
    """The wall time ``session.json`` records for the sweeps named (None: every sweep under the root): their shares of
    the machine (:func:`machine_shares`), so sections that ran beside each other do not count the same minutes
    twice."""
    timing = session.root / "session.json"
    sweeps = json.loads(timing.read_text())["sweeps"] if timing.is_file() else []
    shares = machine_shares(sweeps)
    minutes = round(sum(x for s, x in zip(sweeps, shares, strict=True) if names is None or s["sweep"] in names) / 60)
    return _minutes(minutes)


def _preamble(session: Session, notes: Sequence[str], took: str, cores: str = "") -> list[str]:
    generated = (
        "Generated by `nox -s results` (`python scripts/results.py`, the claims in `scripts/claims.yaml`): it runs every sweep below that is not "
        "complete yet, then writes this page from the runs; `nox -s results -- --render` rewrites the page from the "
        "existing runs, and `--claims IV,V` reruns and rewrites those sections only, keeping the others as the page "
        "has them. Each section names its seeds, its runs and the commit it was written at. Do not edit by hand."
    )
    if session.launcher.name == "joblib":
        how = (
            "two at a time, on a 2-core machine that may have been shared; each section says its own: where two sweeps "
            "ran at once, each counts half of those minutes"
        )
    else:
        how = (
            f"through Hydra's {session.launcher.name} launcher; each section says its own: where sweeps ran at once, "
            "each counts its share of those minutes"
        )
    compute = (
        f"{METHOD} Compute: the sections' sweeps took {took} of wall time in all (one thread per job, {how}).{cores}"
    )
    reading = (
        "Reading the tables (since 2026-12-07): an agent task's solutions are what its episodes did, the states they "
        'went through with loops erased (a move into a wall adds nothing: docs/metrics.md, "What a solution is"); '
        "*runs lost* counts the runs of a group that ended broken (success below the base model's, valid replies "
        "under half, a non-finite loss), which stay in its mean; *cost* is the group's training compute (sampling and "
        "update FLOPs, run.json) relative to its baseline's; `policy/pruned_mass` is the mass the exact walk cut; a "
        "group's exact figures are marked † where a run's cover too little of its policy (its walk cut more than 0.05 "
        "of the mass, or under half its mass is valid; the notes say which), and no answer rests on them; a run whose "
        'samples lie more than 3 sd from its exact figures is named in the notes (docs/metrics.md, "Exact figures '
        'and pruned mass").'
    )
    lines = ["# Results", "", generated, "", compute, "", reading, ""]
    if session.smoke:
        smoke = "**Smoke run** (`--smoke`: a small world and a few steps): these numbers check the machinery only."
        lines += [smoke, ""]
    if notes:
        lines += ["Missing:", "", *(f"- {note}" for note in notes), ""]
    return lines


# ------------------------------------------------------------------------------------------------- command
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/results.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--root", type=Path, help="where the sweeps go (default outputs/claims; --smoke: outputs/claims-smoke)"
    )
    parser.add_argument("--docs", type=Path, help="where results.md goes (default docs; --smoke: <root>/docs)")
    parser.add_argument(
        "--seeds", default=None, help="comma-separated, for every sweep (default each sweep's own; --smoke: 0,1)"
    )
    parser.add_argument(
        "--claims",
        default=",".join(c.key for c in CLAIMS),
        help="which claims to run and rewrite (default all; the page keeps the others)",
    )
    parser.add_argument("--render", action="store_true", help="write the page from existing runs; run nothing")
    parser.add_argument("--smoke", action="store_true", help="tiny sweeps that check the machinery in minutes")
    parser.add_argument(
        "--launcher",
        default="joblib",
        help="Hydra's launcher of the sweeps: joblib (this machine), ray, or any other by name, its settings among "
        "the overrides (default joblib)",
    )
    parser.add_argument("--address", help="ray: the cluster's address (auto on a node of it); default a local Ray")
    parser.add_argument(
        "--lanes",
        type=int,
        help="how many multiruns at once (default: joblib 2, one job each; ray without --address 1; otherwise every "
        "ready sweep, the cluster scheduling their jobs)",
    )
    parser.add_argument("overrides", nargs="*", help="overrides for every job, e.g. model.cache_dir=DIR")
    args = parser.parse_args(argv)
    if args.address and args.launcher != "ray":
        parser.error("--address is Ray's: give it with --launcher ray")
    if args.launcher == "ray" and importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None:
        parser.error("--launcher ray needs Hydra's Ray launcher: pip install 'sesa[ray]'")
    if args.lanes is not None and args.lanes < 1:
        parser.error("--lanes must be at least 1")
    root = (args.root or Path("outputs/claims-smoke" if args.smoke else "outputs/claims")).resolve()
    docs = args.docs or (root / "docs" if args.smoke else Path("docs"))
    given = args.seeds or ("0,1" if args.smoke else None)
    seeds = None if given is None else tuple(int(s) for s in given.split(","))
    keys = args.claims.split(",")
    unknown = [k for k in keys if k not in {c.key for c in CLAIMS}]
    if unknown:
        parser.error(f"unknown claim {', '.join(unknown)}; choose from {', '.join(c.key for c in CLAIMS)}")
    claims = [c for c in CLAIMS if c.key in keys]
    launcher = Launcher(args.launcher, args.address)
    session = Session(root, seeds, tuple(args.overrides), args.smoke, launcher)
    root.mkdir(parents=True, exist_ok=True)
    docs.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    start = time.time()
    if not args.render:
        needed = {name for claim in claims for name in claim.sweeps}
        needed |= {s.parent for s in SWEEPS if s.name in needed and s.parent}
        lanes = args.lanes or launcher.lanes()
        notes += run_sweeps(session, [s for s in SWEEPS if s.name in needed], root / "session.log", lanes)
    page = render(session, docs, claims, notes)
    print(f"[results] wrote {page} ({(time.time() - start) / 60:.1f} min)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
