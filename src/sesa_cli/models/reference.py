"""The KL reference of a run: the base model its lineage started from, recorded in ``run.json``.

The reference of ``algo.kl_coef`` is the policy a run started from: its base model (``model.path``, the GGUF export,
the hub model or the warm-started tiny base; with ``model.lora`` the same base with the adapter disabled). A run
revived from a checkpoint continues its parent's lineage, so its reference is still that base, not the checkpoint
it resumes from (a reference copied from the checkpoint restarted the KL term at 0 and made a resumed run
differ from the uninterrupted one). ``sesa train`` records the base in ``run.json``::

    "kl_reference": {"base": "<where its weights were loaded from>", "sha256": "<fingerprint of its weights>",
                     "precision": "bfloat16"}

``sesa revive`` copies the parent's record, rebuilds the base from the run's model config (on another machine that
may mean another warm start, or ``model.path=`` pointing at a copy) and compares fingerprints: a base that cannot be
rebuilt, or that differs, is a one-line ConfigError, never a silently different KL term.

Weights are weights wherever they are held: the fingerprint reads each tensor's values rounded to bfloat16, the
precision a GPU holds them in under ``model.dtype=bfloat16`` (sesa_cli.devices.weights_dtype), never the dtype or the
device it finds them in. A run trained in bfloat16 on a GPU revives on a CPU, whose rebuilt base holds the same
weights in float32, and the reverse (a GPU run revived on a CPU); what the model is stays checked, by each tensor's name and shape
here and by the checkpoint's ``model.*`` settings (sesa_cli.commands.reload.MODEL_SHAPE). Two float32 bases that
agree in every weight to bfloat16's 8 bits are one base to this check; another warm start or another model differs
in most of its weights by far more. A record without ``precision`` (a run written before this rule) holds the
fingerprint of the weights as they were held, float32 on a CPU with the dtype named per tensor, and is checked so.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import torch

from sesa_cli.config import ConfigError

log = logging.getLogger(__name__)


PRECISION = "bfloat16"
"""The precision a fingerprint reads the weights at (the ``precision`` of a record)."""


def fingerprint(model: torch.nn.Module, precision: str | None = PRECISION) -> str:
    """sha256 over the name, shape and bytes of every tensor of ``model.state_dict()``, its values rounded to
    ``precision`` on the host (about 1 GB/s here); ``precision=None``: the bytes as held, each tensor's dtype named
    too (the fingerprint of a record written before ``precision``)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu()
        if precision is None:
            digest.update(f"{name}|{t.dtype}|{tuple(t.shape)};".encode())
        else:
            if t.is_floating_point():
                t = t.to(getattr(torch, precision))
            digest.update(f"{name}|{tuple(t.shape)};".encode())
        digest.update(t.contiguous().reshape(-1).view(torch.uint8).numpy())  # a view: no copy
    return digest.hexdigest()


def describe(base: Any) -> dict[str, str]:
    """The ``run.json`` record of a base policy (``Policy`` before any LoRA adapter wraps it)."""
    return {"base": str(base.source), "sha256": fingerprint(base.model), "precision": PRECISION}


def parent_record(parent_run: Path) -> dict[str, str] | None:
    """The ``kl_reference`` a parent run recorded; None for runs written before it was recorded."""
    from sesa_cli.runs import read_run_info

    path = parent_run / "run.json"
    if not path.is_file():
        return None
    record = read_run_info(path).get("kl_reference")
    if record is None:
        return None
    if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("base", "sha256")):
        raise ConfigError(f"{path}: 'kl_reference' must be an object with the strings 'base' and 'sha256'")
    if record.get("precision", PRECISION) != PRECISION:
        raise ConfigError(f"{path}: 'kl_reference' has precision {record['precision']!r}; sesa writes {PRECISION!r}")
    return record


def check_rebuilt(record: dict[str, str] | None, base: Any, parent_run: Path) -> dict[str, str]:
    """The record for a revived run whose base was rebuilt as ``base``: the parent's, once the fingerprints agree
    (taken at the record's precision, whatever dtype and device ``base`` holds its weights in).

    A parent without a record (written before runs recorded it) gets the rebuilt base's, with a warning: it cannot be
    checked."""
    if record is None:
        rebuilt = describe(base)
        log.warning(
            "%s records no KL reference (an older run): using the base rebuilt from its config, %s, unverified",
            parent_run / "run.json",
            rebuilt["base"],
        )
        return rebuilt
    sha = fingerprint(base.model, record.get("precision"))  # an older record has none: the weights as held
    if sha != record["sha256"]:
        raise ConfigError(
            f"the base model rebuilt from {base.source} (weights sha256 {sha[:12]}) is not the one "
            f"{parent_run} started from, its KL reference ({record['base']}, sha256 {record['sha256'][:12]}): copy "
            "that directory from the machine that trained the run and pass model.path=<the copy>"
        )
    return record
