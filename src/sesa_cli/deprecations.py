"""Config keys renamed, and how the old names keep working for one release.

Torch-free and Hydra-free: the ``sesa`` dispatcher rewrites the command line with it before anything is composed, and
``eval``/``revive``/``diversity-report`` upgrade the config of a run written before a rename. Renamed metric keys are
:data:`sesa_cli.metric_keys.RENAMED`.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["RENAMED_KEYS", "rename_overrides", "upgrade_config"]

RENAMED_KEYS = {
    "train.eval_samples": "eval.samples",
    "task.eval_instances": "eval.instances",
    "eval.n": "eval.samples",
    "algo.lr": "optim.lr",
    "algo.max_grad_norm": "optim.max_grad_norm",
    "train.warmup_steps": "optim.warmup_steps",
    "train.lr_schedule": "optim.lr_schedule",
    "train.weight_decay": "optim.weight_decay",
    "sampler.off_policy": "algo.off_policy",
}
"""Old config key -> current one (issue 18: one name per concept; the evaluation protocol is ``eval.*`` in every
command, the optimizer ``optim.*``; issue 28: the off-policy strategy is configured with the loss, ``algo.*``). The old names still work for one release: on the command line with a one-line
notice (:func:`rename_overrides`), in a parent run's ``config.yaml`` silently (:func:`upgrade_config`)."""


def rename_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """``overrides`` with every old key of :data:`RENAMED_KEYS` replaced by its current name (``+``/``~`` prefixes
    and the value kept), and one deprecation notice per old key used."""
    out, notices = [], []
    for item in overrides:
        name, sep, value = item.partition("=")
        prefix = name[: len(name) - len(name.lstrip("+~"))]
        new = RENAMED_KEYS.get(name[len(prefix) :])
        if new is None or (not sep and not prefix):
            out.append(item)
            continue
        out.append(f"{prefix}{new}{sep}{value}")
        old = name[len(prefix) :]
        notice = f"deprecated: {old} -> {new} (the old name goes in the next release)"
        if notice not in notices:
            notices.append(notice)
    return out, notices


def upgrade_config(config: dict[Any, Any]) -> dict[Any, Any]:
    """A resolved run config (``config.yaml`` as a nested dict) with the :data:`RENAMED_KEYS` moved to their current
    places; a current key already present wins. Run dirs written before a rename reload under the current names."""
    config = copy.deepcopy(config)
    for old, new in RENAMED_KEYS.items():
        old_parent, _, old_leaf = old.rpartition(".")
        section = config.get(old_parent)
        if not isinstance(section, dict) or old_leaf not in section:
            continue
        value = section.pop(old_leaf)
        new_parent, _, new_leaf = new.rpartition(".")
        target = config.setdefault(new_parent, {})
        if isinstance(target, dict):
            target.setdefault(new_leaf, value)
    return config
