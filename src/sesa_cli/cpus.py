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


VECTOR_EXTENSIONS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
    "asimd", "asimdhp", "sve", "sve2", "bf16", "i8mm",
)  # fmt: skip
"""The /proc/cpuinfo flags (x86) and features (Arm) that decide which vector kernels torch and oneDNN pick: float
results differ between kernels (a different summation order), so a run records which of these its CPU has."""


def describe() -> dict[str, object]:
    """The CPU a run's numbers were computed on: ``model`` (/proc/cpuinfo's model name, else the platform's) and
    ``vector_extensions`` (those of :data:`VECTOR_EXTENSIONS` it has, in that order; empty where /proc/cpuinfo
    cannot be read). Torch-free: the caller adds the kernels torch chose (``torch.backends.cpu.get_cpu_capability``)."""
    import platform

    model, flags = "", set[str]()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name in ("model name", "hardware", "cpu model") and not model:
                    model = value.strip()
                elif name in ("flags", "features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {
        "model": model or platform.processor() or platform.machine(),
        "vector_extensions": [f for f in VECTOR_EXTENSIONS if f in flags],
    }
