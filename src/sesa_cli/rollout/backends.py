"""Generation backends: the engine's only contact with the model. A backend owns a KV cache per session and runs one
chunk of tokens through the decoder; everything else (sampling, stops, cache continuation across ``extend`` and
``sample``, log-probs, entropies) lives in :mod:`sesa_cli.rollout.engine` and the samplers.

:class:`HFBackend` works for any causal ``transformers`` model: its own forward with a ``DynamicCache``. A backend
for another engine (vLLM, SGLang) implements the same four methods, ``new_state(batch)``,
``forward(state, ids, mask, position_ids) -> hidden``, ``logits(hidden)`` and ``select(state, rows)``, and registers in ``BACKENDS``.

Measured (issue #4): a hand-fused Llama decode path (preallocated KV buffer, fused q/k/v and gate/up projections)
ran within 0.95-1.2x of this backend on ``model=tiny``, and ``torch.compile`` of it was 2-3x slower (graph breaks
on the growing cache), so neither is here: at batch 8-64 the 1M-parameter model's decode step is bound by its
matmuls and a ~20-40 us per-op floor on this CPU, not by ``transformers``' Python overhead.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer


class Backend(Protocol):
    def new_state(self, batch: int) -> Any:
        """An empty KV cache for ``batch`` rows."""

    def forward(self, state: Any, ids: torch.Tensor, mask: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Append a chunk (batch, L) to the cache; ``mask`` marks real tokens (padding is never attended to later).
        Returns the final hidden states (batch, L, hidden)."""

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits from final hidden states."""

    def select(self, state: Any, rows: torch.Tensor) -> None:
        """Keep the cache rows ``rows`` (1-D ids, repeats allowed), in that order: row j becomes old row ``rows[j]``."""


# ------------------------------------------------------------------------------------------------------ generic
class _GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values live in a buffer that doubles when full, so appending a token writes
    one slot instead of copying the whole cache (``DynamicLayer`` concatenates). Measured (issue 20, one thread,
    ``model=tiny``): the concatenations were 38% of a decode step's op time at batch 8 after 100 tokens of context,
    and the step fell from 5.1 to 4.1 ms (batch 64: 14.6 to 10.9 ms) with the same log-probs. ``keys``/``values``
    are views of the buffer's filled part, which attention reads as they are."""

    key_buffer: torch.Tensor | None = None
    value_buffer: torch.Tensor | None = None
    length = 0

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[-2]
        if self.key_buffer is None or self.value_buffer is None or end > self.key_buffer.shape[-2]:
            shape = (*key_states.shape[:-2], max(2 * end, 64), key_states.shape[-1])
            keys, values = key_states.new_empty(shape), value_states.new_empty(shape)
            if self.key_buffer is not None and self.value_buffer is not None:
                keys[..., :start, :] = self.key_buffer[..., :start, :]
                values[..., :start, :] = self.value_buffer[..., :start, :]
            self.key_buffer, self.value_buffer = keys, values
        self.key_buffer[..., start:end, :] = key_states
        self.value_buffer[..., start:end, :] = value_states
        self.length = end
        self.keys, self.values = self.key_buffer[..., :end, :], self.value_buffer[..., :end, :]
        return self.keys, self.values

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.key_buffer is not None and self.value_buffer is not None:
            self.key_buffer = self.key_buffer.index_select(0, beam_idx)
            self.value_buffer = self.value_buffer.index_select(0, beam_idx)
            self.keys, self.values = self.key_buffer[..., : self.length, :], self.value_buffer[..., : self.length, :]


@dataclass
class _HFState:
    cache: DynamicCache
    attn_mask: torch.Tensor


class HFBackend:
    """Any causal LM through its own forward and a ``transformers`` DynamicCache."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        # transformers 5.24 renamed the decoder's ``past_key_values`` argument to ``cache`` and warns on the old name
        # (into the live view); older releases (>= 4.50 is supported) know only the old one.
        params = inspect.signature(self.decoder.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"

    def new_state(self, batch: int) -> _HFState:
        device = self.lm_head.weight.device
        cache = DynamicCache()
        cache.layer_class_to_replicate = _GrowingLayer  # the layers DynamicCache creates as the model asks for them
        return _HFState(cache, torch.zeros(batch, 0, dtype=torch.long, device=device))

    def forward(
        self, state: _HFState, ids: torch.Tensor, mask: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        state.attn_mask = torch.cat([state.attn_mask, mask], dim=1)
        out = self.decoder(
            input_ids=ids,
            attention_mask=state.attn_mask,
            position_ids=position_ids,
            use_cache=True,
            **{self.cache_arg: state.cache},
        )
        hidden: torch.Tensor = out.last_hidden_state
        return hidden

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.lm_head(hidden)
        return logits

    def select(self, state: _HFState, rows: torch.Tensor) -> None:
        # index_select on every layer's keys and values (beam search's own reorder; typed for torch's legacy LongTensor)
        state.cache.reorder_cache(cast(torch.LongTensor, rows))
        state.attn_mask = state.attn_mask[rows]


BACKENDS = {"hf": HFBackend}


def make_backend(model: PreTrainedModel, name: str = "hf") -> Backend:
    try:
        return BACKENDS[name](model)
    except KeyError:
        raise ValueError(f"unknown generation backend {name!r}; valid: {', '.join(BACKENDS)}") from None
