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
    "sampler.loss_context": "algo.loss_context",
    "sampler.is_clip": "algo.is_clip",
    "sampler.train_sketches": "algo.train_sketches",
    "algo.follow_coef": "algo.terms.follow.coef",
    "algo.found_coef": "algo.terms.found.coef",
    "algo.found_rows": "algo.terms.found.rows",
    "algo.dynamic_sampling": "sampler.filters.dynamic_sampling",
    "algo.max_resample_rounds": "sampler.filters.dynamic_sampling.max_rounds",
    "algo.rollout_filter_ratio": "sampler.filters.rollout_filter.ratio",
}
"""Old config key -> current one: one name per concept, and each setting in the section of what reads it (the
evaluation protocol is ``eval.*`` in every command, the optimizer ``optim.*``, how the loss scores and weights its
rows ``algo.*``, which groups a step keeps ``sampler.filters``, the loss terms that bring their own rows
``algo.terms``). The old names still work for one release: on the command line with a one-line notice (:func:`rename_overrides`), in a parent run's ``config.yaml`` silently
(:func:`upgrade_config`). A key moved into a plug-in's settings (``algo.terms.<name>``, ``sampler.filters.<name>``)
keeps its meaning: ``true``/``false`` switch a filter on or off, a coefficient of 0 leaves a term off, and a setting
of a filter that is off stays off."""


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


OFF_VALUES = {
    "algo.follow_coef": ("algo.terms.follow", 0),
    "algo.found_coef": ("algo.terms.found", 0),
    "algo.dynamic_sampling": ("sampler.filters.dynamic_sampling", False),
    "algo.rollout_filter_ratio": ("sampler.filters.rollout_filter", 1),
}
"""Old keys that switched a plug-in, and the value that left it off: (its entry in the plug-in mapping, that value).
A run written before the plug-in mappings holds every such key; upgraded, one at its off value adds no entry (the
plug-in stays out of the mapping, as in a run written since), and neither do that plug-in's other settings."""


def upgrade_config(config: dict[Any, Any]) -> dict[Any, Any]:
    """A resolved run config (``config.yaml`` as a nested dict) with the :data:`RENAMED_KEYS` moved to their current
    places; a current key already present wins. Run dirs written before a rename reload under the current names.

    A plug-in left off (:data:`OFF_VALUES`) gets no entry; a key moved under a plug-in entry that is a switch
    (``sampler.filters.dynamic_sampling: true``) makes the entry a mapping of settings. An agent task's config
    without ``task.solution_key`` gets ``actions``, the key it was written under."""
    config = copy.deepcopy(config)
    off: list[str] = []
    for old, new in RENAMED_KEYS.items():
        old_parent, _, old_leaf = old.rpartition(".")
        section = config.get(old_parent)
        if not isinstance(section, dict) or old_leaf not in section:
            continue
        value = section.pop(old_leaf)
        entry, off_value = OFF_VALUES.get(old, (None, None))
        if entry is not None and value == off_value:
            off.append(entry)
        if any(new == e or new.startswith(e + ".") for e in off):
            continue
        *path, new_leaf = new.split(".")
        target: Any = config
        for i, name in enumerate(path):
            node = target.get(name, {}) if isinstance(target, dict) else None
            if node is True and i == len(path) - 1 and i > 0:  # a plug-in switched on: its settings
                node = {}
            if not isinstance(node, dict):  # off, or not a section: nothing to set
                target = None
                break
            target[name] = node
            target = node
        if isinstance(target, dict):
            target.setdefault(new_leaf, value)
    task = config.get("task")
    if isinstance(task, dict) and "max_actions_per_turn" in task:
        # an agent task's run written before task.solution_key (2026-12-07) keyed its episodes by their actions:
        # reloaded (sesa eval, sesa revive, a report's labels), it keeps the key its metrics were computed with
        task.setdefault("solution_key", "actions")
    return config
