"""The machine's cores that other work leaves free: ``threads=auto`` (sesa_cli.commands.common.torch_threads) and
the tiny model's warm start (sesa_cli.models.tiny) size torch's thread pool with it."""

from __future__ import annotations

import os
from pathlib import Path


def busy_cores() -> float:
    """Cores other work keeps busy: the 1-minute load average, or the runnable tasks of other processes right now
    (/proc/loadavg less this process's own runnable threads) if fewer. The average lags: right after ``pip install
    ... && sesa train`` it still counts the finished install (load 0.9 on an idle 2-core machine), which alone would
    halve the threads; and it counts this process's own threads, which a count taken mid-computation must not."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    try:
        with open("/proc/loadavg") as fh:
            running = int(fh.read().split()[3].split("/")[0]) - _own_runnable()  # "running/total"
    except (OSError, ValueError, IndexError):
        return load
    return min(load, float(max(0, running)))


def _own_runnable() -> int:
    """This process's threads that are runnable now (state R in /proc/self/task/*/stat), at least 1: the caller."""
    count = 0
    for stat in Path("/proc/self/task").glob("*/stat"):
        try:
            count += stat.read_text().rsplit(")", 1)[1].split()[0] == "R"  # after "pid (comm)": the state
        except (OSError, IndexError):
            continue
    return max(1, count)


def free_cores() -> tuple[int, float]:
    """(cores not busy now, rounded, at least 1; :func:`busy_cores`). On a machine whose cores other jobs keep busy,
    a thread per core makes every parallel op wait until all its threads get a core (docs/measurements.md,
    "Threads"); one thread per free
    core degrades gracefully instead."""
    cpus = os.cpu_count() or 1
    busy = busy_cores()
    return max(1, min(cpus, round(cpus - busy))), busy
