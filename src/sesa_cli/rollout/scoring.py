"""Log-probs and entropies of completions under a chosen context, for the loss.

The vocab projection is applied only at completion positions and in chunks of ``chunk`` positions, so the
(batch, length, vocab) logits never sit in memory at once (SmolLM2's 49k vocab makes them 1 GB).
With grad enabled a chunk whose logits exceed ``CHECKPOINT_LOGITS`` values is checkpointed: its logits are
recomputed in backward instead of being kept (a smaller one is kept: the same gradients, without the recomputation).

The ids the model never samples (:mod:`sesa_cli.models.special`) are masked here exactly as the rollout engine
masks them, so a scoring pass of a sampled token in the context that drew it gives the log-prob the sampler recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

import torch
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel

from sesa_cli import compute
from sesa_cli.models.special import banned_mask, masked_logps

CHECKPOINT_LOGITS = 1 << 22
"""Logits (positions x vocab) a chunk may keep for backward, 16 MB in float32: SmolLM2's 49k vocab passes it at 86
positions, ``model=tiny``'s vocab of ~200 never does."""


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
    context_lengths: torch.Tensor
    """(batch,) tokens of each row's context: the row's first ``context_lengths[i]`` ids are the context, the rest
    (up to its attention mask's length) the completion."""


def select_rows(batch: ScoringBatch, idx: torch.Tensor) -> ScoringBatch:
    """The rows ``idx`` of a scoring batch (a mini-batch), cut to the longest of them: the rows are right-padded,
    so the columns past it are padding in every selected row and the forward pass skips them. The completion width
    T stays the batch's."""
    sub = ScoringBatch(*(getattr(batch, f)[idx] for f in ScoringBatch.__dataclass_fields__))
    width = max(1, int(sub.attention_mask.sum(1).max()))
    return replace(sub, input_ids=sub.input_ids[:, :width], attention_mask=sub.attention_mask[:, :width])


def join_rows(batches: Sequence[ScoringBatch], pad_id: int) -> ScoringBatch:
    """The rows of ``batches``, in order, as one batch for one forward pass: each is right-padded to the widest
    sequence and completion (padding ``pad_id``, outside every mask); a single batch is returned as it is."""
    if len(batches) == 1:
        return batches[0]
    width = max(b.input_ids.shape[1] for b in batches)
    t_max = max(b.targets.shape[1] for b in batches)
    pad = torch.nn.functional.pad

    def widen(b: ScoringBatch) -> ScoringBatch:
        seq, t = width - b.input_ids.shape[1], t_max - b.targets.shape[1]
        return ScoringBatch(
            pad(b.input_ids, (0, seq), value=pad_id),
            pad(b.attention_mask, (0, seq)),
            pad(b.positions, (0, t)),
            pad(b.targets, (0, t), value=pad_id),
            pad(b.response_mask, (0, t)),
            b.context_lengths,
        )

    wide = [widen(b) for b in batches]
    return ScoringBatch(*(torch.cat([getattr(b, f) for b in wide]) for f in ScoringBatch.__dataclass_fields__))


def build_batch(
    contexts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    masks: Sequence[Sequence[bool] | None] | None = None,
    device: torch.device | str = "cpu",
) -> ScoringBatch:
    """``masks[i]`` (optional, per completion token) marks the tokens the loss covers: a multi-turn episode's policy
    tokens, never its teacher-forced observations. None = every completion token. ``device``: where the batch lives,
    the scoring model's (its masks meet the log-probs in the loss): built on the host, copied there once."""
    lengths = [len(c) + len(y) for c, y in zip(contexts, completions, strict=True)]
    width = max(lengths)
    t_max = max(1, max(len(y) for y in completions))
    # built as lists and made tensors once: a tensor write per row was most of the cost of a many-row batch
    ids, attn, positions, targets, mask = [], [], [], [], []
    for i, (c, y) in enumerate(zip(contexts, completions, strict=True)):
        seq, k, t = [*c, *y], len(c), len(y)
        ids.append(seq + [pad_id] * (width - len(seq)))
        attn.append([1] * len(seq) + [0] * (width - len(seq)))
        positions.append(list(range(k - 1, k - 1 + t)) + [0] * (t_max - t))
        targets.append(list(y) + [pad_id] * (t_max - t))
        own = masks[i] if masks is not None else None
        mask.append(([1.0] * t if own is None else [float(m) for m in own]) + [0.0] * (t_max - t))
    long = torch.long
    return ScoringBatch(
        torch.tensor(ids, dtype=long, device=device),
        torch.tensor(attn, dtype=long, device=device),
        torch.tensor(positions, dtype=long, device=device),
        torch.tensor(targets, dtype=long, device=device),
        torch.tensor(mask, dtype=torch.float32, device=device),
        torch.tensor([len(c) for c in contexts], dtype=long, device=device),
    )


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
    """The rows of a :class:`ScoringBatch` without their padding, for one forward pass (``model.padding_free``).

    Rows scored under the same context form a unit laid out as the context once, then each row's completion; units
    are packed side by side into ``bins`` rows (first-fit, longest first). The attention mask lets a completion token
    see its context and its own earlier tokens only, and gives it the position it has in its own row, so each row's
    log-probs are those of its padded row, up to float rounding; the context's gradient is the sum of its rows'."""

    input_ids: torch.Tensor
    """(bins, width) the units' tokens; a bin's tail that no unit fills holds id 0 (it sees itself only, and no
    output of it is read)."""
    position_ids: torch.Tensor
    """(bins, width) each token's position in its own row (a completion continues its context's positions)."""
    attention_mask: torch.Tensor | None
    """(bins, 1, width, width) bool, True where query token q may attend to key token k; None for a flat packing
    (its rows are told apart by their positions alone)."""
    index: torch.Tensor
    """(batch, seq) where position p of row i sits in the flattened (bins * width) layout (0 past the row's end)."""


def _unit_size(rows: list[int], lengths: list[int], contexts: list[int]) -> int:
    """Tokens of a unit: the rows' shared context once, then each row's completion."""
    return contexts[rows[0]] + sum(lengths[i] - contexts[i] for i in rows)


def _plan(
    lengths: list[int], contexts: list[int], groups: list[list[int]], max_unit: int
) -> tuple[list[list[int]], list[list[int]], int]:
    """(units, the units of each bin, the bin width): ``groups`` (rows sharing a context) cut into units
    of at most ``max_unit`` tokens (or one row, if that is longer), packed first-fit, longest first."""
    units: list[list[int]] = []
    for rows in groups:
        size = max_unit + 1  # the group's first row starts a unit
        for i in rows:
            extra = lengths[i] - contexts[i]
            if size + extra > max_unit:
                units.append([])
                size = contexts[i]
            units[-1].append(i)
            size += extra
    sizes = [_unit_size(u, lengths, contexts) for u in units]
    width = max(sizes, default=1)
    bins: list[list[int]] = []
    free: list[int] = []
    for u in sorted(range(len(units)), key=lambda u: -sizes[u]):
        b = next((b for b, room in enumerate(free) if room >= sizes[u]), None)
        if b is None:
            bins.append([])
            free.append(width)
            b = len(bins) - 1
        bins[b].append(u)
        free[b] -= sizes[u]
    return units, bins, width


def pack_rows(batch: ScoringBatch, hidden_size: int, flat: bool = False) -> PackedRows:
    """``batch``'s rows packed without padding, rows with the same context sharing one copy of it; with ``flat``,
    every row whole, one after another in a single row, its positions restarting at 0 (the layout flash attention's
    variable-length path reads from ``position_ids`` alone, which transformers takes from a batch of one row only).

    A unit of rows sharing a context saves the context's repeats but widens the bins, and a bin's attention costs its
    width squared: of units capped at 1, 2, 4, ... times the batch's width (up to a whole group each), the packing
    taken is the one with the least estimated cost, ``bins * width * (1 + width / (6 * hidden_size))`` (a Llama
    block's projections cost ~24 hidden^2 flops a token, its attention ~4 hidden per token it attends to).

    The layout is planned on the host (the batch's ids read back once) and its tensors made on the batch's device."""
    lengths = batch.attention_mask.sum(1).tolist()
    contexts = batch.context_lengths.tolist()
    n, seq = batch.input_ids.shape
    rows_ids = batch.input_ids.tolist()
    if flat:
        units, bins, width = [[i] for i in range(n)], [list(range(n))], sum(lengths)
    else:
        by_context: dict[tuple[int, ...], list[int]] = {}
        for i in range(n):
            by_context.setdefault(tuple(rows_ids[i][: contexts[i]]), []).append(i)
        groups = list(by_context.values())
        largest = max((_unit_size(g, lengths, contexts) for g in groups), default=1)
        plans, cap = [], max(1, seq)
        while True:
            plans.append(_plan(lengths, contexts, groups, cap))
            if cap >= largest:
                break
            cap *= 2

        def cost(plan: tuple[list[list[int]], list[list[int]], int]) -> float:
            bins, width = len(plan[1]), plan[2]
            return bins * width * (1 + width / (6 * hidden_size))

        units, bins, width = min(plans, key=cost)
    # the layout as flat lists, made tensors once (a tensor write per row was most of a call's time)
    ids: list[int] = []
    positions: list[int] = []
    unit_of: list[int] = []  # which unit a slot holds (tails: -1 - bin)
    row_of: list[int] = []  # which row's completion (-1: a context, a tail)
    index = [[0] * seq for _ in range(n)]
    for b, bin_units in enumerate(bins):
        at = b * width
        for u in bin_units:
            rows = units[u]
            c = contexts[rows[0]]
            ids += rows_ids[rows[0]][:c]
            positions += range(c)
            unit_of += [u] * c
            row_of += [-1] * c
            context_at = at
            at += c
            for i in rows:
                k = lengths[i] - c
                ids += rows_ids[i][c : lengths[i]]
                positions += range(c, lengths[i])
                unit_of += [u] * k
                row_of += [i] * k
                index[i][:c] = range(context_at, context_at + c)
                index[i][c : lengths[i]] = range(at, at + k)
                at += k
        tail = (b + 1) * width - at
        ids += [0] * tail
        positions += range(tail)
        unit_of += [-1 - b] * tail
        row_of += [-1] * tail
    shape, dev = (len(bins), width), batch.input_ids.device
    ids_t = torch.tensor(ids, dtype=torch.long, device=dev).view(shape)
    positions_t = torch.tensor(positions, dtype=torch.long, device=dev).view(shape)
    index_t = torch.tensor(index, dtype=torch.long, device=dev).view(n, seq)
    if flat:  # no (width x width) mask: a flat packing's width is every token of the batch
        return PackedRows(ids_t, positions_t, None, index_t)
    unit = torch.tensor(unit_of, dtype=torch.long, device=dev).view(shape)
    row = torch.tensor(row_of, dtype=torch.long, device=dev).view(shape)
    causal = torch.ones(width, width, dtype=torch.bool, device=dev).tril()
    same_unit = unit[:, :, None] == unit[:, None, :]
    visible = (row[:, None, :] == -1) | (row[:, None, :] == row[:, :, None])
    return PackedRows(ids_t, positions_t, (causal & same_unit & visible)[:, None], index_t)


def _model_mask(model: PreTrainedModel, allowed: torch.Tensor) -> torch.Tensor:
    """The 4D mask ``allowed`` in the form the model's attention takes as is: boolean for SDPA, additive (0 where
    allowed, the dtype's minimum elsewhere) for eager attention."""
    if _attention(model) == "sdpa":
        return allowed
    dtype = next(model.parameters()).dtype
    additive = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return additive.masked_fill(~allowed, torch.finfo(dtype).min)


def _attention(model: PreTrainedModel) -> str:
    return str(getattr(model.config, "_attn_implementation", "sdpa"))


def packed_hidden(model: PreTrainedModel, batch: ScoringBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoder's last hidden states of ``batch``'s rows packed (``model.padding_free``), flattened to (bins *
    width, hidden), and the (batch, seq) index of each row's positions in them. SDPA and eager attention get the
    packing with shared contexts and its mask; other implementations (flash attention) the rows whole in one row and no
    mask."""
    dev = next(model.parameters()).device
    packed = pack_rows(batch, model.config.hidden_size, flat=_attention(model) not in ("sdpa", "eager"))
    allowed = packed.attention_mask
    hidden = model.get_decoder()(
        input_ids=packed.input_ids.to(dev),
        position_ids=packed.position_ids.to(dev),
        attention_mask=None if allowed is None else _model_mask(model, allowed.to(dev)),
        use_cache=False,
    ).last_hidden_state  # (bins, width, hidden)
    bins, width = packed.input_ids.shape
    compute.count_forward(compute.model_shape(model), bins, width, 0, 0, hidden.requires_grad)
    return hidden.reshape(-1, hidden.shape[-1]), packed.index.to(dev)


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

    ``padding_free`` (``model.padding_free``) runs the decoder on the rows packed without their padding, each context
    once (:func:`pack_rows`), instead of the right-padded batch, and the vocabulary head at the response positions
    only (an agent episode's observation tokens and every padding position hold 0): the same values there up to float
    rounding, on fewer tokens."""
    dev = next(model.parameters()).device
    lm_head = model.get_output_embeddings()
    banned = banned_mask(model, lm_head.weight.shape[0], dev)
    targets = batch.targets.to(dev)
    response_mask = batch.response_mask.to(dev)
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
        idx = batch.positions.to(dev)
        if padding_free:
            flat, index = packed_hidden(model, batch)
            live = response_mask > 0
            if not bool(live.any()):  # nothing to train on: every position, so the result stays in the graph
                live = torch.ones_like(live)
            at = live.nonzero(as_tuple=True)
            compute.count_forward(compute.model_shape(model), 0, 0, 0, at[0].numel(), flat.requires_grad)
            # (positions, hidden), in chunks of as many positions as a padded chunk holds
            lp, en = _head_logps(
                lm_head,
                flat[index.gather(1, idx)[at]],
                targets[at],
                temperature,
                banned,
                response_mask[at],
                chunk * targets.shape[0],
            )
            zeros = torch.zeros(targets.shape, dtype=lp.dtype, device=dev)
            return zeros.index_put(at, lp), zeros.index_put(at, en)
        hidden = model.get_decoder()(
            input_ids=batch.input_ids.to(dev), attention_mask=batch.attention_mask.to(dev), use_cache=False
        ).last_hidden_state  # (batch, seq, hidden)
        rows, seq = batch.input_ids.shape
        compute.count_forward(compute.model_shape(model), rows, seq, 0, idx.numel(), hidden.requires_grad)
        picked = hidden.gather(1, idx[..., None].expand(-1, -1, hidden.shape[-1]))  # (batch, T, hidden)
        return _head_logps(lm_head, picked, targets, temperature, banned, response_mask, chunk)


def _head_logps(
    lm_head: torch.nn.Module,
    picked: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    banned: torch.Tensor | None,
    response_mask: torch.Tensor,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_chunk_logps` of hidden states ``picked`` (..., positions, hidden) and their targets and mask (...,
    positions), ``chunk`` positions at a time (large ones checkpointed under grad), concatenated along the positions."""
    dim = targets.dim() - 1
    vocab = cast(torch.Tensor, lm_head.weight).shape[0]
    logps, ents = [], []
    for s in range(0, targets.shape[dim], chunk):
        h, t, m = (x.narrow(dim, s, min(chunk, targets.shape[dim] - s)) for x in (picked, targets, response_mask))
        if torch.is_grad_enabled() and t.numel() * vocab > CHECKPOINT_LOGITS:
            lp, en = checkpoint(_chunk_logps, lm_head, h, t, temperature, banned, m, use_reentrant=False)
        else:
            lp, en = _chunk_logps(lm_head, h, t, temperature, banned, m)
        logps.append(lp)
        ents.append(en)
    return torch.cat(logps, dim), torch.cat(ents, dim)


class Scorer:
    """How the update scores rows with the policy: at the sampler's ``temperature``, in ``dtype``, padded or packed
    without padding (``padding_free``), and whether a loss term's rows ride in a mini-batch's forward pass
    (:attr:`shares_passes`). The learner (sesa_cli.learner) scores every row of an update through it; its batches
    live on ``device``, the policy's."""

    def __init__(
        self,
        pad_id: int,
        temperature: float,
        dtype: str = "float32",
        padding_free: bool = False,
        device: torch.device | str = "cpu",
    ) -> None:
        self.pad_id = pad_id
        self.temperature = temperature
        self.dtype = dtype
        self.padding_free = padding_free
        self.device = torch.device(device)

    @property
    def shares_passes(self) -> bool:
        """Whether extra rows (a loss term's) join a mini-batch's forward pass: padding-free they only add their own
        tokens; padded, a solve prompt and one token would take the mini-batch's width, so they get a pass of their
        own."""
        return self.padding_free

    def batch(
        self,
        contexts: Sequence[Sequence[int]],
        completions: Sequence[Sequence[int]],
        masks: Sequence[Sequence[bool] | None] | None = None,
    ) -> ScoringBatch:
        """The rows as a :class:`ScoringBatch` (:func:`build_batch`) on the scorer's device."""
        return build_batch(contexts, completions, self.pad_id, masks, self.device)

    def __call__(self, model: PreTrainedModel, batch: ScoringBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(logps, entropies), each (batch, T), of ``batch`` under ``model`` (:func:`completion_logps`)."""
        return completion_logps(model, batch, self.temperature, dtype=self.dtype, padding_free=self.padding_free)

    def old_logps(
        self,
        model: PreTrainedModel,
        batch: ScoringBatch,
        behaviour: torch.Tensor,
        off_policy: torch.Tensor,
        *,
        several_updates: bool,
        weighted: bool,
    ) -> torch.Tensor | None:
        """(rows, T) log-probs of ``batch``'s rows under ``model`` as it is before the update, or None when nothing
        needs them (one update per batch without importance weights: each mini-batch's ratio is taken against its
        own detached log-probs, exactly 1).

        A row scored in the context that drew it (every row of parallel sampling or of ``loss_context=conditioned``,
        the ``sampler.parallel_rows`` rows, every sketch row) has the sampler's own log-probs ``behaviour`` (rows, T)
        as the old policy's (same weights, same tempered softmax), so in float32 the extra forward pass (no grad)
        runs on the ``off_policy`` (rows,) rows only. bf16 recomputes every row, as verl does."""
        if not (several_updates or weighted):
            return None
        if self.dtype != "float32":
            with torch.no_grad():
                return self(model, batch)[0]
        if not off_policy.any():
            return behaviour
        rows = off_policy.nonzero().flatten()
        out = behaviour.clone()
        with torch.no_grad():
            out[rows] = self(model, select_rows(batch, rows))[0]
        return out

    def minibatch(
        self,
        model: PreTrainedModel,
        sub: ScoringBatch,
        live: torch.Tensor | None,
        old_sub: torch.Tensor | None,
        extras: Sequence[ScoringBatch] = (),
    ) -> tuple[torch.Tensor, torch.Tensor | None, list[torch.Tensor]]:
        """(logps, entropies) of a mini-batch ``sub``, and the (rows, T_i) log-probs of each of ``extras``' rows,
        scored in the same forward pass (callers pass extras only when :attr:`shares_passes`). Rows where ``live``
        (rows,) is False skip the forward pass: their log-probs are the old ones (``old_sub``, or 0 when the ratio is
        taken against the result itself), so their ratio is exactly 1, and no entropies are returned. Callers pass
        ``live`` only when such rows add nothing to the gradient."""
        rows = None if live is None or bool(live.all()) else live.nonzero().flatten()
        n, width = sub.targets.shape if rows is None else (rows.numel(), sub.targets.shape[1])
        parts = [*([sub if rows is None else select_rows(sub, rows)] if n else []), *extras]
        if not parts:  # no live row and no extra row
            return _filler(sub, old_sub).requires_grad_(), None, []
        logps, ents = self(model, join_rows(parts, self.pad_id))
        extra_logps, at = [], n
        for extra in extras:
            extra_logps.append(logps[at : at + extra.targets.shape[0], : extra.targets.shape[1]])
            at += extra.targets.shape[0]
        if rows is None:
            return logps[:n, :width], ents[:n, :width], extra_logps
        if n == 0:
            return _filler(sub, old_sub).requires_grad_(), None, extra_logps
        return _filler(sub, old_sub).index_put((rows,), logps[:n, :width]), None, extra_logps


def _filler(sub: ScoringBatch, old_sub: torch.Tensor | None) -> torch.Tensor:
    """The log-probs of a mini-batch's skipped rows: the old ones, or 0 when the ratio is taken against the result
    itself."""
    return torch.zeros_like(sub.response_mask) if old_sub is None else old_sub.detach().clone()
