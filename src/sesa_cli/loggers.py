"""Experiment trackers (``logger=[tensorboard,mlflow,wandb,trackio]``): every metric row the run dir gets goes to
each too.

The run dir's own files (metrics.jsonl, metrics.csv, checkpoints) are the source of truth; a tracker is a copy where
a researcher already looks. So a tracker that is not installed or cannot start is a ConfigError before any model
work (one line naming the extra to install, exit 2), and a tracker that fails mid-run is one warning and then left
alone for the rest of the run: it never stops the run or touches the run dir's files.

Each tracker gets, at start, the resolved config as parameters (flattened to ``a.b.c`` keys) and the run's parent
link (a revived run: the parent checkpoint and run dir; MLflow also nests the run under its parent's MLflow run when
the parent logged to the same store, W&B and trackio put it in its parent's group), and then every row :meth:`sesa_cli.runs.RunDir.log_metrics` writes, at the
row's ``step``. A revived run writes its parent's rows first (``revive/parent`` = 1), so its curves continue the
parent's step axis in every tracker.

Only numeric values are sent (booleans as 0/1); ``None`` (a non-finite value in metrics.jsonl) and text are left
out. MLflow does not allow ``@`` in a metric name, so there ``eval/pass@4`` is logged as ``eval/pass_at_4``
(:func:`mlflow_key`); the other trackers get the keys as metrics.jsonl has them. W&B keeps one value per key and
step: where metrics.jsonl has a key twice at one step (a training row's ``policy/*`` and the evaluation's at the same
step) it holds the later one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from sesa_cli.config import ConfigError, LoggerOptions, first_line
from sesa_cli.registry import Registry

log = logging.getLogger("sesa.loggers")


class Tracker:
    """One tracker's connection for one run: started with the run dir, the flattened config, the resolved YAML,
    ``logger_options``, the run's ``sesa.*`` tags and its parent's reference in this tracker (a revived run)."""

    name: str = ""
    extra: str = ""
    """The pyproject extra that installs it: ``pip install 'sesa[<extra>]'``."""
    module: str = ""
    """The module whose absence means the extra is not installed."""

    def __init__(self, run_dir: Path, params: dict[str, Any], config_yaml: str, options: LoggerOptions,
                 tags: dict[str, str], parent: dict[str, Any] | None) -> None:  # fmt: skip
        """Start the tracker's run (any exception: the tracker cannot start)."""

    def log_row(self, step: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def close(self, status: str) -> None:
        """Flush and finish; ``status`` is ``finished``, ``failed`` or ``interrupted``."""

    def reference(self) -> dict[str, Any]:
        """What a revived run needs to link to this run in the same tracker (recorded in run.json)."""
        return {}


class TensorBoardTracker(Tracker):
    """Event files in the run dir (``tensorboard --logdir outputs`` shows every run), written by torch's
    ``SummaryWriter``; the config as a text summary."""

    name = extra = "tensorboard"
    module = "tensorboard"

    def __init__(self, run_dir: Path, params: dict[str, Any], config_yaml: str, options: LoggerOptions,
                 tags: dict[str, str], parent: dict[str, Any] | None) -> None:  # fmt: skip
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir))
        text = "\n".join(f"    {line}" for line in config_yaml.splitlines())  # markdown code block
        self.writer.add_text("config", text, global_step=0)
        self.writer.flush()

    def log_row(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()  # a row is visible in TensorBoard as soon as metrics.jsonl has it

    def close(self, status: str) -> None:
        self.writer.close()


def mlflow_key(key: str) -> str:
    """A metric key as MLflow accepts it: ``@`` (not allowed there) becomes ``_at_``."""
    return key.replace("@", "_at_")


def mlflow_store(setting: str) -> tuple[str, str | None]:
    """(tracking URI, artifact location of a new experiment) for ``logger_options.mlflow_tracking_uri``. A local
    directory holds an SQLite store ``mlflow.db`` and the artifacts under ``artifacts/``: MLflow's own local default
    since its file store went into maintenance mode (MLflow 3 refuses to open one unless MLFLOW_ALLOW_FILE_STORE is
    set). A URI (``http://...``, ``sqlite:///...``, ``databricks``) is used as it is, with the server's artifacts."""
    if "://" in setting or setting == "databricks":
        return setting, None
    folder = Path(setting).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}", (folder / "artifacts").as_uri()


class MlflowTracker(Tracker):
    """An MLflow run in ``logger_options.experiment`` of the store at ``logger_options.mlflow_tracking_uri`` (a local
    path: an SQLite store there, :func:`mlflow_store`), through ``MlflowClient`` (no global active run, so runs in one process stay apart)."""

    name = extra = "mlflow"
    module = "mlflow"
    MAX_PARAM = 6000
    """MLflow's longest parameter value (longer values, e.g. long lists, are cut)."""

    def __init__(self, run_dir: Path, params: dict[str, Any], config_yaml: str, options: LoggerOptions,
                 tags: dict[str, str], parent: dict[str, Any] | None) -> None:  # fmt: skip
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri, artifacts = mlflow_store(options.mlflow_tracking_uri)
        self.client = MlflowClient(tracking_uri=uri)
        self.uri = uri
        experiment = self.client.get_experiment_by_name(options.experiment)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            experiment_id = self.client.create_experiment(options.experiment, artifact_location=artifacts)
        tags = dict(tags)
        if parent and parent.get("tracking_uri") == uri and parent.get("run_id"):
            tags["mlflow.parentRunId"] = parent["run_id"]  # the UI nests the revived run under its parent
        self.run_id = self.client.create_run(experiment_id, run_name=run_dir.name, tags=tags).info.run_id
        items = [Param(k, str(v)[: self.MAX_PARAM]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 parameters per batch
            self.client.log_batch(self.run_id, params=items[i : i + 100])
        self.client.log_text(self.run_id, config_yaml, "config.yaml")

    def log_row(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_key(k), v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics per batch
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def close(self, status: str) -> None:
        state = {"finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}[status]
        self.client.set_terminated(self.run_id, state)

    def reference(self) -> dict[str, Any]:
        return {"tracking_uri": self.uri, "run_id": self.run_id}


def lineage(run_dir: Path, parent: dict[str, Any] | None) -> str:
    """The group a run joins in W&B and trackio: its parent's group (a revived run), else its own run dir, so a run
    and every run revived from it, directly or not, are one group there."""
    return str((parent or {}).get("group") or run_dir)


class WandbTracker(Tracker):
    """A W&B run in project ``logger_options.experiment``, offline unless ``WANDB_MODE`` says otherwise: its files
    go under the run dir's ``wandb/offline-run-*``, which ``wandb sync`` uploads later. The config (and the run's
    ``sesa.*`` tags) as the run's config; a revived run joins its parent's group (:func:`lineage`)."""

    name = extra = "wandb"
    module = "wandb"
    EXIT_CODES: ClassVar[dict[str, int]] = {"finished": 0, "failed": 1, "interrupted": 130}

    def __init__(self, run_dir: Path, params: dict[str, Any], config_yaml: str, options: LoggerOptions,
                 tags: dict[str, str], parent: dict[str, Any] | None) -> None:  # fmt: skip
        import wandb

        self.group = lineage(run_dir, parent)
        settings = wandb.Settings(mode=os.environ.get("WANDB_MODE", "offline"), console="off", silent=True,
                                  x_disable_stats=True)  # fmt: skip
        self.run = wandb.init(project=options.experiment, dir=str(run_dir), name=run_dir.name, group=self.group,
                              config={**params, **tags}, reinit="create_new", settings=settings)  # fmt: skip

    def log_row(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def close(self, status: str) -> None:
        self.run.finish(exit_code=self.EXIT_CODES[status])

    def reference(self) -> dict[str, Any]:
        return {"id": self.run.id, "group": self.group, "dir": str(Path(self.run.dir).parent)}


class TrackioTracker(Tracker):
    """A trackio run in project ``logger_options.experiment``, in trackio's local SQLite store (``$TRACKIO_DIR``,
    default ``~/.cache/huggingface/trackio``; ``trackio show`` opens its dashboard). The config (and the run's
    ``sesa.*`` tags) as the run's config; a revived run joins its parent's group (:func:`lineage`)."""

    name = extra = "trackio"
    module = "trackio"

    def __init__(self, run_dir: Path, params: dict[str, Any], config_yaml: str, options: LoggerOptions,
                 tags: dict[str, str], parent: dict[str, Any] | None) -> None:  # fmt: skip
        import trackio

        self.group = lineage(run_dir, parent)
        self.project = options.experiment
        with contextlib.redirect_stdout(io.StringIO()):  # trackio prints a line per run it creates or finishes
            self.run = trackio.init(project=self.project, name=run_dir.name, group=self.group,
                                    config={**params, **tags}, embed=False, auto_log_cpu=False, auto_log_gpu=False)  # fmt: skip

    def log_row(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def close(self, status: str) -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            self.run.finish()

    def reference(self) -> dict[str, Any]:
        from trackio.utils import TRACKIO_DIR

        return {"project": self.project, "id": self.run.id, "group": self.group, "dir": str(TRACKIO_DIR)}


LOGGERS: Registry[type[Tracker]] = Registry("logger")
"""``logger`` name -> tracker: the one list of names (the config checks and ``--help`` read it)."""
for _tracker in (TensorBoardTracker, MlflowTracker, WandbTracker, TrackioTracker):
    LOGGERS.add(_tracker.name, _tracker)


def check_names(names: list[str]) -> None:
    """A ConfigError for a ``logger`` list naming an unknown tracker or one twice."""
    for name in names:
        LOGGERS.lookup(name)
    if len(set(names)) != len(names):
        raise ConfigError(f"logger={names} names a logger twice")


def numeric(row: dict[str, Any]) -> dict[str, float]:
    """The values of a metrics row a tracker can plot: finite numbers (booleans as 0/1), ``step`` left out."""
    out = {}
    for key, value in row.items():
        if key == "step" or isinstance(value, str) or value is None:
            continue
        if isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
            out[key] = float(value)
    return out


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as ``{"a.b.c": value}`` (lists kept whole)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def check_installed(names: list[str]) -> None:
    """A ConfigError naming the extra to install for the first tracker in ``names`` that is not installed."""
    for name in names:
        tracker = LOGGERS[name]
        if importlib.util.find_spec(tracker.module) is None:
            raise ConfigError(f"logger={name} needs {tracker.module}: pip install 'sesa[{tracker.extra}]'")


class Trackers:
    """The trackers of one run: ``log`` sends a metrics row to each; one that raises is warned about once and left
    out from then on."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = trackers
        self.failed: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def _guard(self, tracker: Tracker, what: str, call: Callable[[], None]) -> None:
        if tracker.name in self.failed:
            return
        try:
            call()
        except Exception as exc:  # noqa: BLE001  (any tracker failure: the run and its own files go on)
            self.failed.add(tracker.name)
            log.warning("logger %s failed while %s (%s); it gets nothing more from this run, whose own files "
                        "are complete", tracker.name, what, first_line(exc))  # fmt: skip

    def log(self, row: dict[str, Any]) -> None:
        values = numeric(row)
        step = int(row["step"])
        for tracker in self.trackers:
            self._guard(tracker, f"logging step {step}", partial(tracker.log_row, step, values))

    def close(self, status: str = "finished") -> None:
        for tracker in self.trackers:
            self._guard(tracker, "closing", partial(tracker.close, status))

    def references(self) -> dict[str, Any]:
        return {t.name: t.reference() for t in self.trackers if t.reference()}


def start(names: list[str], options: LoggerOptions, run_dir: Path, config_yaml: str,
          parent: dict[str, Any] | None = None) -> Trackers:  # fmt: skip
    """Start every tracker in ``names`` for the run in ``run_dir``; a ConfigError (one line naming the extra or the
    setting) if one is not installed or cannot start. ``config_yaml`` is the resolved config; ``parent`` (a revived
    run) holds ``checkpoint``, ``run_dir`` and the parent's run.json ``loggers`` references."""
    check_names(names)
    check_installed(names)
    if not names:
        return Trackers([])
    import yaml

    config = yaml.safe_load(config_yaml) or {}
    tags = {"sesa.run_dir": str(run_dir)}
    if parent:
        tags.update({"sesa.parent": str(parent["checkpoint"]), "sesa.parent_run": str(parent["run_dir"])})
    params = flatten(config)
    started: list[Tracker] = []
    for name in names:
        parent_ref = (parent or {}).get("loggers", {}).get(name)
        try:
            started.append(LOGGERS[name](run_dir, params, config_yaml, options, tags, parent_ref))
        except Exception as exc:  # noqa: BLE001  (a bad URI, an unreachable server, a broken install)
            Trackers(started).close("failed")
            raise ConfigError(f"logger={name} cannot start ({first_line(exc)}); check logger_options") from None
    return Trackers(started)


@contextlib.contextmanager
def attached(run: Any, names: list[str], options: LoggerOptions, config_yaml: str,
             parent: dict[str, Any] | None = None) -> Iterator[Trackers]:  # fmt: skip
    """Start the trackers (see :func:`start`) and attach them to ``run`` (a RunDir) for the block, so every row
    ``run.log_metrics`` writes reaches them; close them after it, marked finished, failed or interrupted. A
    data-parallel replica's run dir (which writes nothing) gets none."""
    from sesa_cli.runs import ReplicaRunDir

    trackers = Trackers([]) if isinstance(run, ReplicaRunDir) else start(names, options, run.path, config_yaml, parent)
    run.trackers = trackers or None
    status = "failed"
    try:
        yield trackers
        status = "finished"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        run.trackers = None
        trackers.close(status)
