"""Shared fixtures: a tiny warm-started path model built once per session, config composition, a CLI runner."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
# The path task's small world (one definition, in the claims file `nox -s results -- --smoke` reads:
# scripts/claims.yaml), warm-started for 600 steps rather than the smoke's 300: at 300 its competence sat on the steep
# part of learning and swung with the CPU's kernels (valid answers among 128 draws: 34 under AVX-512, 76 under AVX2,
# 119 under ATEN_CPU_CAPABILITY=default), taking the levels of tests/levels.py with it; at 600, 107 and 128 (issue 49).
SMALL_PATH_WORLD = yaml.safe_load((ROOT / "scripts" / "claims.yaml").read_text())["small_path_world"]
TINY = ["task=path", *SMALL_PATH_WORLD, "model.warm_start_steps=600"]
# Non-slippery 4x4 FrozenLake on the same short warm start (multi-turn rollouts).
FROZENLAKE = [
    "task=frozenlake",
    "task.is_slippery=false",
    "model.warm_start_steps=300",
    "model.warm_start_corpus_size=4000",
]
# Sokoban (6x6, one box) on the same short warm start, with its tiny recipe's first-turn plans.
SOKOBAN = ["task=sokoban", "model.warm_start_steps=300", "model.warm_start_corpus_size=4000"]
# Countdown on a small base: 3 numbers of 1-4 (64 step words), a 2-layer model of width 64 and 500 warm-start steps
# (about 40 s on one thread), enough for stage II to carry out most of its sketches (tests/levels.py).
COUNTDOWN = [
    "task=countdown",
    "task.max_numbers=3",
    "task.max_number=4",
    "task.max_target=12",
    "model.hidden_size=64",
    "model.num_layers=2",
    "model.intermediate_size=256",
    "model.warm_start_steps=500",
    "model.warm_start_corpus_size=4000",
]


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.is_dir() else []


@pytest.fixture(scope="session", autouse=True)
def _the_checkouts_outputs_stay_untouched() -> object:
    """The suite writes nothing under the checkout's outputs/ (where a user's own runs live): checked when the
    session ends (a teardown error names what appeared)."""
    before = _tree(ROOT / "outputs")
    yield
    appeared = sorted(set(_tree(ROOT / "outputs")) - set(before))
    assert not appeared, f"the tests wrote under {ROOT / 'outputs'}: {appeared[:5]}"


@pytest.fixture(autouse=True)
def _work_in_a_temp_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in a working directory of its own, so a command's default run dir (outputs/<command>/...,
    relative to where it runs) lands there, never in the checkout."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture(autouse=True)
def _sesa_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """This environment's scripts on PATH, as in a nox session or an activated venv: the commands a run prints then
    read ``sesa ...`` whichever shell started the tests (tests/test_hostile_inputs.py checks the other case, the
    README's never-activated ``.venv``)."""
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread in every test process, whatever ``OMP_NUM_THREADS`` says (as sesa's commands default to one):
    the tiny bases a session warm-starts, and every number a test compares, do not depend on the environment."""
    import torch

    from sesa_cli.models import tiny

    torch.set_num_threads(1)
    # The session's tiny bases on one thread whatever other work leaves free: on this project's AVX-512 CPU a base
    # warm-started on two threads is not the one-thread base (the path test base's sha256 differs), so a base, and
    # the levels measured on it, would depend on the machine's load (issue 49).
    tiny.free_cores = lambda: (1, 0.0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` are skipped where torch finds no GPU (every CPU machine, CI included); on a GPU they run
    (``pytest -m cuda``, bench/gpu_check.sh)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch finds none)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The session's model cache, one for all pytest-xdist workers: each tiny base is warm-started once (a worker
    that needs a base another is building waits on ``build_once``'s lock), not once per worker. ``SESA_TEST_CACHE=DIR``
    keeps it in DIR across runs instead: the nox sessions set it to a folder named by a hash of the code that builds
    the bases (noxfile.test_env), so `nox -s tests`, its numerics rerun, `nox -s integrations` and `nox -s e2e` build
    each base once and every run's bases come from the code it tests."""
    shared = os.environ.get("SESA_TEST_CACHE")
    if shared:  # nox's, or a developer's, kept across runs (inside it keyed by task + model config, as any cache dir)
        path = Path(shared)
        path.mkdir(parents=True, exist_ok=True)
        return path
    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent  # the run's temp dir, which holds every worker's own
    path = root / "sesa-cache"
    path.mkdir(exist_ok=True)
    return path


# Which worker warm-starts which bases first: the path base takes about as long on one thread (~3 min) as the other
# three together, so gw0 builds it while gw1 builds those, and neither waits on the other's lock mid-run.
_FIRST_BASES = {"gw0": ("path_setup",), "gw1": ("frozenlake_setup", "sokoban_setup", "countdown_setup")}


@pytest.fixture(scope="session", autouse=True)
def _build_the_bases_side_by_side(request: pytest.FixtureRequest, worker_id: str) -> None:
    """On two or more xdist workers, worker gw0 builds the path base and gw1 the agent tasks' bases before their first
    test (each only when the run has a test that needs it), instead of both building the first base their tests ask
    for and then waiting on each other's."""
    for name in _FIRST_BASES.get(worker_id, ()):
        if any(name in item.fixturenames for item in request.session.items):
            request.getfixturevalue(name)


@pytest.fixture(scope="session")
def tiny_overrides(cache_dir: Path) -> list[str]:
    return [*TINY, f"model.cache_dir={cache_dir}"]


def sketch_of(r):
    """The sketch a stage-II solution expands (its origin, sesa_cli.rollout.rollouts.Expansion, says so)."""
    from sesa_cli.rollout.rollouts import Expansion

    assert isinstance(r.origin, Expansion)
    return r.origin.sketch


def compose_train(overrides: list[str]):
    """The typed TrainConfig for ``sesa train <overrides>``."""
    from hydra import compose, initialize_config_dir

    from sesa_cli.commands.schemas import register_configs
    from sesa_cli.config import conf_dir, to_object

    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        return to_object(compose("train", overrides=overrides))


def base_setup(overrides: list[str]):
    """(TrainConfig, task, policy) of ``sesa train <overrides>``: the task and its (cached) base policy."""
    from sesa_cli.models.loading import load_policy
    from sesa_cli.tasks.base import make_task

    cfg = compose_train(overrides)
    task = make_task(cfg.task, cfg.seed)
    return cfg, task, load_policy(cfg.model, task)


@pytest.fixture(scope="session")
def path_setup(tiny_overrides: list[str]):
    """(TrainConfig, task, policy) of the default path task on the session's tiny base."""
    return base_setup([*tiny_overrides, "task=path"])


@pytest.fixture(scope="session")
def frozenlake_setup(cache_dir: Path):
    """(TrainConfig, task, policy) of non-slippery FrozenLake on the session's tiny base."""
    return base_setup([*FROZENLAKE, f"model.cache_dir={cache_dir}"])


@pytest.fixture(scope="session")
def sokoban_setup(cache_dir: Path):
    """(TrainConfig, task, policy) of Sokoban on the session's small sokoban base (``SOKOBAN``)."""
    return base_setup([*SOKOBAN, f"model.cache_dir={cache_dir}"])


@pytest.fixture(scope="session")
def countdown_setup(cache_dir: Path):
    """(TrainConfig, task, policy) of Countdown on the session's small countdown base (``COUNTDOWN``)."""
    return base_setup([*COUNTDOWN, f"model.cache_dir={cache_dir}"])


def policy_objective(model, rows, advantages) -> float:
    """The policy-gradient surrogate one update ascends (token-mean aggregation, ratio 1): the mean over every
    response token of ``rows`` (scored under their plain prompts, observations masked) of its row's advantage times
    the token's log-prob. One small update raises it to first order whatever the model; how it moves any one row's
    log-prob depends on the model."""
    import torch

    from sesa_cli.rollout.scoring import build_batch, completion_logps

    batch = build_batch(
        [r.prompt_ids for r in rows], [r.completion.ids for r in rows], 0, [r.completion.mask for r in rows]
    )
    with torch.no_grad():
        logps, _ = completion_logps(model, batch)
    adv = torch.tensor(advantages, dtype=logps.dtype)[:, None]
    return float((adv * logps * batch.response_mask).sum() / batch.response_mask.sum())


def chained_context(head: list[int], earlier: list[list[int]], between: list[int]) -> list[int]:
    """What sequential sampling must condition item k on: the head, then each earlier item followed by ``between``."""
    out = list(head)
    for ids in earlier:
        out += ids + between
    return out


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """Run ``sesa <argv>`` in-process; returns the exit code."""
    from sesa_cli.cli import main

    monkeypatch.setattr(sys, "argv", ["sesa", *argv])
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.fixture(scope="module")
def source_run(tmp_path_factory: pytest.TempPathFactory, tiny_overrides: list[str]) -> Path:
    """One real short run (2 steps, a checkpoint at step 2, tests.test_damaged_inputs.SMALL), built once per module
    and copied and damaged by each case of the damaged- and hostile-input tests."""
    from tests.test_damaged_inputs import SMALL

    run = tmp_path_factory.mktemp("source") / "run"
    mp = pytest.MonkeyPatch()
    try:
        assert run_cli(["train", *tiny_overrides, *SMALL, f"hydra.run.dir={run}"], mp) == 0
    finally:
        mp.undo()
    return run
