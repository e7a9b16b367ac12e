"""Evaluation benchmark (issue 32): `python bench/evaluation.py [--rounds 3] [--ckpt DIR] [OVERRIDES...]`.

Times one evaluation of the default FrozenLake config (``sesa train``'s protocol: 64 maps x 16 episodes drawn from
the plain prompt, one greedy episode per map, the exact ``policy/*`` walk of 8 maps) part by part, on the base (or
the weights of ``--ckpt``), in two variants measured in the same run:

  before  no row of a session shares a cache row (``engine.MIN_ROWS`` above every batch: the engine as it ran before
          rows shared) and glibc's own mmap/trim thresholds;
  after   the defaults: rows with the same tokens share a cache row, and the process keeps freed tensor memory
          (``sesa_cli.commands.common.keep_freed_memory``, which every command calls).

Each variant runs in a fresh process per round (an allocator setting cannot be undone in-process), the rounds
interleaved, so a machine whose load changes during the bench slows both alike; CPU seconds (user + system) are the
figure to compare on a shared machine, wall seconds follow the load. The bench stops if the variants' rows differ
(every ``eval/*`` and ``policy/*`` value must be equal: sharing changes no number).

Measured (2026-11-26, one thread, 3 rounds, CPU seconds before -> after; docs/measurements.md, "Evaluation cost"):
  the base                        14.9 -> 8.5 s (draw 12.6 -> 6.3, greedy 0.38 -> 0.22, exact walk 2.0 -> 2.0)
  a default run's step-50 weights 15.4 -> 6.4 s (draw 12.6 -> 3.5, greedy 0.22 -> 0.13, exact walk 2.5 -> 2.6)
  its step-150 weights            13.9 -> 5.6 s (draw 11.8 -> 3.6, greedy 0.36 -> 0.22, exact walk 1.7 -> 1.7)
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from rollout import config

from sesa_cli.commands.common import keep_freed_memory
from sesa_cli.evaluation import Evaluation, draw, eval_generator, greedy_summary, summarize
from sesa_cli.models.loading import load_checkpoint, load_policy
from sesa_cli.rollout import engine
from sesa_cli.tasks.base import make_task

PARTS = ("draw", "greedy", "exact", "total")


def clock() -> tuple[float, float]:
    """(CPU seconds of this process, user + system; wall seconds)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, time.perf_counter()


def child(variant: str, cache_dir: str, ckpt: str | None, overrides: list[str]) -> dict[str, object]:
    """One evaluation in this process: its row and each part's (CPU, wall) seconds."""
    torch.set_num_threads(1)
    if variant == "after":
        keep_freed_memory()
    else:
        engine.MIN_ROWS = 1 << 30
    cfg = config([f"model.cache_dir={cache_dir}", *overrides])
    task = make_task(cfg.task, cfg.seed)
    policy = load_checkpoint(Path(ckpt), cfg.model, task) if ckpt else load_policy(cfg.model, task)
    ev = Evaluation(task, policy, cfg.sampler, cfg.eval, cfg.seed, cfg.model.dtype, cfg.model.max_batch_rows)
    marks = [clock()]
    groups = draw(ev.sampler, ev.instances, ev.samples, eval_generator(ev.seed), ev.max_rows)
    row = summarize(task, groups)
    marks.append(clock())
    row.update(greedy_summary(ev.greedy, ev.instances, ev.max_rows))
    marks.append(clock())
    probs = ev.exact.probs()
    row.update(ev.exact.summary(probs, ev.samples))
    marks.append(clock())
    spans = [(b[0] - a[0], b[1] - a[1]) for a, b in itertools.pairwise(marks)]
    spans.append((marks[-1][0] - marks[0][0], marks[-1][1] - marks[0][1]))
    return {"row": row, "seconds": dict(zip(PARTS, spans, strict=True))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache-dir", default="outputs/cache")
    parser.add_argument("--ckpt", help="evaluate these weights (a checkpoint dir) instead of the base")
    parser.add_argument("--child", choices=("before", "after"), help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="config overrides (default: the default sesa train config)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.cache_dir, args.ckpt, args.overrides)))
        return
    here = Path(__file__).resolve()
    extra = ["--cache-dir", args.cache_dir, *(["--ckpt", args.ckpt] if args.ckpt else []), *args.overrides]
    results: dict[str, list[dict]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for variant, runs in results.items():
            out = subprocess.run(
                [sys.executable, str(here), "--child", variant, *extra], check=True, capture_output=True, text=True
            ).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
            seconds = runs[-1]["seconds"]["total"]
            print(f"round {r + 1} {variant:6s} CPU {seconds[0]:6.2f} s, wall {seconds[1]:6.2f} s", flush=True)
    rows = [res["row"] for runs in results.values() for res in runs]
    if any(row != rows[0] for row in rows):
        raise SystemExit("the variants' evaluation rows differ: sharing changed a number")
    what = f"the weights of {args.ckpt}" if args.ckpt else "the base"
    print(f"one evaluation of {what} ({' '.join(args.overrides) or 'default config'}), median of {args.rounds}:")
    print(f"{'part':8s} {'before CPU':>11s} {'after CPU':>10s} {'ratio':>6s} {'before wall':>12s} {'after wall':>11s}")
    for part in PARTS:
        cpu, wall = (
            [statistics.median(res["seconds"][part][i] for res in results[v]) for v in results] for i in (0, 1)
        )
        print(f"{part:8s} {cpu[0]:10.2f}s {cpu[1]:9.2f}s {cpu[1] / cpu[0]:5.2f}x {wall[0]:11.2f}s {wall[1]:10.2f}s")
    print("rows identical in every round and variant")


if __name__ == "__main__":
    main()
