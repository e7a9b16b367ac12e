"""Config keys renamed, and how the old names keep working for one release.

Torch-free and Hydra-free: the ``sesa`` dispatcher rewrites the command line with it before anything is composed, and
``eval``/``revive``/``diversity-report`` upgrade the config of a run written before a rename. Renamed metric keys are
:data:`sesa_cli.metric_keys.RENAMED`.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["METHOD_KEYS", "RENAMED_KEYS", "rename_overrides", "upgrade_config"]

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
    "algo.passk_k": "algo.advantage.k",
    "algo.top_entropy_quantile": "algo.loss.rho",
    "algo.clip_cov_ratio": "algo.loss.ratio",
    "algo.clip_cov_lb": "algo.loss.cov_min",
    "algo.clip_cov_ub": "algo.loss.cov_max",
    "algo.kl_cov_ratio": "algo.loss.ratio",
    "algo.kl_cov_coef": "algo.loss.penalty",
    "algo.terms.unlikeliness.coef": "algo.terms.unlikeliness.beta",
    "algo.terms.outcome_ucb.coef": "algo.terms.outcome_ucb.bonus",
    "algo.terms.outcome_batch.coef": "algo.terms.outcome_batch.penalty",
}
"""Old config key -> current one: one name per concept, and each setting in the section of what reads it (the
evaluation protocol is ``eval.*`` in every command, the optimizer ``optim.*``, how the loss scores and weights its
rows ``algo.*``, which groups a step keeps ``sampler.filters``, the loss terms that bring their own rows
``algo.terms``, a method's own settings under its key: ``algo.advantage.*``, ``algo.loss.*``, and ``coef`` of a term
only as its loss weight, a reward bonus's scale named for what it scales). The old names still work for one release:
on the command line with a one-line notice (:func:`rename_overrides`), in a parent run's ``config.yaml`` silently
(:func:`upgrade_config`). A key moved into a plug-in's settings (``algo.terms.<name>``, ``sampler.filters.<name>``)
keeps its meaning: ``true``/``false`` switch a filter on or off, a coefficient of 0 leaves a term off, and a setting
of a filter that is off stays off. A method's old central setting (``algo.passk_k``) moves into the settings of the
method it belonged to (:data:`METHOD_KEYS`): on the command line it is that setting of the chosen method (an error
naming the valid settings when another is chosen), in an old config only where the run chose that method."""

METHOD_KEYS = {
    "algo.passk_k": ("algo.advantage", "passk"),
    "algo.top_entropy_quantile": ("algo.loss", "forking_tokens"),
    "algo.clip_cov_ratio": ("algo.loss", "clip_cov"),
    "algo.clip_cov_lb": ("algo.loss", "clip_cov"),
    "algo.clip_cov_ub": ("algo.loss", "clip_cov"),
    "algo.kl_cov_ratio": ("algo.loss", "kl_cov"),
    "algo.kl_cov_coef": ("algo.loss", "kl_cov"),
}
"""The central algo fields that were one method's settings: (the key that chooses the method, its name). Every run
written before they moved holds all of them, whatever its method; upgraded, only the chosen method's move."""

NAMED_PLUGINS = ("algo.advantage", "algo.loss")
"""The keys that choose one plug-in by ``name`` (sesa_cli.config.NAMED_PLUGINS: this module imports nothing of
sesa): a bare value is its name."""


def rename_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """``overrides`` with every old key of :data:`RENAMED_KEYS` replaced by its current name (``+``/``~`` prefixes
    and the value kept), and one deprecation notice per old key used; a bare name given to a key that chooses one
    plug-in (``algo.advantage=passk``, a sweep ``algo.loss=ppo_clip,clip_cov``) is its ``name`` (no notice: the short
    form stays)."""
    out, notices = [], []
    for item in overrides:
        name, sep, value = item.partition("=")
        prefix = name[: len(name) - len(name.lstrip("+~"))]
        key = name[len(prefix) :]
        if key in NAMED_PLUGINS and sep and value and value.strip()[0] not in "{[" and value.strip() != "null":
            out.append(f"{prefix}{key}.name={value}")
            continue
        new = RENAMED_KEYS.get(key)
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


def _pop(config: dict[Any, Any], key: str) -> tuple[bool, Any]:
    """(found, value) of the dotted ``key`` in the nested ``config``, removed from it."""
    *path, leaf = key.split(".")
    node: Any = config
    for name in path:
        node = node.get(name) if isinstance(node, dict) else None
    if not isinstance(node, dict) or leaf not in node:
        return False, None
    return True, node.pop(leaf)


def _method_names(config: dict[Any, Any]) -> dict[str, str]:
    """The keys of :data:`NAMED_PLUGINS` as mappings (an old run's bare name ``advantage: passk`` becomes ``{name:
    passk}``), and the name each chooses."""
    algo = config.get("algo")
    names: dict[str, str] = {}
    if not isinstance(algo, dict):
        return names
    for key in NAMED_PLUGINS:
        leaf = key.rpartition(".")[2]
        if isinstance(algo.get(leaf), str):
            algo[leaf] = {"name": algo[leaf]}
        if isinstance(algo.get(leaf), dict):
            names[key] = str(algo[leaf].get("name", ""))
    return names


def upgrade_config(config: dict[Any, Any]) -> dict[Any, Any]:
    """A resolved run config (``config.yaml`` as a nested dict) with the :data:`RENAMED_KEYS` moved to their current
    places; a current key already present wins. Run dirs written before a rename reload under the current names.

    A plug-in left off (:data:`OFF_VALUES`) gets no entry; a key moved under a plug-in entry that is a switch
    (``sampler.filters.dynamic_sampling: true``) makes the entry a mapping of settings; a method's old central
    setting (:data:`METHOD_KEYS`) moves where the run chose that method and goes elsewhere. An agent task's config
    without ``task.solution_key`` gets ``actions``, the key it was written under."""
    config = copy.deepcopy(config)
    names = _method_names(config)
    off: list[str] = []
    for old, new in RENAMED_KEYS.items():
        found, value = _pop(config, old)
        if not found:
            continue
        if old in METHOD_KEYS and names.get(METHOD_KEYS[old][0]) != METHOD_KEYS[old][1]:
            continue  # another method's setting: the run never read it
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
