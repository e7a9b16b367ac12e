"""``model=tiny``: a ~1M-parameter Llama built from config, a tokenizer over the task's words, and a cached warm start.

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
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from sesa_cli.config import ModelConfig
from sesa_cli.cpus import free_cores
from sesa_cli.models.cache import build_once
from sesa_cli.progress import DISPLAY, activity
from sesa_cli.tasks.base import Task

log = logging.getLogger(__name__)

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>"}
_FORMAT_VERSION = 5  # bump when the corpus layout or training recipe changes, to invalidate caches


def build_tokenizer(tokens: Iterable[str]) -> PreTrainedTokenizerFast:
    """<pad> <bos> <eos> <unk> (ids 0..3), then one id per string of ``tokens`` in their order (repeats dropped);
    decodes without spaces.

    Text is cut greedily: at each position the longest multi-character token that matches, else one character (a
    character that is no token is <unk>). With single characters only this is the character-level tokenizer.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS.values())}
    for token in tokens:
        vocab.setdefault(token, len(vocab))
    words = sorted((t for t in vocab if len(t) > 1 and t not in SPECIAL_TOKENS.values()), key=lambda t: (-len(t), t))
    # longest first: an alternation takes its first branch that matches
    pattern = "".join(f"{re.escape(word)}|" for word in words) + r"[\s\S]"
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)


def tiny_tokens(cfg: ModelConfig, task: Task, corpus: Sequence[str]) -> list[str]:
    """The tiny model's tokens: ``model.tokenizer=words`` the task's vocabulary over its warm-start ``corpus``
    (``Task.vocabulary``), ``chars`` the characters of its alphabet."""
    if cfg.tokenizer == "words":
        return task.vocabulary(corpus)
    return sorted(set(task.alphabet()))


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


MODEL_FIELDS = (
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
    "tokenizer",
)
"""The model fields a warm-started base depends on (its cache key, and what its warm_start.json records)."""


def built_for(cfg: ModelConfig, task: Task) -> dict[str, Any]:
    """What a warm-started base is built from: the model fields, the task's warm-start key and alphabet, the format.
    The tokenizer is built from the alphabet (and, for words, from the corpus the warm-start key fixes), so a base
    trained over another vocabulary is never reused."""
    fields = {k: getattr(cfg, k) for k in MODEL_FIELDS}
    return {"model": fields, "task": task.warm_start_key(), "alphabet": task.alphabet(), "v": _FORMAT_VERSION}


def cache_key(cfg: ModelConfig, task: Task) -> str:
    blob = json.dumps(built_for(cfg, task), sort_keys=True)
    return f"tiny-{task.name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def _differences(found: dict[str, Any], wanted: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for name, value in wanted.items():
        if isinstance(value, dict) and isinstance(found.get(name), dict):
            out += _differences(found[name], value, f"{prefix}{name}.")
        elif found.get(name, value) != value:  # a key an older warm_start.json did not record is not compared
            out.append(f"{prefix}{name}: {found[name]} -> {value}")
    return out


def base_matches(cfg: ModelConfig, task: Task) -> Callable[[Path, dict[str, Any]], str | None]:
    """The check a cached base passes before it is used (sesa_cli.models.cache): its warm_start.json's record of
    what it was built for (``built_for``; a base built before it was recorded: its task key, tokenizer and steps)
    and its config.json's shape are this run's, and its model has an embedding per token of its tokenizer."""
    wanted = json.loads(json.dumps(built_for(cfg, task)))  # as read back from JSON (tuples are lists there)
    shape = {"hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_layers,
             "num_attention_heads": cfg.num_heads, "intermediate_size": cfg.intermediate_size,
             "max_position_embeddings": cfg.max_position_embeddings}  # fmt: skip

    def matches(path: Path, record: dict[str, Any]) -> str | None:
        from sesa_cli.runs import read_json_object

        recorded = record.get("built_for")
        if isinstance(recorded, dict):
            found = _differences(recorded, wanted)
        else:
            legacy = {"task": wanted["task"], "tokenizer": cfg.tokenizer, "steps": cfg.warm_start_steps}
            found = _differences({k: record[k] for k in legacy if k in record}, legacy)
            if "task" not in record or "tokenizer" not in record:
                found.append("warm_start.json records no task or tokenizer")
        config = read_json_object(path / "config.json")
        found += _differences({k: config[k] for k in shape if k in config}, shape)
        vocabulary = record.get("vocabulary")
        if isinstance(vocabulary, int) and config.get("vocab_size") != vocabulary:
            found.append(f"vocab_size: {config.get('vocab_size')} -> {vocabulary} (its warm_start.json)")
        return ", ".join(found[:3]) or None

    return matches


def tiny_base_dir(cfg: ModelConfig, task: Task) -> Path:
    """The cached warm-started base for (task, model config), built on first use (safe under parallel jobs; a
    damaged one is built again, one built for another config refused: sesa_cli.models.cache)."""
    target = Path(cfg.cache_dir).expanduser() / cache_key(cfg, task)
    built: list[dict[str, Any]] = []

    def build(tmp: Path) -> None:
        built.append(warm_start(cfg, task, tmp))

    path = build_once(target, "warm_start.json", build, matches=base_matches(cfg, task))
    if built:  # named once it is in the cache (the build wrote a temporary dir)
        log.info("warm start done in %.1fs, final loss %.3f -> %s", built[0]["seconds"], built[0]["final_loss"], path)
    return path


@dataclass
class PackedLines:
    """Corpus lines packed into rows, each line ``<bos> line`` from position 0 and attending to itself only."""

    ids: torch.Tensor
    """(rows, block) token ids; a row's tail that no line fills is <pad>."""
    labels: torch.Tensor
    """(rows, block) the ids, -100 on padding (no loss there)."""
    position_ids: torch.Tensor
    """(rows, block) each line's positions 0, 1, ...: a restart marks where a line begins, and the model's attention
    mask (transformers' packed-sequence mask, built from the restarts when no attention mask is passed) keeps every
    line from attending to the lines before it in the row."""


def pack_lines(tokenizer: PreTrainedTokenizerFast, lines: Sequence[str], block: int) -> PackedLines:
    """Every line as ``<bos> line`` (cut at ``block`` tokens), packed in their order into rows of ``block`` tokens; a
    line that does not fit a row's rest starts the next row.

    Each line starts at position 0 and sees no other line, exactly as a rollout's prompt starts. Packed blocks whose
    lines saw the lines before them (the stream cut at ``block``, most lines starting mid-block) taught the model a
    context it is never sampled in: a path base put 0.70 on a hinted prompt's region after another line and 0.04 at
    the start of a row. No <eos>: answers end with the task's stop and generation is always cut by the engine, so the
    model never learns to end a list on its own (an early <eos> would be a wasted rollout).
    """
    bos, pad = int(tokenizer.bos_token_id), int(tokenizer.pad_token_id)
    rows: list[list[list[int]]] = [[]]
    used = 0
    for line in lines:
        encoded = [bos, *tokenizer(line, add_special_tokens=False)["input_ids"]][:block]
        if used + len(encoded) > block:
            rows.append([])
            used = 0
        rows[-1].append(encoded)
        used += len(encoded)
    cpu = torch.device("cpu")  # the warm start runs on the CPU whatever the run's device: one cached base for all
    ids = torch.full((len(rows), block), pad, dtype=torch.long, device=cpu)
    labels = torch.full((len(rows), block), -100, dtype=torch.long, device=cpu)
    positions = torch.zeros((len(rows), block), dtype=torch.long, device=cpu)
    for r, row in enumerate(rows):
        at = 0
        for line_ids in row:
            n = len(line_ids)
            ids[r, at : at + n] = torch.tensor(line_ids, device=cpu)
            labels[r, at : at + n] = ids[r, at : at + n]
            positions[r, at : at + n] = torch.arange(n, device=cpu)
            at += n
        # the padding continues the last line's positions: it comes after that line (causal), so no line sees it
        last = len(row[-1]) if row else 0
        positions[r, at:] = torch.arange(last, last + block - at, device=cpu)
    return PackedLines(ids, labels, positions)


def warm_start(cfg: ModelConfig, task: Task, out_dir: Path) -> dict[str, Any]:
    """Train a fresh tiny model on the task's corpus and save it (model, tokenizer, warm_start.json) to out_dir;
    returns what warm_start.json holds.

    It runs on every core other work leaves free (:func:`sesa_cli.cpus.free_cores`), whatever the command's
    ``threads``, which is restored after: its steps are large matrix products (8 rows x 256 tokens), which a second
    thread speeds 1.85x, and on this project's CPU the base it writes is bit for bit the one-thread base (the same
    sha256 of model.safetensors, 400 FrozenLake steps on one and on two threads; docs/measurements.md,
    "Threads"), so runs read the same
    base whatever the count it was built with. The count is taken again every :data:`RECOUNT_STEPS` steps: the jobs
    of a sweep start together, and the ones that then wait for this base (its file lock) free their cores a few
    seconds into the build, which a count taken once at its start would leave idle for all of it."""
    threads = torch.get_num_threads()

    def recount() -> int:
        torch.set_num_threads(max(threads, free_cores()[0]))
        return torch.get_num_threads()

    try:
        return _warm_start(cfg, task, out_dir, recount)
    finally:
        torch.set_num_threads(threads)


RECOUNT_STEPS = 25
"""The warm start takes the count of free cores again every this many steps (:func:`warm_start`)."""


def _warm_start(cfg: ModelConfig, task: Task, out_dir: Path, recount: Callable[[], int]) -> dict[str, Any]:
    t0 = time.perf_counter()
    rng = random.Random(f"warm-start-{task.name}")
    lines = task.warm_start_corpus(rng, cfg.warm_start_corpus_size)
    tokenizer = build_tokenizer(tiny_tokens(cfg, task, lines))
    model = build_tiny_model(cfg, tokenizer)
    block = min(cfg.warm_start_block, cfg.max_position_embeddings)
    data = pack_lines(tokenizer, lines, block)
    n_tokens = int((data.labels != -100).sum())
    n_params = sum(p.numel() for p in model.parameters())
    count = recount()
    log.info(
        "warm start: %s params, %d tokens (%s), %d corpus lines (%s tokens) in %d rows of %d, %d steps of %d rows "
        "on %d torch threads (the free cores, counted again every %d steps)",
        f"{n_params:,}",
        len(tokenizer),
        cfg.tokenizer,
        len(lines),
        f"{n_tokens:,}",
        len(data.ids),
        block,
        cfg.warm_start_steps,
        cfg.warm_start_batch_size,
        count,
        RECOUNT_STEPS,
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
    used: dict[int, int] = {}  # thread count -> steps run on it
    model.train()
    with activity(f"warm start ({task.name})", total=steps, done=None) as act:
        for step in range(steps):
            if step and step % RECOUNT_STEPS == 0:
                count = recount()
            used[count] = used.get(count, 0) + 1
            rows = torch.randint(len(data.ids), (cfg.warm_start_batch_size,), generator=gen, device="cpu")
            # use_cache=False: transformers builds the packed-sequence mask only for a forward without a cache
            out = model(
                input_ids=data.ids[rows],
                position_ids=data.position_ids[rows],
                labels=data.labels[rows],
                use_cache=False,
            )
            loss = out.loss
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
        "built_for": built_for(cfg, task),  # what a later run checks before it uses this base (base_matches)
        "task": task.warm_start_key(),
        "params": n_params,
        "tokenizer": cfg.tokenizer,
        "vocabulary": len(tokenizer),
        "corpus_tokens": n_tokens,
        "steps": steps,
        "torch_threads": max(used, default=count),  # the largest count it ran on
        "torch_threads_steps": {str(n): k for n, k in sorted(used.items())},  # steps run on each count
        "final_loss": sum(losses[-20:]) / max(1, len(losses[-20:])),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out_dir / "warm_start.json").write_text(json.dumps(info, indent=2))
    return info
