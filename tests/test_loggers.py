"""Experiment trackers (``logger=[...]``): TensorBoard and MLflow written for real, then read back with their own
readers (TensorBoard's EventAccumulator, MLflow's client) and compared with metrics.jsonl; bad settings and missing
extras are one line and exit 2; a tracker failing mid-run costs one warning and nothing of the run dir."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.conftest import run_cli

SMALL = ["train.batch_size=2", "sampler.group_size=4", "eval.samples=8", "train.eval_every=0"]


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _expected(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """key -> sorted (step, value) of every number metrics.jsonl holds (what each tracker must have)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and value is not None and math.isfinite(value):
                out.setdefault(key, []).append((row["step"], float(value)))
    return {k: sorted(v) for k, v in out.items()}


def _tensorboard(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: sorted((e.step, e.value) for e in acc.Scalars(tag)) for tag in acc.Tags()["scalars"]}


def _mlflow(run_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], object]:
    from mlflow.tracking import MlflowClient

    ref = json.loads((run_dir / "run.json").read_text())["loggers"]["mlflow"]
    client = MlflowClient(tracking_uri=ref["tracking_uri"])
    run = client.get_run(ref["run_id"])
    history = {key: sorted((m.step, m.value) for m in client.get_metric_history(ref["run_id"], key))
               for key in run.data.metrics}  # fmt: skip
    return history, run


def _same(got: dict, expected: dict, rename=lambda k: k) -> None:
    assert set(got) == {rename(k) for k in expected}
    for key, points in expected.items():
        tracked = got[rename(key)]
        assert [s for s, _ in tracked] == [s for s, _ in points], key
        assert [v for _, v in tracked] == pytest.approx([v for _, v in points], rel=1e-6, abs=1e-7), key


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory, tiny_overrides) -> tuple[Path, Path]:
    """A 2-step training run logged to TensorBoard and MLflow, and a 1-step revival of it."""
    root = tmp_path_factory.mktemp("loggers")
    mp = pytest.MonkeyPatch()
    store = root / "mlruns"
    try:
        argv = ["train", *tiny_overrides, *SMALL, "sampler=parallel", "train.steps=2", "train.checkpoint_every=1",
                "logger=[tensorboard,mlflow]", f"logger_options.mlflow_tracking_uri={store}",
                f"hydra.run.dir={root / 'run'}"]  # fmt: skip
        assert run_cli(argv, mp) == 0
        argv = ["revive", f"ckpt={root / 'run'}", "step=1", "more_steps=1", "sampler=sequential",
                f"hydra.run.dir={root / 'revived'}"]  # fmt: skip
        assert run_cli(argv, mp) == 0
    finally:
        mp.undo()
    return root / "run", root / "revived"


def test_tensorboard_and_mlflow_hold_the_same_values_as_metrics_jsonl(tracked_run):
    from sesa_cli.loggers import mlflow_key

    run_dir, _ = tracked_run
    rows = _rows(run_dir)
    expected = _expected(rows)
    assert [s for s, _ in expected["rollout/reward_mean"]] == [1, 2]
    assert "eval/pass@8" in expected
    _same(_tensorboard(run_dir), expected)
    history, run = _mlflow(run_dir)
    _same(history, expected, rename=mlflow_key)  # eval/pass@8 is eval/pass_at_8 there
    assert run.info.status == "FINISHED"
    assert run.data.params["sampler.group_size"] == "4"
    assert run.data.params["task.name"] == "path"
    assert run.data.params["logger"] == "['tensorboard', 'mlflow']"


def test_a_revived_run_continues_its_parents_step_axis_and_links_to_it(tracked_run):
    from sesa_cli.loggers import mlflow_key

    parent_dir, revived = tracked_run
    rows = _rows(revived)
    assert [r["step"] for r in rows if "rollout/reward_mean" in r] == [1, 2]  # the parent's step 1, then its own 2
    expected = _expected(rows)
    _same(_tensorboard(revived), expected)
    history, run = _mlflow(revived)
    _same(history, expected, rename=mlflow_key)
    parent_id = json.loads((parent_dir / "run.json").read_text())["loggers"]["mlflow"]["run_id"]
    assert run.data.tags["mlflow.parentRunId"] == parent_id
    assert run.data.tags["sesa.parent_run"] == str(parent_dir)
    assert run.data.params["sampler.name"] == "sequential"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["logger=[tensorboard,nope]"], "logger='nope' is not a logger; choose from: tensorboard, mlflow"),
        (["logger=[mlflow,mlflow]"], "names a logger twice"),
        (["logger_options.experiment= "], "logger_options.experiment must not be empty"),
        (["logger=mlflow"], "logger: "),  # a list, not a single name: Hydra's type error, named by key
    ],
)
def test_bad_logger_settings_are_one_line_and_exit_2(monkeypatch, capsys, args, expected):
    assert run_cli(["train", "task=path", *args], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert expected in err[0]


def test_a_missing_extra_or_a_tracker_that_cannot_start_fails_before_any_model_work(
    monkeypatch, capsys, tmp_path, tiny_overrides
):
    import importlib.util

    from sesa_cli.models import loading

    def no_model_work(*args, **kwargs):
        raise AssertionError("model work started")

    monkeypatch.setattr(loading, "load_base", no_model_work)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "mlflow" else real_find_spec(n, *a))
    run_dir = tmp_path / "missing"
    argv = ["train", *tiny_overrides, "logger=[tensorboard,mlflow]", f"hydra.run.dir={run_dir}"]
    assert run_cli(argv, monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["sesa train: error: logger=mlflow needs mlflow: pip install 'sesa[mlflow]'"]
    assert not (run_dir / "metrics.jsonl").exists()
    monkeypatch.setattr(importlib.util, "find_spec", real_find_spec)

    blocker = tmp_path / "a_file"
    blocker.write_text("")  # the store would have to be a directory inside a file
    argv = ["train", *tiny_overrides, "logger=[tensorboard,mlflow]",
            f"logger_options.mlflow_tracking_uri={blocker / 'mlruns'}", f"hydra.run.dir={tmp_path / 'nostart'}"]  # fmt: skip
    assert run_cli(argv, monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("sesa train: error: logger=mlflow cannot start (")


def test_a_tracker_failing_mid_run_warns_once_and_the_run_dir_is_complete(monkeypatch, tmp_path, tiny_overrides):
    from sesa_cli.loggers import TensorBoardTracker

    calls = []

    def broken(self, step, values):
        calls.append(step)
        raise OSError("disk full")

    monkeypatch.setattr(TensorBoardTracker, "log_row", broken)
    run_dir = tmp_path / "run"
    argv = ["train", *tiny_overrides, *SMALL, "sampler=parallel", "train.steps=2", "logger=[tensorboard]",
            f"hydra.run.dir={run_dir}"]  # fmt: skip
    assert run_cli(argv, monkeypatch) == 0
    # the run's log (Hydra's job logging writes it to the console and train.log alike)
    warnings = [line for line in (run_dir / "train.log").read_text().splitlines() if "sesa.loggers" in line]
    assert len(warnings) == 1
    assert "logger tensorboard failed while logging step 0 (disk full)" in warnings[0]
    assert calls == [0]  # never called again after the failure
    rows = _rows(run_dir)
    assert [r["step"] for r in rows if "rollout/reward_mean" in r] == [1, 2]
    assert (run_dir / "checkpoints" / "step_000002" / "trainer_state.json").is_file()


def test_logger_names_are_the_registry():
    from sesa_cli.config import LOGGER_NAMES
    from sesa_cli.loggers import LOGGERS

    assert tuple(LOGGERS) == LOGGER_NAMES
