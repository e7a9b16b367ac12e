"""What every command does at its boundary: typed config, seeding, run-dir metadata, one-line user errors."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sesa_cli.config import ConfigError

log = logging.getLogger("sesa")


@contextlib.contextmanager
def user_errors(command: str) -> Iterator[None]:
    """Bad input -> one line on stderr and exit 2; Ctrl-C -> a clean exit 130 (the trainer saved a checkpoint)."""
    try:
        yield
    except ConfigError as exc:
        print(f"sesa {command}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        from sesa_cli.cli import interrupted

        interrupted(command)


def seed_everything(seed: int) -> None:
    """The one place seeds are set (python, numpy, torch)."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def hydra_context() -> tuple[Path, list[str]]:
    """(run dir, the user's overrides) of the running Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    return Path(hc.runtime.output_dir), list(hc.overrides.task)


def resolved_yaml(cfg: Any) -> str:
    """A DictConfig or a config dataclass as resolved YAML."""
    from omegaconf import OmegaConf

    if not isinstance(cfg, dict) and not OmegaConf.is_config(cfg):
        cfg = OmegaConf.structured(cfg)
    return OmegaConf.to_yaml(cfg, resolve=True)


def joblib_cpu_budget() -> int | None:
    """Under ``hydra/launcher=joblib``, give this job its share of the CPUs: cpus // n_jobs torch threads.

    joblib's loky workers already export OMP_NUM_THREADS = cpus // n_jobs; this makes it explicit for torch's
    intra-op pool (a job that spun up every core's OpenMP threads would starve its neighbours: on a 2-core machine
    2 jobs x 2 threads run slower than 2 x 1). Returns the thread count, or None when not in a joblib sweep.
    """
    from hydra.core.hydra_config import HydraConfig

    launcher = HydraConfig.get().launcher
    if "JoblibLauncher" not in str(launcher.get("_target_", "")):
        return None
    import torch

    cpus = os.cpu_count() or 1
    n_jobs = int(launcher.get("n_jobs") or -1)
    if n_jobs < 0:  # joblib: -1 = all cpus, -2 = all but one, ...
        n_jobs = max(1, cpus + 1 + n_jobs)
    threads = max(1, cpus // n_jobs)
    torch.set_num_threads(threads)
    log.info("joblib sweep job: %d of %d cpus (n_jobs=%d)", threads, cpus, n_jobs)
    return threads
