"""Same draws, same updates: a refactor's check that training is unchanged, `python bench/same_draws.py`.

A change that should not move any number (a new registry, a method moved into another module, the update split into
pieces) is checked by training every recipe with both samplers for a few steps at two commits and comparing what the
runs wrote: every metrics.jsonl row (wall times and the seconds of ``compute/*`` left out: they are the machine's)
and the final weights, bit for bit.

    python bench/same_draws.py --before 52d6396            # the commit to compare today's tree with
    python bench/same_draws.py --before 52d6396 --steps 4  # quicker

The code of ``--before`` is taken with ``git archive`` into a temporary directory and run from there (``src/`` on
``PYTHONPATH``, its own ``conf/``), today's from the working tree; both with one thread, on the same warm-start cache
(``--cache``), one run after the other on this machine. ``--extra NAME=OVERRIDES`` adds a run (e.g. a method:
``--extra passk="experiment=frozenlake_tiny sampler=parallel algo=passk"``); ``--ignore KEY`` leaves out a metric the
change is meant to move (a fixed metric). Prints one line per run and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ("frozenlake_tiny", "frozenlake_5x5_tiny", "sokoban_tiny", "countdown_tiny", "collapse_revival", "discovery")
SAMPLERS = ("parallel", "sequential")
QUICK_EVAL = ("eval.instances=8", "eval.samples=8", "eval.policy_instances=2")
"""A short final evaluation: the comparison is of the training, and every run evaluates alike."""
VOLATILE = ("time/",)
"""Keys that measure the machine, not the training."""


def runs(extra: dict[str, str]) -> dict[str, list[str]]:
    """name -> overrides of every run compared."""
    out = {f"{r}-{s}": [f"experiment={r}", f"sampler={s}"] for r in RECIPES for s in SAMPLERS}
    out.update({name: shlex.split(overrides) for name, overrides in extra.items()})
    return out


def checkout(commit: str, into: Path) -> Path:
    """``src/`` and ``conf/`` of ``commit`` under ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    archive = into / "tree.tar"
    subprocess.run(["git", "archive", "-o", str(archive), commit, "src", "conf"], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def train(tree: Path, out: Path, overrides: list[str], steps: int, cache: Path) -> None:
    """One run of the code under ``tree`` into ``out`` (skipped when it finished there before)."""
    if (out / "checkpoints").is_dir() and any((out / "checkpoints").iterdir()):
        return
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "sesa_cli.cli", "train", *overrides, f"train.steps={steps}",
            "train.checkpoint_every=0", *QUICK_EVAL, f"model.cache_dir={cache}", f"hydra.run.dir={out}"]  # fmt: skip
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)


def _rows(run: Path, ignore: tuple[str, ...] = ()) -> list[dict[str, object]]:
    """A run's metrics rows without the machine's keys and the ``ignore`` ones."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    skip = (*VOLATILE, *ignore)
    return [{k: v for k, v in row.items() if not k.startswith(skip) and not k.endswith("_seconds")} for row in rows]


def _weights(run: Path) -> dict[str, bytes]:
    from safetensors import safe_open

    last = max((run / "checkpoints").iterdir())
    out = {}
    for file in sorted(last.glob("*.safetensors")):
        with safe_open(str(file), "np") as f:
            out.update({f"{file.name}:{k}": f.get_tensor(k).tobytes() for k in f.keys()})  # noqa: SIM118
    return out


def differences(a: Path, b: Path, ignore: tuple[str, ...] = ()) -> list[str]:
    """What differs between two runs' metrics rows (keys starting with one of ``ignore`` left out) and final weights
    (empty: nothing)."""
    found = []
    rows_a, rows_b = _rows(a, ignore), _rows(b, ignore)
    if len(rows_a) != len(rows_b):
        found.append(f"{len(rows_a)} rows against {len(rows_b)}")
    for i, (x, y) in enumerate(zip(rows_a, rows_b, strict=False)):
        for k in sorted(set(x) | set(y)):
            u, v = x.get(k), y.get(k)
            same = u == v or (isinstance(u, float) and isinstance(v, float) and math.isnan(u) and math.isnan(v))
            if not same:
                found.append(f"row {i} (step {x.get('step')}) {k}: {u!r} against {v!r}")
    wa, wb = _weights(a), _weights(b)
    changed = sorted(k for k in set(wa) | set(wb) if wa.get(k) != wb.get(k))
    if changed:
        found.append(f"{len(changed)} weight tensors differ, e.g. {changed[0]}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit to compare the working tree with")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "sesa-same-draws")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "sesa-same-draws-cache")
    parser.add_argument("--extra", action="append", default=[], help="NAME=OVERRIDES: one more run")
    parser.add_argument("--only", nargs="*", default=None, help="run only these names")
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        help="a metric key (prefix) a change is meant to move, left out of the comparison",
    )
    parser.add_argument(
        "--side",
        choices=("both", "before"),
        default="both",
        help="before: only run the commit's side (start it early, compare later)",
    )
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.extra)
    wanted = runs(extra)
    if args.only:
        wanted = {k: v for k, v in wanted.items() if k in args.only}
    args.out.mkdir(parents=True, exist_ok=True)
    before = args.out / f"before-{args.before}"
    tree = before / "tree" if (before / "tree").is_dir() else checkout(args.before, before)
    failed = 0
    for name, overrides in wanted.items():
        train(tree, before / name, overrides, args.steps, args.cache)
        if args.side == "before":
            print(f"{name}: ran", flush=True)
            continue
        train(ROOT, args.out / "after" / name, overrides, args.steps, args.cache)
        found = differences(before / name, args.out / "after" / name, tuple(args.ignore))
        rows = len(_rows(before / name))
        print(
            f"{name}: " + ("identical" if not found else "DIFFERENT: " + "; ".join(found[:3])) + f" ({rows} rows)",
            flush=True,
        )
        failed += bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
