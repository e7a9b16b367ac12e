"""Where a policy runs: the ``device`` setting checked against the machine, ``auto`` resolved, the weights' dtype on
that device, and how many rows an evaluation draws at once when ``model.max_batch_rows`` is left at 0.

Importing this module imports no torch (the command line's validation imports it before any model work); the
functions that ask the machine import torch when called.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from sesa_cli.config import device_form

log = logging.getLogger(__name__)

MEMORY_SHARE = 0.5
"""Share of the free accelerator memory the rows of one evaluation draw may take for their key/value cache and
logits. The rest is for what the formula does not count: the prefill's activations (rows x prompt x MLP width for one
layer at a time), the allocator's fragmentation, the training update that follows sampling (its activations,
gradients and AdamW's two moments) and other processes on the GPU."""

LOGIT_COPIES = 8
"""float32 (rows, vocab) tensors one sampling step holds at once, counted per row: the logits, the tempered copy, the
log-softmax, its exp in the entropy, the probabilities, and top-p's sorted values and int64 order (two copies'
worth)."""


def device_problem(device: str) -> str | None:
    """A one-line problem when ``device`` names a device this machine does not have, else None: ``cuda`` with a torch
    built without CUDA or on a machine without a GPU, ``cuda:N`` past the last GPU. ``auto`` and ``cpu`` always pass.
    Imports torch only for a ``cuda`` name."""
    kind, index = device_form(device)
    if kind != "cuda":
        return None
    import torch

    if not torch.cuda.is_available():
        why = (
            f"this torch ({torch.__version__}) is built without CUDA"
            if torch.version.cuda is None
            else "torch finds no CUDA GPU on this machine"
        )
        return f"device={device}: {why}; use device=cpu, or device=auto to take a GPU where there is one"
    count = torch.cuda.device_count()
    if index is not None and index >= count:
        gpus = "cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
        return f"device={device}: this machine has {count} CUDA GPU{'s' if count > 1 else ''} ({gpus})"
    return None


def resolve_device(device: str) -> str:
    """The torch device ``device`` names: ``auto`` is ``cuda`` where torch finds a GPU, else ``cpu``; any other name
    as it is (checked by :func:`device_problem` before any model work)."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def weights_dtype(dtype: str, device: str) -> Any:
    """The torch dtype a policy's weights are held in: bfloat16 on a GPU under ``model.dtype=bfloat16`` (the matrix
    units' own type: half the bytes a decode step reads), else float32 (on a CPU ``model.dtype=bfloat16`` is autocast
    around float32 weights, as measured there: docs/real-models.md)."""
    import torch

    on_gpu = device_form(device)[0] == "cuda"
    return torch.bfloat16 if dtype == "bfloat16" and on_gpu else torch.float32


def kv_bytes_per_token(config: Any, value_bytes: int) -> int:
    """Bytes of key/value cache one token takes in every layer of a decoder with Hugging Face config ``config``:
    2 (keys and values) x layers x key/value heads x head width x ``value_bytes`` (2 in bfloat16, 4 in float32)."""
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return 2 * int(config.num_hidden_layers) * kv_heads * head_dim * value_bytes


def rows_for_memory(free_bytes: float, row_tokens: int, kv_per_token: int, vocab: int) -> int:
    """Rows one draw may hold in ``free_bytes`` of accelerator memory, rounded down to a power of two (at least 1):

        rows = 2 ** floor(log2(MEMORY_SHARE x free_bytes / (row_tokens x kv_per_token + LOGIT_COPIES x vocab x 4)))

    ``row_tokens``: the longest a row can grow (prompt and every sampled token); ``kv_per_token``:
    :func:`kv_bytes_per_token`. The power of two keeps the choice the same when the free memory moves a little
    between two processes on one GPU (a run's evaluation and ``sesa eval`` of its checkpoint), since how the rows are
    cut into draws decides which random numbers each row gets."""
    per_row = row_tokens * kv_per_token + LOGIT_COPIES * vocab * 4
    fit = MEMORY_SHARE * free_bytes / per_row
    return 1 if fit < 2 else 2 ** math.floor(math.log2(fit))


def auto_batch_rows(model: Any) -> int:
    """``model.max_batch_rows`` when left at 0: on a GPU, :func:`rows_for_memory` of the memory free on the model's
    device now (the driver's free memory plus what torch's allocator holds unused), with a row as long as the
    model's positions (``max_position_embeddings``: no row can be longer, whatever the task and sampler); on a CPU
    0, all rows at once, as always."""
    import torch

    device = next(model.parameters()).device
    if device.type != "cuda":
        return 0
    free, _ = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    config = model.config
    value_bytes = next(model.parameters()).element_size()
    rows = rows_for_memory(
        free, int(config.max_position_embeddings), kv_bytes_per_token(config, value_bytes), int(config.vocab_size)
    )
    log.info(
        "model.max_batch_rows=0 on %s: evaluation draws %d rows at once (%.1f GB free, %d positions a row)",
        device,
        rows,
        free / 1e9,
        config.max_position_embeddings,
    )
    return rows
