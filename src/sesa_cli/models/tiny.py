"""``model=tiny``: a ~1M-parameter Llama built from config, a character tokenizer, and a cached warm start.

The warm start plays the role pretraining plays for an LLM: supervised next-token training on a
corpus the task generates (well-formed but unskilled answers, lists of distinct answers, sketch -> solution pairs).
The result is saved as a standard Hugging Face directory (safetensors), cached under ``model.cache_dir`` keyed by
the task's warm-start key and the model config, so every later run (and every sweep job) reuses it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import time
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from sesa_cli.config import ModelConfig
from sesa_cli.models.cache import build_once
from sesa_cli.progress import DISPLAY, activity
from sesa_cli.tasks.base import Task

log = logging.getLogger(__name__)

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>"}
_FORMAT_VERSION = 1  # bump when the corpus layout or training recipe changes, to invalidate caches


def build_char_tokenizer(alphabet: str) -> PreTrainedTokenizerFast:
    """One token per character of ``alphabet`` plus <pad> <bos> <eos> <unk> (ids 0..3); decodes without spaces."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    chars = sorted(set(alphabet))
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS.values())}
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)


def build_tiny_model(cfg: ModelConfig, tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config)


def cache_key(cfg: ModelConfig, task: Task) -> str:
    fields = {
        k: getattr(cfg, k)
        for k in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "max_position_embeddings",
            "warm_start_steps",
            "warm_start_batch_size",
            "warm_start_lr",
            "warm_start_corpus_size",
            "warm_start_block",
        )
    }
    # The tokenizer is built from the alphabet, so a base trained over another alphabet is never reused.
    key = {"model": fields, "task": task.warm_start_key(), "alphabet": task.alphabet(), "v": _FORMAT_VERSION}
    blob = json.dumps(key, sort_keys=True)
    return f"tiny-{task.name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def tiny_base_dir(cfg: ModelConfig, task: Task) -> Path:
    """The cached warm-started base for (task, model config), built on first use (safe under parallel jobs)."""
    target = Path(cfg.cache_dir).expanduser() / cache_key(cfg, task)
    built: list[dict[str, Any]] = []
    path = build_once(target, "warm_start.json", lambda tmp: built.append(warm_start(cfg, task, tmp)))
    if built:  # named once it is in the cache (the build wrote a temporary dir)
        log.info("warm start done in %.1fs, final loss %.3f -> %s", built[0]["seconds"], built[0]["final_loss"], path)
    return path


def _pack_corpus(tokenizer: PreTrainedTokenizerFast, lines: list[str], block: int) -> torch.Tensor:
    """Concatenate ``<bos> line`` for every line and cut the stream into (n_blocks, block) rows.

    Packing (as in LM pretraining) wastes no compute on padding; a block may start mid-line, which only adds a
    little context noise. No <eos>: answers end with the task's stop character and generation is always cut by the
    engine, so the model never learns to end a list on its own (an early <eos> would be a wasted rollout).
    """
    stream: list[int] = []
    for line in lines:
        stream.append(tokenizer.bos_token_id)
        stream.extend(tokenizer(line, add_special_tokens=False)["input_ids"])
    n = max(1, len(stream) // block)
    stream += [tokenizer.bos_token_id] * max(0, n * block - len(stream))
    return torch.tensor(stream[: n * block]).view(n, block)


def warm_start(cfg: ModelConfig, task: Task, out_dir: Path) -> dict[str, Any]:
    """Train a fresh tiny model on the task's corpus and save it (model, tokenizer, warm_start.json) to out_dir;
    returns what warm_start.json holds."""
    t0 = time.perf_counter()
    tokenizer = build_char_tokenizer(task.alphabet())
    model = build_tiny_model(cfg, tokenizer)
    rng = random.Random(f"warm-start-{task.name}")
    lines = task.warm_start_corpus(rng, cfg.warm_start_corpus_size)
    block = min(cfg.warm_start_block, cfg.max_position_embeddings)
    data = _pack_corpus(tokenizer, lines, block)
    n_params = sum(p.numel() for p in model.parameters())
    log.info(
        "warm start: %s params, %d corpus lines in %d blocks of %d tokens, %d steps of %d blocks",
        f"{n_params:,}",
        len(lines),
        len(data),
        block,
        cfg.warm_start_steps,
        cfg.warm_start_batch_size,
    )

    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warm_start_lr, weight_decay=0.01, betas=(0.9, 0.98))
    steps = cfg.warm_start_steps

    def lr_at(step: int) -> float:
        warm = max(1, steps // 20)
        if step < warm:
            return (step + 1) / warm
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    gen = torch.Generator().manual_seed(0)
    losses: list[float] = []
    model.train()
    with activity(f"warm start ({task.name})", total=steps, done=None) as act:
        for step in range(steps):
            ids = data[torch.randint(len(data), (cfg.warm_start_batch_size,), generator=gen)]
            loss = model(input_ids=ids, labels=ids).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            DISPLAY.update(act, completed=step + 1, info=f"loss {sum(losses[-20:]) / len(losses[-20:]):.3f}")
    model.eval()
    out_dir.mkdir(parents=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    info: dict[str, Any] = {
        "task": task.warm_start_key(),
        "params": n_params,
        "steps": steps,
        "final_loss": sum(losses[-20:]) / max(1, len(losses[-20:])),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out_dir / "warm_start.json").write_text(json.dumps(info, indent=2))
    return info
