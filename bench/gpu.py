"""GPU bench (issue 54): `python bench/gpu.py [--out DIR] [--page docs/measurements.md]`, or `--smoke` on a CPU.

Three parts, each in its own try (a part that fails prints its error's first line in its row and the others still run):

  (a) sesa's rollout engine (sesa_cli/rollout/engine.py, the backend ``auto`` picks) against Hugging Face
      ``model.generate`` on the same random-weight bfloat16 model, prompts and sampling settings (temperature 1, no
      top-k or top-p, every row forced to ``--new-tokens`` tokens), at 64, 256 and 1024 rows of distinct
      ``--prompt-tokens``-token prompts, on a SmolLM2-135M-shaped and a Qwen2.5-0.5B-shaped Llama (tied embeddings;
      Qwen's q/k/v biases left out). Prefill and decode apart: the engine's prefill is ``Engine.start`` and its decode
      ``Session.sample``; ``generate``'s prefill is a call for one new token and its decode the difference to a call
      for all of them, per token (the same tokens both ways). Beside each figure the physical limit and the measured
      share of it: decode is bound by the bytes a step reads (every weight once, and each row's key/value cache) at
      4.3 TB/s, or by its matrix products at 790 TFLOP/s where they take longer (1024 rows of the Qwen shape); prefill
      by its matrix products (the decoder's on every prompt token, the causal attention's, the vocabulary head's at the
      last) at 790 TFLOP/s. Both ceilings were measured on this workplace's H200s (KINDS.md). Peak GPU memory of each
      side's call. Medians of ``--repeats`` after a warm-up round.
  (b) one ``sesa train`` step (sampling, scoring and update) on each shape, parallel (8 prompts x 8 rollouts) and
      sequential (stage1=solution: 8 chains of 8 items), countdown prompts, 64 new tokens an item: ``sesa train
      device=cuda model.path=...`` through the Python API on a random-weight model saved with a tokenizer of single
      characters of the shape's vocabulary size; ``time/step_s`` (and its sampling and update parts) from
      metrics.jsonl, median over the steps after the first. Random weights draw no reward, and rows of zero advantage
      skip the update, so ``algo.entropy_coef=0.001`` keeps every row in the forward and backward pass a real batch
      would have.
  (c) the default ``sesa train device=cuda`` end to end from an empty cache, in a subprocess: wall time, exit code and
      the final ``eval/success`` (the warm start runs on the CPU, as on every device).

Prints a table; writes gpu.json and gpu.md under ``--out``, and with ``--page`` (on a GPU only) the ``bench:gpu``
block of docs/measurements.md. ``--smoke`` runs all of it on the CPU at tiny sizes (tests/test_bench_gpu.py), so the
script cannot rot between GPU sessions; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from docs_block import write_block
from transformers import LlamaConfig, LlamaForCausalLM

from sesa_cli.devices import kv_bytes_per_token
from sesa_cli.models.tiny import build_tokenizer
from sesa_cli.rollout.engine import Engine, SamplingParams

HBM_BYTES_S = 4.3e12
"""H200 device-to-device copy, bytes read + written per second (KINDS.md, measured 2026-10-28 and 2026-11-04)."""
BF16_FLOP_S = 790e12
"""H200 bf16 8192^3 matrix product on random data, FLOP/s (KINDS.md: 769-798 measured)."""

SHAPES: dict[str, dict[str, int]] = {
    "SmolLM2-135M": {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                     "intermediate_size": 1536, "vocab_size": 49152},
    "Qwen2.5-0.5B": {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                     "intermediate_size": 4864, "vocab_size": 151936},
}  # fmt: skip
SMOKE_SHAPES: dict[str, dict[str, int]] = {
    name: {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 128, "vocab_size": 256}
    for name in SHAPES
}  # fmt: skip
MODEL_CONFIGS = {"SmolLM2-135M": "model=smollm2-135m", "Qwen2.5-0.5B": "model=qwen2.5-0.5b-instruct"}
"""The config whose settings each shape's train step runs with (chat prompts, padding-free scoring, gradient
checkpointing), its weights replaced by ``model.path``."""
TRAIN = ["task=countdown", "model.dtype=bfloat16", "train.batch_size=8", "sampler.group_size=8",
         "task.max_new_tokens=64", "algo.entropy_coef=0.001", "eval.instances=2", "eval.samples=4",
         "train.eval_before=false", "train.eval_every=0", "train.checkpoint_every=0", "train.sample_every=0",
         "train.policy_every=0"]  # fmt: skip
SMOKE_TRAIN = ["train.batch_size=2", "sampler.group_size=2", "task.max_new_tokens=4"]
SAMPLERS = {
    "parallel": ["sampler=parallel"],
    "sequential": ["sampler=sequential", "sampler.stage1=solution", "sampler.parallel_rows=0"],
}
SMOKE_DEFAULT = ["model.warm_start_steps=4", "model.warm_start_corpus_size=200", "train.steps=1", "eval.samples=2",
                 "eval.instances=1", "train.eval_before=false", "train.checkpoint_every=0",
                 "train.sample_every=0"]  # fmt: skip


def random_model(shape: dict[str, int], device: str, dtype: torch.dtype, positions: int) -> LlamaForCausalLM:
    """A Llama of ``shape`` with random weights (speed does not depend on them), tied embeddings, SDPA attention."""
    config = LlamaConfig(**shape, max_position_embeddings=positions, tie_word_embeddings=True, pad_token_id=0,
                         bos_token_id=1, eos_token_id=2, attn_implementation="sdpa")  # fmt: skip
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: a CPU init of 0.5B parameters would take seconds
        model = LlamaForCausalLM(config)
    return model.to(dtype).eval()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def peak_gb(fn: Callable[[], Any], device: str) -> float | None:
    """Peak GPU memory allocated during ``fn``, GB (None on a CPU)."""
    if not device.startswith("cuda"):
        fn()
        return None
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    fn()
    return torch.cuda.max_memory_allocated() / 1e9


def matmul_params(model: LlamaForCausalLM) -> tuple[int, int]:
    """(weights of the decoder's linear layers, weights of the vocabulary head): what a token multiplies."""
    decoder = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    return decoder, model.lm_head.weight.numel()


def limits(model: LlamaForCausalLM, rows: int, prompt: int, new: int) -> dict[str, float]:
    """The floors of (a): prefill seconds by FLOPs; decode seconds a step by max(bytes / bandwidth, FLOPs / rate) at
    the mean context of the decode (prompt + half the new tokens)."""
    cfg = model.config
    decoder, head = matmul_params(model)
    attn_width = cfg.num_hidden_layers * cfg.num_attention_heads * (cfg.hidden_size // cfg.num_attention_heads)
    # causal attention: q.k and the weighted sum of v, each ~prompt^2 / 2 multiply-adds per head dimension
    prefill_flops = rows * (2 * decoder * prompt + 2 * attn_width * prompt * prompt + 2 * head)
    context = prompt + (new + 1) / 2
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    step_bytes = weight_bytes + rows * context * kv_bytes_per_token(cfg, next(model.parameters()).element_size())
    step_flops = rows * (2 * (decoder + head) + 4 * attn_width * context)
    step = max(step_bytes / HBM_BYTES_S, step_flops / BF16_FLOP_S)
    return {
        "prefill_floor_s": prefill_flops / BF16_FLOP_S,
        "decode_floor_tok_s": rows / step,
        "decode_bound": "bytes" if step_bytes / HBM_BYTES_S >= step_flops / BF16_FLOP_S else "flops",
    }


class Sides:
    """The two sides of part (a) on one model and one batch of prompts: each call does the whole of one timed piece."""

    def __init__(self, model: LlamaForCausalLM, engine: Engine, prompts: torch.Tensor, new: int) -> None:
        self.model, self.engine, self.new = model, engine, new
        self.ids = prompts.to(next(model.parameters()).device)
        self.lists = prompts.tolist()
        self.session: Any = None

    def engine_prefill(self) -> None:
        self.session = self.engine.start(self.lists)

    def engine_decode(self, seed: int = 0) -> None:
        comps = self.session.sample(self.new, [], SamplingParams(), torch.Generator(device="cpu").manual_seed(seed))
        assert all(len(c.ids) == self.new for c in comps)

    def engine_all(self) -> None:
        self.engine_prefill()
        self.engine_decode()

    def generate(self, tokens: int) -> None:
        """``model.generate`` of exactly ``tokens`` new tokens a row, sampled at temperature 1 without top-k or top-p."""
        with torch.inference_mode():
            done = self.model.generate(self.ids, attention_mask=torch.ones_like(self.ids), do_sample=True,
                                       temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=tokens,
                                       min_new_tokens=tokens, pad_token_id=0)  # fmt: skip
        assert done.shape[1] - self.ids.shape[1] == tokens


def bench_engine(name: str, shape: dict[str, int], rows: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Part (a) for one shape: a row of figures per row count."""
    dev, dtype = args.device, (torch.bfloat16 if args.device.startswith("cuda") else torch.float32)
    model = random_model(shape, dev, dtype, args.prompt_tokens + args.new_tokens + 8)
    engine = Engine(model, pad_id=0, dtype="bfloat16" if dtype == torch.bfloat16 else "float32")
    new, out = args.new_tokens, []
    for n in rows:
        gen = torch.Generator(device="cpu").manual_seed(n)
        prompts = torch.randint(3, shape["vocab_size"], (n, args.prompt_tokens), generator=gen, device="cpu")
        sides = Sides(model, engine, prompts, new)
        times: dict[str, list[float]] = {"e_prefill": [], "e_decode": [], "g_one": [], "g_all": []}
        for r in range(args.repeats + 1):  # round 0 warms up both sides (kernels, cuBLAS handles, allocator)
            row = {
                "e_prefill": timed(sides.engine_prefill, dev),
                "e_decode": timed(partial(sides.engine_decode, r), dev),
                "g_one": timed(partial(sides.generate, 1), dev),
                "g_all": timed(partial(sides.generate, new), dev),
            }
            for key, value in row.items():
                times[key] += [value] if r else []
        med = {key: statistics.median(values) for key, values in times.items()}
        figures = {
            "shape": name,
            "rows": n,
            "engine_prefill_s": med["e_prefill"],
            "generate_prefill_s": med["g_one"],
            "engine_decode_tok_s": n * new / med["e_decode"],
            "generate_decode_tok_s": n * (new - 1) / max(med["g_all"] - med["g_one"], 1e-9),
            "engine_peak_gb": peak_gb(sides.engine_all, dev),
            "generate_peak_gb": peak_gb(partial(sides.generate, new), dev),
            **limits(model, n, args.prompt_tokens, new),
        }
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}
        print(f"  {name} {n} rows: {json.dumps(shown)}", flush=True)
        out.append(figures)
    if dev.startswith("cuda"):
        del model, engine, sides
        torch.cuda.empty_cache()
    return out


def save_shape(shape: dict[str, int], path: Path, positions: int, device: str) -> None:
    """A random-weight model of ``shape`` with a tokenizer of as many tokens, one character each (no word list to
    match): the printable ASCII characters the chat prompts are written in, then characters no prompt holds; saved as
    a Hugging Face directory."""
    alphabet = list(string.printable)
    fillers = (chr(c) for c in range(0x100, 0x110000) if not 0xD800 <= c <= 0xDFFF)
    need = shape["vocab_size"] - 4 - len(alphabet)
    tokenizer = build_tokenizer([*alphabet, *(next(fillers) for _ in range(need))])
    assert len(tokenizer) == shape["vocab_size"], len(tokenizer)
    model = random_model(shape, device, torch.bfloat16, positions)  # initialised on the GPU: seconds less
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def step_times(run_dir: Path) -> dict[str, float]:
    """Medians of the step, sampling and update seconds of metrics.jsonl's training rows after the first."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "time/step_s" in r][1:]
    return {k: statistics.median(r[f"time/{k}"] for r in steps) for k in ("step_s", "sample_s", "update_s")}


def bench_train(name: str, shape: dict[str, int], args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """Part (b) for one shape: a row per sampler."""
    from sesa_cli import api

    model_dir = tmp / f"model-{name}"
    save_shape(shape, model_dir, 4096, args.device)
    out = []
    for sampler, overrides in SAMPLERS.items():
        figures: dict[str, Any] = {"shape": name, "sampler": sampler}
        try:
            api.train([MODEL_CONFIGS[name], f"device={args.device}", f"model.path={model_dir}",
                       *TRAIN, *(SMOKE_TRAIN if args.smoke else []), f"train.steps={args.train_steps}", *overrides],
                      run_dir=tmp / f"train-{name}-{sampler}")  # fmt: skip
            figures.update(step_times(tmp / f"train-{name}-{sampler}"))
        except Exception as exc:  # noqa: BLE001  (the table says what failed; the other parts still run)
            figures["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        print(f"  {json.dumps(figures)}", flush=True)
        out.append(figures)
    return out


def bench_default(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Part (c): ``sesa train device=...`` from an empty cache (cwd ``tmp``), in a subprocess."""
    run = tmp / "default-run"
    cmd = [sys.executable, "-m", "sesa_cli", "train", f"device={args.device}", f"hydra.run.dir={run}",
           *(SMOKE_DEFAULT if args.smoke else [])]  # fmt: skip
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, check=False, cwd=tmp, capture_output=True, text=True, timeout=args.default_timeout)
        code: int | str = done.returncode
        tail = (done.stderr.strip().splitlines() or [""])[-1]
    except subprocess.TimeoutExpired:
        code, tail = "timeout", f"stopped after {args.default_timeout} s"
    wall = time.perf_counter() - t0
    final = None
    if (run / "metrics.jsonl").is_file():
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
        final = next((r["eval/success"] for r in reversed(rows) if "eval/success" in r), None)
    command = " ".join(["sesa train", f"device={args.device}", *(SMOKE_DEFAULT if args.smoke else [])])
    result = {"command": command, "wall_s": wall, "exit": code, "final_eval_success": final}
    if code != 0:
        result["error"] = tail
    print(f"  {json.dumps(result)}", flush=True)
    return result


def table(results: dict[str, Any]) -> list[str]:
    """Markdown lines of whatever parts ``results`` holds (a part that did not finish says so)."""
    meta = results.get("meta", {})
    lines = [f"`python bench/gpu.py` ({meta.get('about', 'no part finished')}):", ""]
    engine = results.get("engine")
    header = (
        "| shape | rows | prefill s, engine / generate (floor) | decode tok/s, engine / generate | engine / "
        "generate, decode | decode: share of the limit, engine / generate (bound) | peak GB, engine / generate |"
    )
    lines += [header, "|---|---|---|---|---|---|---|"]
    for r in engine if engine is not None else [{"shape": "all", "error": "did not finish (timed out or crashed)"}]:
        if "error" in r:
            lines.append(f"| {r['shape']} | | failed: {r['error']} | | | | |")
            continue
        share = [r[f"{side}_decode_tok_s"] / r["decode_floor_tok_s"] for side in ("engine", "generate")]
        peaks = " / ".join("-" if r[k] is None else f"{r[k]:.1f}" for k in ("engine_peak_gb", "generate_peak_gb"))
        lines.append(
            f"| {r['shape']} | {r['rows']} | {r['engine_prefill_s']:.3f} / {r['generate_prefill_s']:.3f} "
            f"({r['prefill_floor_s']:.4f}) | {r['engine_decode_tok_s']:,.0f} / {r['generate_decode_tok_s']:,.0f} | "
            f"{r['engine_decode_tok_s'] / r['generate_decode_tok_s']:.2f}x | {share[0]:.2f} / {share[1]:.2f} "
            f"({r['decode_bound']}) | {peaks} |"
        )
    header = (
        "| `sesa train` step, 8 prompts x 8 rollouts, 64 new tokens | parallel s (sampling + update) | "
        "sequential s (sampling + update) | sequential / parallel |"
    )
    lines += ["", header, "|---|---|---|---|"]
    train = results.get("train")
    if train is None:
        lines.append("| all | did not finish (timed out or crashed) | | |")
    for name in dict.fromkeys(r["shape"] for r in train or []):
        by = {r["sampler"]: r for r in train or [] if r["shape"] == name}
        cells = [
            f"failed: {r['error']}"
            if "error" in r
            else f"{r['step_s']:.2f} ({r['sample_s']:.2f} + {r['update_s']:.2f})"
            for r in (by["parallel"], by["sequential"])
        ]
        ok = all("error" not in r for r in by.values())
        ratio = f"{by['sequential']['step_s'] / by['parallel']['step_s']:.2f}x" if ok else ""
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {ratio} |")
    d = results.get("default")
    if d is None:
        lines += ["", "The default `sesa train` did not finish (timed out or crashed)."]
    else:
        failed = f" (exit {d['exit']}: {d.get('error', '')})" if d["exit"] != 0 else ""
        outcome = f"{d['wall_s']:.0f} s wall, final eval/success {d['final_eval_success']}{failed}"
        lines += ["", f"`{d['command']}` from an empty cache: {outcome}"]
    return lines


def render(out: Path, page: str | None) -> list[str]:
    """The table of the parts' files under ``out`` (gpu-engine.json, gpu-train.json, gpu-default.json), written to
    gpu.md and, when they were measured on a GPU and ``page`` is given, to its ``bench:gpu`` block."""
    results: dict[str, Any] = {}
    for part in PARTS:
        path = out / f"gpu-{part}.json"
        if path.is_file():
            loaded = json.loads(path.read_text())
            results[part] = loaded["result"]
            results["meta"] = loaded["meta"]
            if part != "default":  # the shapes a part's time limit stopped before
                done = {r["shape"] for r in loaded["result"]}
                missing = [name for name in loaded["planned"] if name not in done]
                samplers = list(SAMPLERS) if part == "train" else [None]
                results[part] += [{"shape": name, "sampler": sampler, "error": "did not finish (timed out or crashed)"}
                                  for name in missing for sampler in samplers]  # fmt: skip
    lines = table(results)
    (out / "gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if page and results.get("meta", {}).get("device", "cpu").startswith("cuda"):
        write_block(Path(page), "gpu", lines)
    return lines


PARTS = ("engine", "train", "default")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="the whole script on the CPU at tiny sizes")
    parser.add_argument("--rows", default="64,256,1024")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-steps", type=int, default=3, help="steps of each train run (the first is warm-up)")
    parser.add_argument("--default-timeout", type=int, default=300, help="seconds the default run may take")
    parser.add_argument("--parts", default=",".join(PARTS), help="which of engine, train, default to run ('' none)")
    parser.add_argument("--out", default="outputs/bench-gpu", help="where gpu-PART.json and gpu.md go")
    parser.add_argument("--page", help="write the table into this file's bench:gpu block (figures of a GPU only)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    parts = [p for p in args.parts.split(",") if p]
    if unknown := set(parts) - set(PARTS):
        raise SystemExit(f"bench/gpu.py: unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    if args.smoke:
        args.device, shapes = "cpu", SMOKE_SHAPES
        args.rows, args.prompt_tokens, args.new_tokens, args.repeats, args.train_steps = "2,4", 8, 4, 1, 2
    elif torch.cuda.is_available():
        args.device, shapes = "cuda", SHAPES
    elif parts:
        raise SystemExit("bench/gpu.py: torch finds no CUDA GPU here; --smoke runs it on the CPU at tiny sizes")
    else:
        args.device, shapes = "cpu", SHAPES
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    about = (f"torch {torch.__version__}, {gpu}; engine: {args.prompt_tokens}-token prompts, {args.new_tokens} new "
             f"tokens, median of {args.repeats}")  # fmt: skip
    meta = {
        "device": args.device,
        "about": about + (" (smoke: tiny sizes, figures meaningless)" if args.smoke else ""),
    }
    rows = [int(n) for n in args.rows.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for part in parts:
            path = out / f"gpu-{part}.json"
            path.unlink(missing_ok=True)  # an earlier run's figures never pass for this run's
            result: Any = []
            planned = list(shapes)[:1] if args.smoke and part == "train" else list(shapes)  # smoke: both shapes alike
            record = {"meta": meta, "planned": planned, "result": result}
            for name, shape in shapes.items():
                if part == "engine":
                    print(f"(a) engine and generate, {name}", flush=True)
                    try:
                        result += bench_engine(name, shape, rows, args)
                    except Exception as exc:  # noqa: BLE001  (the table says what failed)
                        result.append({"shape": name, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]})
                elif part == "train" and name in planned:
                    print(f"(b) sesa train steps, {name}", flush=True)
                    result += bench_train(name, shape, args, Path(tmp))
                # written after each shape: a part stopped by its time limit keeps the shapes it finished
                path.write_text(json.dumps(record, indent=2))
            if part == "default":
                print("(c) the default sesa train", flush=True)
                record["result"] = bench_default(args, Path(tmp))
                path.write_text(json.dumps(record, indent=2))
    render(out, args.page)


if __name__ == "__main__":
    main()
