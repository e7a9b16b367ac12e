"""Which token ids end an answer, and which the policy is never allowed to sample (one home for both rules).

Special tokens that only frame text (BOS, PAD, UNK) must never be sampled. Measured why: the tiny model's
warm-start lines are separated by BOS, so it learned to end a list with BOS and start a new line; on the path task
15% of the sketches in a chain of 8 held a BOS, after which the chain's "history" was a new line. Masking them (with
the stop after a cut sketch and the task's sketch budget) took distinct valid regions per chain of 8 from 3.1 to 5.3
at the base (seeds 0-4; the table is in docs/samplers.md). A token that is also a stop id is
never banned: some real tokenizers use one id for PAD and EOS (SmolLM2's base tokenizer uses ``<|endoftext|>`` for
BOS, EOS, UNK and PAD), and banning it would make answers unable to end.

The banned ids are stored on the model as ``generation_config.suppress_tokens``, Hugging Face's own field for "never
generate these" (``model.generate`` honours it too), so that every consumer of the model agrees without passing them
around: the rollout engine masks their logits before sampling and the scoring pass
(:func:`sesa_cli.rollout.scoring.completion_logps`) masks the same logits, so the log-probs a sampler records equal
a scoring pass of the same context. :func:`sesa_cli.models.loading.load_base` and ``load_checkpoint`` set them for
the task the policy is loaded for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from sesa_cli.config import ConfigError

if TYPE_CHECKING:
    from sesa_cli.models.policy import Policy
    from sesa_cli.tasks.base import Task


def stop_ids_for(policy: Policy, task: Task) -> list[int]:
    """Token ids that end an answer: the task's stop character (if it is one token) and EOS."""
    ids = policy.encode(task.stop) if task.stop else []
    stops = [ids[0]] if len(ids) == 1 else []
    eos = policy.tokenizer.eos_token_id
    if eos is not None:
        stops.append(int(eos))
    if not stops:
        raise ConfigError(f"task {task.name!r}: stop {task.stop!r} is not a single token and the tokenizer has no EOS")
    return stops


def banned_ids(tokenizer: Any, stop_ids: Sequence[int]) -> list[int]:
    """The ids never sampled: the tokenizer's BOS, PAD and UNK (those it has), minus every stop id; sorted."""
    ids = {getattr(tokenizer, f"{name}_token_id", None) for name in ("bos", "pad", "unk")}
    return sorted({int(i) for i in ids if i is not None} - {int(s) for s in stop_ids})


def suppress_special_tokens(policy: Policy, task: Task) -> list[int]:
    """Store :func:`banned_ids` for ``task`` on ``policy.model`` (``generation_config.suppress_tokens``); return them."""
    ids = banned_ids(policy.tokenizer, stop_ids_for(policy, task))
    config = getattr(policy.model, "generation_config", None)
    if config is None:
        raise ConfigError(f"{type(policy.model).__name__} has no generation_config to hold the banned token ids")
    config.suppress_tokens = ids or None
    return ids


def suppressed_ids(model: Any) -> list[int]:
    """The ids ``model`` never samples (``generation_config.suppress_tokens``; none when unset)."""
    config = getattr(model, "generation_config", None)
    return [int(i) for i in (getattr(config, "suppress_tokens", None) or [])]


def banned_mask(model: Any, vocab: int, device: torch.device) -> torch.Tensor | None:
    """(vocab,) bool, True on the ids ``model`` never samples; None when there are none (the common fast path)."""
    ids = [i for i in suppressed_ids(model) if 0 <= i < vocab]
    if not ids:
        return None
    mask = torch.zeros(vocab, dtype=torch.bool, device=device)
    mask[ids] = True
    return mask


def masked_logps(logits: torch.Tensor, banned: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, entropy) of ``logits`` (..., vocab) with the ``banned`` ids removed from the distribution.

    Banned ids get log-prob -inf; the entropy (nats, shape ``logits.shape[:-1]``) counts only the others, so it stays
    finite (0 * -inf would be NaN) and its gradient too.
    """
    if banned is not None:
        logits = logits.masked_fill(banned, float("-inf"))
    logp_all = torch.log_softmax(logits, dim=-1)
    finite = logp_all if banned is None else logp_all.masked_fill(banned, 0.0)
    entropy = -(logp_all.exp() * finite).sum(-1)
    return logp_all, entropy
