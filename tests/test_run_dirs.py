"""A failed command leaves no run dir it wrote nothing into; the suite leaves the checkout's outputs/ alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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


@pytest.mark.parametrize(
    "argv", [["train", "task=path"], ["eval", "ckpt={run}"], ["revive", "ckpt={run}", "more_steps=1"]],
    ids=["train", "eval", "revive"],
)  # fmt: skip
def test_a_dir_of_the_users_own_files_is_refused_and_left_as_it_was(argv, source_run, tmp_path, monkeypatch, capsys):
    # issue 67 case 1: `sesa train ... hydra.run.dir=d` replaced d/config.yaml and d/train.log, the user's own
    from tests.test_damaged_inputs import check_one_line

    mine = tmp_path / "d"
    mine.mkdir()
    (mine / "config.yaml").write_text("my: own\n")
    (mine / "train.log").write_text("mine\n")
    (mine / "notes").mkdir()
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"") for p in [mine, *mine.iterdir()]}
    capsys.readouterr()
    code = run_cli([*(a.format(run=source_run) for a in argv), f"hydra.run.dir={mine}"], monkeypatch)
    check_one_line(code, capsys.readouterr().err, f"hydra.run.dir={mine} holds files sesa did not write (config.yaml, "
                   "notes, train.log); a command writes config.yaml, run.json and its log into its dir")  # fmt: skip
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"") for p in [mine, *mine.iterdir()]}
    assert after == before


def test_a_disk_full_while_a_report_writes_is_one_line_and_the_old_report_stays(tmp_path, monkeypatch, capsys):
    # issue 67 case 4: `OSError: [Errno 28]` (no file name: pandas' and matplotlib's writers) was a traceback
    import errno

    import matplotlib.figure
    import pandas as pd

    from tests.fake_runs import write_run
    from tests.test_damaged_inputs import check_one_line

    runs = [write_run(tmp_path / s, {"sampler": s, "seed": 0}) for s in ("parallel", "sequential")]
    out = tmp_path / "report"
    argv = ["diversity-report", f"runs=[{runs[0]},{runs[1]}]", f"hydra.run.dir={out}"]
    assert run_cli(argv, monkeypatch) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".sesa.lock"}

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    for writer, name in ((pd.DataFrame, "to_csv"), (matplotlib.figure.Figure, "savefig")):
        with monkeypatch.context() as patched:
            patched.setattr(writer, name, full)
            capsys.readouterr()
            code = run_cli(argv, monkeypatch)
        check_one_line(code, capsys.readouterr().err, f"sesa diversity-report: error: no space left on device while "
                       f"writing {out}")  # fmt: skip
        assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".sesa.lock"} == before
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(".sesa-report")]  # the staging dir went too


def test_a_cached_base_and_a_checkpoint_are_readable_by_others_as_any_new_file(source_run, tmp_path):
    # issue 67: safetensors wrote model.safetensors 0600: a shared model cache was unreadable to the others
    import stat

    from sesa_cli.models.cache import build_once
    from sesa_cli.paths import umask

    wanted = 0o666 & ~umask()
    ckpt = source_run / "checkpoints" / "step_000002"
    assert {stat.S_IMODE(p.stat().st_mode) for p in ckpt.iterdir()} == {wanted}

    def build(tmp: Path) -> None:  # a base as the warm start writes it: the weights through safetensors
        import torch
        from safetensors.torch import save_file

        tmp.mkdir()
        save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))
        (tmp / "marker.json").write_text("{}")

    made = build_once(tmp_path / "base", "marker.json", build, matches=lambda d, r: None)
    assert {stat.S_IMODE(p.stat().st_mode) for p in made.iterdir()} == {wanted}
