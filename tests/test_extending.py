"""docs/extending.md as written: its advantage with a setting of its own, its loss term and its task, saved in a folder
outside the repository, run with `sesa train` from that folder (each under 50 lines, the advantage's setting
overridden on the command line) and appear in `--help`; a setting the plug-in does not have is one line and exit 2; a
plug-in module also loads from an entry point, and one that cannot be imported is one line and exit 2."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY, run_cli

DOC = ROOT / "docs" / "extending.md"
# The tiny base of the example task: small and quick, whatever the model's defaults (the commands run as the page
# shows them, plus these and the run's dir).
SMALL_REVERSE = ["model.warm_start_steps=30", "model.warm_start_corpus_size=300", "model.hidden_size=32",
                 "model.num_layers=1", "model.intermediate_size=64", "model.num_heads=2"]  # fmt: skip
QUICK = ["train.batch_size=2", "sampler.group_size=4", "eval.samples=4", "eval.instances=2"]


def _files() -> dict[str, str]:
    """The page's files: each ``python``/``yaml`` code block, named by its first line (``# best_term.py``)."""
    blocks = re.findall(r"```(?:python|yaml)\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    return {block.splitlines()[0].lstrip("# ").strip(): block for block in blocks}


def _commands() -> list[list[str]]:
    """The page's ``PYTHONPATH=. sesa ...`` commands, as argv after ``sesa``."""
    lines = re.findall(r"^PYTHONPATH=\. sesa (.*)$", DOC.read_text(), flags=re.MULTILINE)
    return [shlex.split(line) for line in lines]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The examples saved in a folder of their own, outside the repository."""
    path = tmp_path_factory.mktemp("my_methods")
    assert not path.resolve().is_relative_to(ROOT)
    for name, text in _files().items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path


def _sesa(folder: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``sesa <argv>`` from ``folder``, the folder on PYTHONPATH (as the page says: ``PYTHONPATH=. sesa ...``)."""
    env = {**os.environ, "PYTHONPATH": str(folder), "OMP_NUM_THREADS": "1"}
    exe = Path(sys.executable).with_name("sesa")
    return subprocess.run(
        [str(exe), *argv], cwd=folder, env=env, capture_output=True, text=True, timeout=1200, check=False
    )


def test_the_examples_are_short_and_the_page_runs_each() -> None:
    files = _files()
    assert set(files) == {"minmax_advantage.py", "best_term.py", "reverse_task.py", "conf/task/reverse.yaml"}
    assert all(len(text.splitlines()) < 50 for text in files.values())
    commands = _commands()
    used = {arg for argv in commands for arg in argv if arg.startswith("plugins=")}
    assert used == {"plugins=[minmax_advantage]", "plugins=[best_term]", "plugins=[reverse_task]",
                    "plugins=[reverse_task,best_term]"}  # fmt: skip
    assert any("algo.advantage.scale=2" in argv for argv in commands)  # its own setting, from the command line


@pytest.mark.e2e
def test_the_examples_run_with_sesa_train_from_their_own_folder(folder: Path, cache_dir: Path) -> None:
    for n, argv in enumerate(a for a in _commands() if "--help" not in a):
        extra = [*(TINY[1:] if "task=path" in argv else SMALL_REVERSE), *QUICK, f"model.cache_dir={cache_dir}",
                 f"hydra.run.dir=outputs/run{n}"]  # fmt: skip
        done = _sesa(folder, [*argv, *extra])
        assert done.returncode == 0, done.stderr[-2000:]
        rows = [json.loads(line) for line in (folder / f"outputs/run{n}" / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in rows if "rollout/reward_mean" in r]
        assert len(steps) == 2
        if "algo.terms.best=0.1" in argv:
            # the term scores rows exactly when a rollout succeeded (reward 1 on both tasks), one per group at most
            for r in steps:
                assert ("loss/best_nll" in r) == (r["rollout/success"] > 0), r
                assert r.get("loss/best_rows", 0) <= 2  # train.batch_size=2
        config = (folder / f"outputs/run{n}" / "config.yaml").read_text()
        if "algo.advantage=minmax" in argv:  # the plug-in's setting, as the command line gave it
            assert "advantage:\n    name: minmax\n    scale: 2" in config, config
        assert f"name: {'path' if 'task=path' in argv else 'reverse'}" in config
        assert "plugins:" in config  # the run records them: evaluating or reviving it imports them again
        if argv[:2] == ["train", "plugins=[reverse_task]"]:  # the task alone: evaluate its run too
            done = _sesa(folder, ["eval", f"ckpt=outputs/run{n}", *QUICK[2:], f"hydra.run.dir=outputs/eval{n}"])
            assert done.returncode == 0, done.stderr[-2000:]  # no plugins= given: the run's own are imported
            assert (folder / f"outputs/eval{n}" / "metrics.json").is_file()


def test_the_examples_appear_in_help(folder: Path) -> None:
    done = _sesa(folder, ["train", "plugins=[minmax_advantage]", "--help", "algo"])
    assert done.returncode == 0, done.stderr
    assert "algo.advantage=minmax: (r_i - mean) / (max - min) of each group" in done.stdout
    assert "algo.advantage.scale=1.0" in done.stdout
    done = _sesa(folder, ["train", "plugins=[best_term]", "--help", "algo"])
    assert done.returncode == 0, done.stderr
    assert "algo.terms.best (off): Imitates each group's first rollout" in done.stdout
    assert "algo.terms.best.min_reward=1.0" in done.stdout
    done = _sesa(folder, ["train", "plugins=[reverse_task]", "--help"])
    assert re.search(r"task\s+.*\breverse\b", done.stdout, flags=re.DOTALL), done.stdout
    done = _sesa(folder, ["train", "plugins=[reverse_task]", "--help", "task"])
    assert "task=reverse: its own options" in done.stdout
    assert "task.length=3" in done.stdout


def test_a_setting_the_plugin_does_not_have_is_one_line_before_any_model_work(folder: Path) -> None:
    argv = ["train", "plugins=[minmax_advantage]", "task=path", "algo.advantage=minmax", "algo.advantage.sclae=2"]
    done = _sesa(folder, [*argv, "hydra.run.dir=outputs/refused"])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "sesa train: error: algo.advantage.sclae is not a setting; valid: scale"
    ]
    assert not (folder / "outputs/refused").exists()  # refused before the run dir, the model, anything


def test_an_entry_point_loads_a_plugin_and_a_missing_module_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    from sesa_cli import plugins
    from sesa_cli.terms import TERMS

    (tmp_path / "ep_term.py").write_text(
        "from sesa_cli.terms import Term, register_term\n\n\n@register_term('ep_probe')\nclass Probe(Term):\n"
        "    def rows(self, rows):\n        return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "_entry_points_loaded", False)

    class Entry:
        name, value = "probe", "ep_term"

    monkeypatch.setattr(
        plugins.importlib.metadata, "entry_points", lambda group: [Entry] if group == "sesa.plugins" else []
    )
    monkeypatch.delitem(TERMS, "ep_probe", raising=False)
    try:
        plugins.load_entry_points()
        assert "ep_probe" in TERMS
    finally:
        TERMS.pop("ep_probe", None)
    assert run_cli(["train", "task=path", "plugins=[no_such_plugin_module]"], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    expected = (
        "sesa train: error: plugins=no_such_plugin_module: cannot import 'no_such_plugin_module': No module named "
        "'no_such_plugin_module' (is it installed, or on PYTHONPATH?)"
    )
    assert err == [expected]


@pytest.mark.parametrize(("code", "shown"), [("0", "0"), ("3", "3"), ("'bye'", "'bye'")])
def test_a_plugin_that_exits_while_imported_is_one_line_and_exit_2(code, shown, tmp_path, monkeypatch, capsys) -> None:
    # issue 67 case 8: sys.exit(0) at a plug-in's import ended sesa train with exit 0, no output, nothing run
    module = f"exiting_plugin_{shown.strip(chr(39))}"
    (tmp_path / f"{module}.py").write_text(f"import sys\n\nsys.exit({code})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    assert run_cli(["train", "task=path", f"plugins=[{module}]", f"hydra.run.dir={out}"], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        (f"sesa train: error: plugins={module}: importing '{module}' called sys.exit({shown}); a plug-in module "
         "must register what it defines and return, not exit")
    ]  # fmt: skip
    assert not out.exists()
