"""Experiment trackers (``logger=[...]``): TensorBoard and MLflow written for real, then read back with their own
readers (TensorBoard's EventAccumulator, MLflow's client) and compared with metrics.jsonl; bad settings and missing
extras are one line and exit 2; a tracker failing mid-run costs one warning and nothing of the run dir."""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def _eval_expected(eval_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """What a tracker must hold of ``sesa eval``'s metrics.json: every finite number, at the checkpoint's step."""
    metrics = json.loads((eval_dir / "metrics.json").read_text())
    return _expected([{k: v for k, v in metrics.items() if not isinstance(v, (list, bool))}])


def test_eval_of_a_run_logs_to_the_runs_trackers(tracked_run, monkeypatch):
    from sesa_cli.loggers import mlflow_key

    run_dir, _ = tracked_run
    eval_dir = run_dir.parent / "eval"
    assert run_cli(["eval", f"ckpt={run_dir}", "eval.samples=4", f"hydra.run.dir={eval_dir}"], monkeypatch) == 0
    expected = _eval_expected(eval_dir)
    assert expected["eval/success"][0][0] == 2  # the checkpoint's step
    assert "eval/pass@4" in expected
    _same(_tensorboard(eval_dir), expected)
    # the run's MLflow store (reloaded with its config), nested under the run's MLflow run
    parent_ref = json.loads((run_dir / "run.json").read_text())["loggers"]["mlflow"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=parent_ref["tracking_uri"])
    children = client.search_runs(
        [client.get_run(parent_ref["run_id"]).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_ref['run_id']}' and tags.`sesa.run_dir` = '{eval_dir}'",
    )
    assert len(children) == 1
    history = {key: sorted((m.step, m.value) for m in client.get_metric_history(children[0].info.run_id, key))
               for key in children[0].data.metrics}  # fmt: skip
    _same(history, expected, rename=mlflow_key)
    # logger=[] on the command line: none
    quiet = run_dir.parent / "eval_quiet"
    argv = ["eval", f"ckpt={run_dir}", "eval.samples=4", "logger=[]", f"hydra.run.dir={quiet}"]
    assert run_cli(argv, monkeypatch) == 0
    assert not list(quiet.glob("events.out.tfevents.*"))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["logger=[tensorboard,nope]"],
            "unknown logger 'nope'; valid: mlflow, tensorboard, trackio, wandb",
        ),
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


@pytest.mark.parametrize("name", ["tensorboard", "wandb"])
def test_a_tracker_failing_mid_run_warns_once_and_the_run_dir_is_complete(monkeypatch, tmp_path, tiny_overrides, name):
    from sesa_cli.loggers import LOGGERS

    pytest.importorskip(LOGGERS[name].module, reason=f"pip install 'sesa[{name}]' (nox -s integrations)")
    calls = []

    def broken(self, step, values):
        calls.append(step)
        raise OSError("disk full")

    monkeypatch.setattr(LOGGERS[name], "log_row", broken)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run_dir = tmp_path / "run"
    argv = ["train", *tiny_overrides, *SMALL, "sampler=parallel", "train.steps=2", f"logger=[{name}]",
            f"hydra.run.dir={run_dir}"]  # fmt: skip
    assert run_cli(argv, monkeypatch) == 0
    # the run's log (Hydra's job logging writes it to the console and train.log alike)
    warnings = [line for line in (run_dir / "train.log").read_text().splitlines() if "sesa.loggers" in line]
    assert len(warnings) == 1
    assert f"logger {name} failed while logging step 0 (disk full)" in warnings[0]
    assert calls == [0]  # never called again after the failure
    rows = _rows(run_dir)
    assert [r["step"] for r in rows if "rollout/reward_mean" in r] == [1, 2]
    assert (run_dir / "checkpoints" / "step_000002" / "trainer_state.json").is_file()


def test_logger_names_are_the_registry():
    from sesa_cli.config import ConfigError
    from sesa_cli.loggers import LOGGERS, check_names

    assert tuple(LOGGERS) == ("tensorboard", "mlflow", "wandb", "trackio")
    with pytest.raises(ConfigError, match=r"unknown logger 'tensorbord'; valid: mlflow, tensorboard, trackio, wandb"):
        check_names(["tensorbord"])
    with pytest.raises(ConfigError, match="names a logger twice"):
        check_names(["mlflow", "mlflow"])


# ------------------------------------------------------------------------------------------ W&B (offline) and trackio
def _wandb_records(run_dir: Path) -> list:
    """Every record of the run's offline W&B file (``wandb/offline-run-*/run-*.wandb``), parsed with W&B's own
    protobuf. The file is a LevelDB-style log (wandb-core writes it; wandb 0.31 ships no Python reader): a 7-byte
    header (``:W&B``, magic 0xBEE1, version 0), then 32 KiB blocks of chunks, each a CRC32C (4 bytes), a length (2,
    little-endian) and a type (1: full, 2: first, 3: middle, 4: last) before its bytes."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:6] == b":W&B" + (0xBEE1).to_bytes(2, "little"), data[:7]
    block, pos, records, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if kind == 0 and length == 0:  # zero padding at the end of the file
            break
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def _wandb(run_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, Any], Any]:
    """key -> sorted (step, value) of every history record, the run's config, and its run record."""
    records = _wandb_records(run_dir)
    history: dict[str, list[tuple[int, float]]] = {}
    config: dict[str, Any] = {}
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    for item in run.config.update:
        config[item.key] = json.loads(item.value_json)
    for record in records:
        if record.WhichOneof("record_type") == "history":
            step = record.history.step.num
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):  # W&B's own _step, _runtime, _timestamp
                    history.setdefault(key, []).append((step, float(json.loads(item.value_json))))
        elif record.WhichOneof("record_type") == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
    return {k: sorted(v) for k, v in history.items()}, config, run


def _one_per_step(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """What W&B keeps of metrics.jsonl: one value per key and step (a history row per step), the later one where a
    key comes twice at one step."""
    out: dict[str, dict[int, float]] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and value is not None and math.isfinite(value):
                out.setdefault(key, {})[row["step"]] = float(value)
    return {k: sorted(v.items()) for k, v in out.items()}


def _trackio(run_dir: Path, name: str = "trackio") -> tuple[dict[str, list[tuple[int, float]]], dict[str, Any]]:
    """key -> sorted (step, value) from trackio's SQLite store, and the run's config there."""
    import sqlite3

    ref = json.loads((run_dir / "run.json").read_text())["loggers"][name]
    with contextlib.closing(sqlite3.connect(Path(ref["dir"]) / f"{ref['project']}.db")) as db:
        rows = db.execute("SELECT step, metrics FROM metrics WHERE run_id = ?", (ref["id"],)).fetchall()
        (config,) = db.execute("SELECT config FROM configs WHERE run_id = ?", (ref["id"],)).fetchone()
    out: dict[str, list[tuple[int, float]]] = {}
    for step, metrics in rows:
        for key, value in json.loads(metrics).items():
            if not key.startswith("_"):
                out.setdefault(key, []).append((step, float(value)))
    return {k: sorted(v) for k, v in out.items()}, json.loads(config)


@pytest.fixture(scope="module")
def scale_tracked_run(tmp_path_factory, tiny_overrides) -> tuple[Path, Path]:
    """A 2-step training run logged to W&B (offline) and trackio, a 1-step revival of it and an evaluation of it;
    in subprocesses, as trackio reads its store's place ($TRACKIO_DIR) once, at import."""
    pytest.importorskip("wandb", reason="pip install 'sesa[wandb]' (nox -s integrations)")
    pytest.importorskip("trackio", reason="pip install 'sesa[trackio]' (nox -s integrations)")
    root = tmp_path_factory.mktemp("scale_loggers")
    env = {**os.environ, "TRACKIO_DIR": str(root / "trackio")}
    env.pop("WANDB_MODE", None)  # offline is sesa's default
    sesa = [sys.executable, "-m", "sesa_cli"]
    for argv in (
        ["train", *tiny_overrides, *SMALL, "sampler=parallel", "train.steps=2", "train.checkpoint_every=1",
         "train.policy_every=1", "logger=[wandb,trackio]", f"hydra.run.dir={root / 'run'}"],
        ["revive", f"ckpt={root / 'run'}", "step=1", "more_steps=1", "sampler=sequential",
         f"hydra.run.dir={root / 'revived'}"],
        ["eval", f"ckpt={root / 'run'}", "eval.samples=4", f"hydra.run.dir={root / 'eval'}"],
    ):  # fmt: skip
        proc = subprocess.run([*sesa, *argv], capture_output=True, text=True, timeout=600, check=False, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run", root / "revived"


def test_wandb_offline_and_trackio_hold_the_same_values_as_metrics_jsonl(scale_tracked_run):
    run_dir, _ = scale_tracked_run
    rows = _rows(run_dir)
    # policy_every=1: the training rows and the final evaluation both hold policy/* at step 2
    assert sum("policy/target_mass" in r for r in rows if r["step"] == 2) == 2
    history, config, run = _wandb(run_dir)
    _same(history, _one_per_step(rows))
    assert run.project == "sesa"
    assert run.run_group == str(run_dir)
    assert config["sampler.group_size"] == 4
    assert config["task.name"] == "path"
    assert config["sesa.run_dir"] == str(run_dir)
    tracked, config = _trackio(run_dir)
    _same(tracked, _expected(rows))  # trackio keeps every row, duplicates and all
    assert config["sampler.group_size"] == 4
    assert config["_Group"] == str(run_dir)
    info = json.loads((run_dir / "run.json").read_text())
    assert info["loggers"]["wandb"]["dir"].startswith(str(run_dir / "wandb" / "offline-run-"))


def test_a_revived_run_joins_its_parents_group_in_wandb_and_trackio(scale_tracked_run):
    parent_dir, revived = scale_tracked_run
    rows = _rows(revived)
    assert [r["step"] for r in rows if "rollout/reward_mean" in r] == [1, 2]
    history, config, run = _wandb(revived)
    _same(history, _one_per_step(rows))
    assert run.run_group == str(parent_dir)  # the parent's group
    assert config["sesa.parent_run"] == str(parent_dir)
    assert config["sampler.name"] == "sequential"
    tracked, config = _trackio(revived)
    _same(tracked, _expected(rows))
    assert config["_Group"] == str(parent_dir)
    assert config["sesa.parent_run"] == str(parent_dir)


def test_eval_of_a_run_logs_to_its_wandb_and_trackio(scale_tracked_run):
    run_dir, _ = scale_tracked_run
    eval_dir = run_dir.parent / "eval"
    expected = _eval_expected(eval_dir)
    assert expected["eval/success"][0][0] == 2  # the checkpoint's step
    history, config, run = _wandb(eval_dir)
    _same(history, expected)
    assert run.run_group == str(run_dir)  # with the run it evaluated
    assert config["sesa.parent_run"] == str(run_dir)
    tracked, config = _trackio(eval_dir)
    _same(tracked, expected)
    assert config["_Group"] == str(run_dir)
