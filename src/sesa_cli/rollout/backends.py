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

Measured and not kept (issue 20): cache layers that write each token into a buffer doubled when full, instead of
``DynamicCache``'s concatenation (same draws and log-probs). Paired runs, one thread: 64 rows x 24 tokens 1.11x the
time (attention reads the strided buffer slower than a contiguous cache, which costs what the concatenation saved),
chains of 8 items at batch 8 0.92x, SmolLM2-135M 8 rows x (218 + 32) tokens on two threads 0.98x: no clear gain.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch
from transformers import DynamicCache, PreTrainedModel


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
        return _HFState(DynamicCache(), torch.zeros(batch, 0, dtype=torch.long, device=device))

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
