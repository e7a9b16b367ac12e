"""Log-probs and entropies of completions under a chosen context, for the loss.

The vocab projection is applied only at completion positions and in chunks of ``chunk`` positions, so the
(batch, length, vocab) logits never sit in memory at once (SmolLM2's 49k vocab makes them 1 GB).
With grad enabled every chunk is checkpointed: its logits are recomputed in backward instead of being kept.

The ids the model never samples (:mod:`sesa_cli.models.special`) are masked here exactly as the rollout engine
masks them, so a scoring pass of a sampled token in the context that drew it gives the log-prob the sampler recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel

from sesa_cli.models.special import banned_mask, masked_logps


@dataclass
class ScoringBatch:
    """Right-padded (context + completion) sequences. Shapes: ids/attention (batch, seq); completion (batch, T)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    positions: torch.Tensor
    """(batch, T) index of the position whose logits predict completion token j."""
    targets: torch.Tensor
    """(batch, T) completion token ids (pad beyond each row's length)."""
    response_mask: torch.Tensor
    """(batch, T) 1.0 on completion tokens, up to and including the first stop token; 0.0 on padding and on
    teacher-forced observations. Built from lengths and the rollout's own policy mask, never from ``token != pad``
    (a policy could otherwise learn to emit PAD and escape the loss)."""


def select_rows(batch: ScoringBatch, idx: torch.Tensor) -> ScoringBatch:
    """The rows ``idx`` of a scoring batch (a mini-batch), cut to the longest of them: the rows are right-padded,
    so the columns past it are padding in every selected row and the forward pass skips them. The completion width
    T stays the batch's."""
    sub = ScoringBatch(*(getattr(batch, f)[idx] for f in ScoringBatch.__dataclass_fields__))
    width = max(1, int(sub.attention_mask.sum(1).max()))
    return replace(sub, input_ids=sub.input_ids[:, :width], attention_mask=sub.attention_mask[:, :width])


def build_batch(
    contexts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    masks: Sequence[Sequence[bool] | None] | None = None,
) -> ScoringBatch:
    """``masks[i]`` (optional, per completion token) marks the tokens the loss covers: a multi-turn episode's policy
    tokens, never its teacher-forced observations. None = every completion token."""
    n = len(contexts)
    lengths = [len(c) + len(y) for c, y in zip(contexts, completions, strict=True)]
    width = max(lengths)
    t_max = max(1, max(len(y) for y in completions))
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros(n, width, dtype=torch.long)
    positions = torch.zeros(n, t_max, dtype=torch.long)
    targets = torch.full((n, t_max), pad_id, dtype=torch.long)
    mask = torch.zeros(n, t_max)
    for i, (c, y) in enumerate(zip(contexts, completions, strict=True)):
        seq = list(c) + list(y)
        ids[i, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        attn[i, : len(seq)] = 1
        if y:
            positions[i, : len(y)] = torch.arange(len(c) - 1, len(c) - 1 + len(y))
            targets[i, : len(y)] = torch.as_tensor(list(y), dtype=torch.long)
            own = masks[i] if masks is not None else None
            mask[i, : len(y)] = 1.0 if own is None else torch.as_tensor(list(own), dtype=torch.float32)
    return ScoringBatch(ids, attn, positions, targets, mask)


def _chunk_logps(
    lm_head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    banned: torch.Tensor | None,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = lm_head(hidden).float() / temperature
    logp_all, entropy = masked_logps(logits, banned)
    logps = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    if banned is not None:
        # Padding targets (PAD is banned) would be -inf, and -inf * 0 = NaN in every masked sum downstream; outside
        # the response mask they are 0. A banned token inside a response stays -inf: the engine never samples one.
        logps = torch.where(response_mask > 0, logps, logps.nan_to_num(neginf=0.0))
    return logps, entropy


@dataclass
class PackedRows:
    """The rows of a :class:`ScoringBatch` without their padding: packed side by side into ``bins`` rows of the
    batch's width (first-fit, longest first), each sequence from position 0 and seeing only itself."""

    input_ids: torch.Tensor
    """(bins, width) the rows' tokens; a bin's tail that no row fills holds id 0 (any id would do: it comes after
    the bin's rows, which cannot see it, and no output of it is read)."""
    position_ids: torch.Tensor
    """(bins, width) each row's positions 0, 1, ..., and the tail's: the restarts are where transformers'
    packed-sequence mask (built from ``position_ids`` when no attention mask is passed) separates the rows."""
    starts: torch.Tensor
    """(batch,) where row i's first token sits in the flattened (bins * width) layout."""


def pack_rows(batch: ScoringBatch) -> PackedRows:
    """``batch``'s rows packed into as few rows of its width as first-fit finds (``model.padding_free``)."""
    lengths = batch.attention_mask.sum(1).tolist()
    width = batch.input_ids.shape[1]
    bins: list[list[int]] = []  # row indices per bin
    free: list[int] = []  # room left per bin
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        b = next((b for b, room in enumerate(free) if room >= lengths[i]), None)
        if b is None:
            bins.append([])
            free.append(width)
            b = len(bins) - 1
        bins[b].append(i)
        free[b] -= lengths[i]
    ids = torch.full((len(bins), width), 0, dtype=torch.long)
    positions = torch.zeros((len(bins), width), dtype=torch.long)
    starts = torch.zeros(len(lengths), dtype=torch.long)
    for b, rows in enumerate(bins):
        at = 0
        for i in rows:
            n = lengths[i]
            ids[b, at : at + n] = batch.input_ids[i, :n]
            positions[b, at : at + n] = torch.arange(n)
            starts[i] = b * width + at
            at += n
        positions[b, at:] = torch.arange(width - at)
    return PackedRows(ids, positions, starts)


def completion_logps(
    model: PreTrainedModel,
    batch: ScoringBatch,
    temperature: float = 1.0,
    chunk: int = 64,
    dtype: str = "float32",
    padding_free: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logps, entropies), each (batch, T): log pi(y_j | context, y_<j) at ``temperature``, and the entropy of that
    distribution, with the model's banned ids masked as at sampling. Positions outside ``response_mask`` hold
    finite values (0 where the target is banned). Differentiable when grad is enabled.

    ``padding_free`` (``model.padding_free``) runs the decoder on the rows packed without their padding
    (:func:`pack_rows`) instead of the right-padded batch: the same values up to float rounding, on fewer tokens."""
    dev = next(model.parameters()).device
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
        idx = batch.positions.to(dev)
        if padding_free:
            packed = pack_rows(batch)
            hidden = model.get_decoder()(
                input_ids=packed.input_ids.to(dev), position_ids=packed.position_ids.to(dev), use_cache=False
            ).last_hidden_state  # (bins, width, hidden)
            flat = hidden.reshape(-1, hidden.shape[-1])
            picked = flat[packed.starts.to(dev)[:, None] + idx]  # (batch, T, hidden)
        else:
            hidden = model.get_decoder()(
                input_ids=batch.input_ids.to(dev), attention_mask=batch.attention_mask.to(dev), use_cache=False
            ).last_hidden_state  # (batch, seq, hidden)
            picked = hidden.gather(1, idx[..., None].expand(-1, -1, hidden.shape[-1]))  # (batch, T, hidden)
        lm_head = model.get_output_embeddings()
        targets = batch.targets.to(dev)
        response_mask = batch.response_mask.to(dev)
        banned = banned_mask(model, lm_head.weight.shape[0], dev)
        logps, ents = [], []
        for s in range(0, picked.shape[1], chunk):
            h, t, m = picked[:, s : s + chunk], targets[:, s : s + chunk], response_mask[:, s : s + chunk]
            if torch.is_grad_enabled():
                lp, en = checkpoint(_chunk_logps, lm_head, h, t, temperature, banned, m, use_reentrant=False)
            else:
                lp, en = _chunk_logps(lm_head, h, t, temperature, banned, m)
            logps.append(lp)
            ents.append(en)
    return torch.cat(logps, 1), torch.cat(ents, 1)
