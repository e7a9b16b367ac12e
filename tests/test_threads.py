"""The torch thread count: fixed by default (the environment's OMP_NUM_THREADS is not read), ``threads=auto`` opt-in;
and the freed tensor memory a command's process keeps for reuse."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from sesa_cli.config import ConfigError, thread_count
from tests.conftest import run_cli


def _rows(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.e2e
def test_the_same_command_gives_the_same_rows_whatever_omp_num_threads(tmp_path, tiny_overrides):
    # The float sums of one torch thread differ from two threads' (a 10-step path run parts ways at step 10), so the
    # rows are equal only if the environment does not pick the count.
    runs = {}
    for omp in ("1", "2"):
        run = tmp_path / f"omp{omp}"
        cmd = [sys.executable, "-m", "sesa_cli", "train", *tiny_overrides, "train.steps=3", "train.policy_every=1",
               "eval.samples=8", "train.checkpoint_every=0", f"hydra.run.dir={run}"]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": omp}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads((run / "run.json").read_text())["torch_threads"] == 1
        runs[omp] = _rows(run)
    assert sorted({r["step"] for r in runs["1"] if "policy/effective_solutions" in r}) == [0, 1, 2, 3]
    assert runs["1"] == runs["2"]


def test_threads_is_a_count_or_auto():
    assert thread_count("1") == 1
    assert thread_count("4") == 4
    assert thread_count("auto") is None
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(ConfigError, match="thread count >= 1 or auto"):
            thread_count(bad)


def test_threads_0_says_auto_is_spelled_auto(monkeypatch, capsys, tmp_path, tiny_overrides):
    assert run_cli(["train", *tiny_overrides, "threads=0", f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch) == 2
    assert not (tmp_path / "run").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "threads=0 must be a thread count >= 1 or auto (0 meant auto before: write threads=auto)" in err[0]


def test_auto_takes_the_free_cores_and_a_count_ignores_the_environment(monkeypatch):
    import torch

    from sesa_cli import cpus
    from sesa_cli.commands import common

    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert common.torch_threads("1") == 1 == torch.get_num_threads()
        monkeypatch.setattr(common, "joblib_cpu_budget", lambda: None)
        monkeypatch.setattr(cpus, "busy_cores", lambda: 0.0)
        monkeypatch.setattr(os, "cpu_count", lambda: 2)
        assert common.torch_threads("auto") == 2
        monkeypatch.setattr(cpus, "busy_cores", lambda: 1.7)
        assert common.torch_threads("auto") == 1  # never fewer than one
    finally:
        torch.set_num_threads(before)


def test_the_warm_start_runs_on_the_free_cores_and_gives_the_command_its_count_back(monkeypatch, tmp_path):
    """A tiny base is built on every core other work leaves free (warm_start.json records how many), whatever the
    command's ``threads``; the command's own count is restored after, also when the build fails."""
    import torch

    from sesa_cli.models import tiny
    from sesa_cli.tasks.base import make_task
    from tests.conftest import TINY, compose_train

    cfg = compose_train([*TINY, "model.warm_start_steps=2", "model.warm_start_corpus_size=40"])
    task = make_task(cfg.task, 0)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        monkeypatch.setattr(tiny, "free_cores", lambda: (2, 0.0))
        info = tiny.warm_start(cfg.model, task, tmp_path / "base")
        assert info["torch_threads"] == 2
        assert json.loads((tmp_path / "base" / "warm_start.json").read_text())["torch_threads"] == 2
        assert torch.get_num_threads() == 1
        with pytest.raises(FileExistsError):  # the directory it would write exists: the build fails
            tiny.warm_start(cfg.model, task, tmp_path / "base")
        assert torch.get_num_threads() == 1
        # the count is taken again during the build: a sweep's waiting jobs free their cores after it starts
        counts = iter([1, 1, 2, 2])
        monkeypatch.setattr(tiny, "free_cores", lambda: (next(counts), 0.0))
        monkeypatch.setattr(tiny, "RECOUNT_STEPS", 1)
        cfg4 = compose_train([*TINY, "model.warm_start_steps=4", "model.warm_start_corpus_size=40"])
        info = tiny.warm_start(cfg4.model, task, tmp_path / "base4")
        assert info["torch_threads_steps"] == {"1": 2, "2": 2}
        assert info["torch_threads"] == 2
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread states are read from Linux's /proc")
def test_busy_cores_leaves_out_this_processs_own_threads():
    """A count taken mid-computation (the warm start's, every few steps) must not see this process's own busy
    threads as other work: while two of its threads multiply matrices, /proc/loadavg counts them runnable, and
    busy_cores leaves them out."""
    import threading

    import torch

    from sesa_cli import cpus

    stop = threading.Event()

    def work() -> None:
        a = torch.randn(256, 256)
        while not stop.is_set():
            a @ a  # releases the GIL: the thread is runnable, not waiting

    workers = [threading.Thread(target=work) for _ in range(2)]
    for w in workers:
        w.start()
    try:
        seen = max(cpus._own_runnable() for _ in range(200))
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert seen >= 2  # the workers were counted as this process's
    assert cpus._own_runnable() >= 1


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]  # fmt: skip


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_a_large_tensor_comes_from_the_heap_not_a_mapping_of_its_own():
    """keep_freed_memory (called by torch_threads): a 64 MB tensor, above glibc's own largest mmap threshold (32 MB),
    is served from the heap (whose freed memory the next tensors reuse) instead of being mapped on its own and
    unmapped when freed (glibc's mallinfo2: bytes in mapped blocks)."""
    import torch

    from sesa_cli.commands import common

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    common.keep_freed_memory()
    before = libc.mallinfo2().hblkhd
    tensor = torch.ones(16 << 20)
    assert libc.mallinfo2().hblkhd - before < tensor.nbytes
