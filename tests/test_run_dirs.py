"""A failed command leaves no run dir it wrote nothing into; the suite leaves the checkout's outputs/ alone."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import ROOT, run_cli


def test_a_failed_report_leaves_no_run_dir(monkeypatch, capsys, tmp_path):
    out = tmp_path / "report"
    assert run_cli(["diversity-report", f"runs=[{tmp_path / 'nope'}]", f"hydra.run.dir={out}"], monkeypatch) == 2
    assert "run path does not exist" in capsys.readouterr().err
    assert not out.exists()


def test_a_train_that_fails_before_its_first_row_leaves_no_run_dir(monkeypatch, capsys, tmp_path, tiny_overrides):
    # the run dir, its config.yaml and run.json are written, then the model cache cannot be made: one line, no dir
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = tmp_path / "run"
    argv = ["train", *tiny_overrides, f"model.cache_dir={blocker / 'cache'}", f"hydra.run.dir={out}"]
    assert run_cli(argv, monkeypatch) == 2
    assert f"{blocker} is a file, not a directory" in capsys.readouterr().err
    assert not out.exists()


def test_only_a_run_dir_of_bookkeeping_is_removed(monkeypatch, tmp_path):
    from sesa_cli.commands import common

    run = tmp_path / "run"
    monkeypatch.setattr(common, "hydra_context", lambda: (run, []))
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("a: 1\n")
    for name in ("train.log", "config.yaml", "run.json"):
        (run / name).write_text("x")
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    common.drop_empty_run_dir("diversity-report")
    assert sorted(p.name for p in run.iterdir()) == [".hydra", "config.yaml", "metrics.jsonl", "run.json", "train.log"]
    (run / "metrics.jsonl").unlink()
    common.drop_empty_run_dir("train")  # a run command removes only a dir whose lock it holds: another run's
    assert (run / "run.json").is_file()
    common.drop_empty_run_dir("diversity-report")
    assert not run.exists()
    assert tmp_path.is_dir()


def test_tests_run_outside_the_checkout():
    # conftest's _work_in_a_temp_dir: a command's default run dir (outputs/<command>/..., relative to the working
    # directory) lands in the test's own temporary directory; _the_checkouts_outputs_stay_untouched checks the rest
    assert not Path.cwd().resolve().is_relative_to(ROOT)
    assert os.path.samefile(ROOT / "tests" / "conftest.py", Path(__file__).parent / "conftest.py")
