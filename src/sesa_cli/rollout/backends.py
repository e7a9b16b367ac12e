"""Generation backends: the engine's only contact with the model. A backend owns a KV cache per session and runs one
chunk of tokens through the decoder; everything else (sampling, stops, cache continuation across ``extend`` and
``sample``, log-probs, entropies) lives in :mod:`sesa_cli.rollout.engine` and the samplers.

:class:`HFBackend` works for any causal ``transformers`` model: its own forward with a ``DynamicCache``. A backend
for another engine (vLLM, SGLang) implements the same four methods, ``new_state(batch)``,
``forward(state, ids, mask, position_ids) -> hidden``, ``logits(hidden)`` and ``select(state, rows)``, and registers in ``BACKENDS``.
On such an engine they map onto its own cache: ``new_state`` opens ``batch`` sequences in its paged KV cache,
``forward`` appends a chunk of tokens to each (right-padded rows: the holes take no cache slot) and returns the last
layer's hidden states, ``logits`` applies the vocabulary head, and ``select`` forks and drops sequences (their blocks
shared copy-on-write, as for beam search or prefix caching). Sampling, the banned ids, the recorded log-probs and
entropies, stops and chains stay in the engine above, so every sampler runs unchanged on it.

Why sesa keeps its own engine rather than calling a serving engine's ``generate``: a sequential chain's row continues
its own KV cache (:meth:`sesa_cli.rollout.engine.Session.sample_chains`): item k+1 is drawn right after item k and the
text between them, on the same cache row, and each row starts its next item the moment its current one stops. Through
a request API every item would be a new request whose prompt is the whole growing chain (prefix caching saves
recomputing the cached blocks, not the scheduling of a new request per item), and the log-probs the loss compares
with would come from another pass. A backend at the level of these four methods keeps the chain on one cache; on a
GPU the parallel rows of GRPO are where a serving engine's batching would pay most.

Measured (docs/measurements.md, "Rollout cost"): a hand-fused Llama decode path (preallocated KV buffer, fused q/k/v and gate/up projections)
ran within 0.95-1.2x of this backend on ``model=tiny``, and ``torch.compile`` of it was 2-3x slower (graph breaks
on the growing cache), so neither is here: at batch 8-64 the 1M-parameter model's decode step is bound by its
matmuls and a ~20-40 us per-op floor on this CPU, not by ``transformers``' Python overhead. Measured again
(2026-11-27): :class:`LlamaBackend`'s pass compiled as a pure function (cache in, extended cache out, dynamic shapes) is one
graph and 0.61-0.64x the eager decode forward, but takes 12-36 s to compile per process, more than it saves in this
project's runs, and rounds differently (docs/measurements.md, "Inference mode for sampling").

Measured and not kept: cache layers that write each token into a buffer doubled when full, instead of
``DynamicCache``'s concatenation (same draws and log-probs). Paired runs, one thread: 64 rows x 24 tokens 1.11x the
time (attention reads the strided buffer slower than a contiguous cache, which costs what the concatenation saved),
chains of 8 items at batch 8 0.92x, SmolLM2-135M 8 rows x (218 + 32) tokens on two threads 0.98x: no clear gain.

:class:`LlamaBackend` (docs/measurements.md, "Time to result") runs a plain Llama decoder (``model=tiny``) with the same operations as
``transformers``' own Llama forward, in the same order, but as one function over the weights: no module calls,
output capturing, keyword plumbing or cache objects per layer, the padding mask built once per chunk. On
``model=tiny`` a decode forward at 8 rows took 0.74-0.77x the time of :class:`HFBackend`'s, at 64 rows
0.81-0.91x; its hidden states are bit for bit those of the model's own forward on this project's CPU (transformers
5.24), so every draw is the same (tests/test_engine.py compares the two; docs/measurements.md, "Time to result").
:func:`make_backend`'s ``auto`` takes it wherever :meth:`LlamaBackend.supports` the model, and :class:`HFBackend`
for every other model (grouped-query attention, LoRA, other architectures).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from transformers import DynamicCache, LlamaForCausalLM, PreTrainedModel


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


# ------------------------------------------------------------------------------------------------------- llama
@dataclass
class _LlamaState:
    keys: list[torch.Tensor] = field(default_factory=list)
    """Per layer (rows, heads, tokens, head_dim), as ``DynamicCache`` holds them."""
    values: list[torch.Tensor] = field(default_factory=list)
    attn_mask: torch.Tensor | None = None
    """(rows, tokens): 1 on real tokens, 0 on the holes of right-padded chunks."""


def _rms_norm(x: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    """``LlamaRMSNorm.forward``, op for op."""
    weight = cast(torch.Tensor, norm.weight)
    eps = cast(float, norm.variance_epsilon)
    dtype = x.dtype
    x = x.to(torch.float32)
    variance = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    return weight * x.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaBackend:
    """A plain Llama decoder (multi-head attention, default RoPE, SiLU MLP, SDPA, no adapters) as one function of
    its weights: ``transformers``' Llama forward op for op without its per-module plumbing (module docstring)."""

    def __init__(self, model: PreTrainedModel) -> None:
        if not self.supports(model):
            raise ValueError(f"{type(model).__name__} is not a plain Llama decoder; use the hf backend")
        self.model = model
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        attn = self.decoder.layers[0].self_attn
        self.head_dim: int = attn.head_dim
        self.scaling: float = attn.scaling
        self.rotary = self.decoder.rotary_emb

    @staticmethod
    def supports(model: PreTrainedModel) -> bool:
        """Whether ``model`` is a plain ``LlamaForCausalLM`` this backend computes exactly: SDPA attention without
        grouped keys or biases, the default RoPE, SiLU, and ``nn.Linear`` projections (LoRA wraps them)."""
        if type(model) is not LlamaForCausalLM:
            return False
        cfg = model.config
        rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        names = {"self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"), "mlp": ("gate_proj", "up_proj", "down_proj")}
        projections = [
            getattr(getattr(layer, part), name, None)
            for layer in model.get_decoder().layers
            for part, own in names.items()
            for name in own
        ]
        return (
            getattr(cfg, "_attn_implementation", None) == "sdpa"
            and cfg.num_key_value_heads == cfg.num_attention_heads
            and rope.get("rope_type", "default") == "default"
            and cfg.hidden_act == "silu"
            and not cfg.attention_bias
            and not cfg.mlp_bias
            and all(type(m) is torch.nn.Linear for m in projections)
        )

    def new_state(self, batch: int) -> _LlamaState:
        device = self.lm_head.weight.device
        return _LlamaState(attn_mask=torch.zeros(batch, 0, dtype=torch.long, device=device))

    def forward(
        self, state: _LlamaState, ids: torch.Tensor, mask: torch.Tensor, position_ids: torch.Tensor
    ) -> torch.Tensor:
        assert state.attn_mask is not None
        state.attn_mask = torch.cat([state.attn_mask, mask], dim=1)
        dec = self.decoder
        x = dec.embed_tokens(ids)
        rows, length = ids.shape
        past = state.keys[0].shape[2] if state.keys else 0
        sdpa_mask, is_causal = self._mask(state.attn_mask, length, past)
        cos, sin = self.rotary(x, position_ids)  # LlamaRotaryEmbedding's own forward: (rows, L, head_dim)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        shape = (rows, length, -1, self.head_dim)
        first = not state.keys
        for i, layer in enumerate(dec.layers):
            attn, mlp = layer.self_attn, layer.mlp
            residual = x
            h = _rms_norm(x, layer.input_layernorm)
            q = F.linear(h, attn.q_proj.weight).view(shape).transpose(1, 2)
            k = F.linear(h, attn.k_proj.weight).view(shape).transpose(1, 2)
            v = F.linear(h, attn.v_proj.weight).view(shape).transpose(1, 2)
            q = (q * cos) + (_rotate_half(q) * sin)
            k = (k * cos) + (_rotate_half(k) * sin)
            if first:
                state.keys.append(k)
                state.values.append(v)
            else:
                k = state.keys[i] = torch.cat([state.keys[i], k], dim=-2)
                v = state.values[i] = torch.cat([state.values[i], v], dim=-2)
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=sdpa_mask, dropout_p=0.0, scale=self.scaling, is_causal=is_causal
            )
            out = out.reshape(out.shape[0], -1, length, v.shape[-1]).transpose(1, 2).contiguous()
            out = F.linear(out.reshape(rows, length, -1).contiguous(), attn.o_proj.weight)
            x = residual + out
            residual = x
            h = _rms_norm(x, layer.post_attention_layernorm)
            h = F.linear(
                F.silu(F.linear(h, mlp.gate_proj.weight)) * F.linear(h, mlp.up_proj.weight), mlp.down_proj.weight
            )
            x = residual + h
        return _rms_norm(x, dec.norm)

    @staticmethod
    def _mask(attn_mask: torch.Tensor, length: int, past: int) -> tuple[torch.Tensor | None, bool]:
        """SDPA's boolean mask (rows, 1, L, past + L) of a chunk and its ``is_causal`` flag, as ``transformers``'
        ``sdpa_mask`` gives them: None when no token is padding and the chunk is one token or the whole sequence
        (then causal by the flag), else key j is visible to query i when it is a real token and j <= past + i."""
        real = attn_mask.bool()
        kv = past + length
        if (length == 1 or kv == length) and bool(real.all()):
            return None, length > 1
        keys = torch.arange(kv, device=attn_mask.device)
        queries = torch.arange(past, kv, device=attn_mask.device)
        causal = keys[None, :] <= queries[:, None]  # (L, kv)
        return real[:, None, None, :] & causal[None, None], False

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.lm_head(hidden)
        return logits

    def select(self, state: _LlamaState, rows: torch.Tensor) -> None:
        state.keys = [k.index_select(0, rows) for k in state.keys]
        state.values = [v.index_select(0, rows) for v in state.values]
        assert state.attn_mask is not None
        state.attn_mask = state.attn_mask[rows]


BACKENDS: dict[str, type[HFBackend | LlamaBackend]] = {"hf": HFBackend, "llama": LlamaBackend}


def make_backend(model: PreTrainedModel, name: str = "auto") -> Backend:
    """The backend ``name``; ``auto``: :class:`LlamaBackend` where it supports the model, else :class:`HFBackend`."""
    if name == "auto":
        name = "llama" if LlamaBackend.supports(model) else "hf"
    try:
        return BACKENDS[name](model)
    except KeyError:
        raise ValueError(f"unknown generation backend {name!r}; valid: auto, {', '.join(BACKENDS)}") from None
