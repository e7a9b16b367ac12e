"""How much FrozenLake can ``model=tiny`` learn with perfect labels? `python bench/frozenlake_supervised.py`.

A capacity check for issue #5, not a speed benchmark: the tiny base (the same cached warm start `sesa train` uses)
is fine-tuned by plain supervised learning on *optimal* play, breadth-first shortest paths cut into turns of
``--actions-per-turn`` actions, as the task's own transcripts (prompt, responses, environment feedback). Every
``--eval-every`` steps it prints the greedy validation success on ``--maps`` validation maps, each played closed
loop turn by turn by the task's environment. Reinforcement learning sees a noisier signal than these labels, so the
curve bounds what RL on the same model and layout can reach in the same number of updates.

Examples: `--overrides task.observation_format=coord` (RAGEN's coordinates) or `task.random_start_goal=false`
(gymnasium's corner maps); `--actions-only` puts the loss on the policy's tokens only, as RL's loss mask does.
Non-slippery moves are always used: a shortest path is only optimal without slips.
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from hydra import compose, initialize_config_dir

from sesa_cli.commands.schemas import register_configs
from sesa_cli.config import conf_dir, to_object
from sesa_cli.evaluation import draw
from sesa_cli.models.loading import load_policy
from sesa_cli.rollout.samplers import ParallelSampler
from sesa_cli.tasks.base import make_task
from sesa_cli.tasks.frozenlake import shortest_path, start_cell


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16, help="optimal episodes per step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--maps", type=int, default=64, help="validation maps")
    ap.add_argument("--cache-dir", default="outputs/cache")
    ap.add_argument("--overrides", nargs="*", default=[], help="more Hydra overrides of `sesa train`")
    ap.add_argument(
        "--actions-only",
        action="store_true",
        help="loss on the policy's tokens only (compact style: from each ':' to the next '|'), as RL's loss mask; "
        "default: every token of the transcript",
    )
    args = ap.parse_args()

    register_configs()
    overrides = ["task=frozenlake", "task.is_slippery=false", f"model.cache_dir={args.cache_dir}", *args.overrides]
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        cfg = to_object(compose("train", overrides=overrides))
    task = make_task(cfg.task, 0)
    policy = load_policy(cfg.model, task)
    model, tok = policy.model, policy.tokenizer
    per_turn = cfg.task.max_actions_per_turn

    def optimal_transcript(inst) -> str:
        path = shortest_path(inst.desc, start_cell(inst.desc))
        assert path is not None  # generate_map only returns maps with a path
        turns = [task.response(path[i : i + per_turn]) for i in range(0, len(path), per_turn)]
        return task.transcript(inst, turns)[0]

    rng = random.Random(0)
    lines = [optimal_transcript(task.instance("train", rng.randrange(4000))) for _ in range(8000)]
    greedy = ParallelSampler(cfg.sampler, task, policy, greedy=True)
    maps = [task.instance("val", i) for i in range(args.maps)]

    def greedy_success() -> float:
        model.eval()
        groups = draw(greedy, maps, 1, torch.Generator().manual_seed(0))
        model.train()
        return sum(g[0].score.success for g in groups) / len(groups)

    turn_start, turn_end = tok.convert_tokens_to_ids(":"), tok.convert_tokens_to_ids("|")

    def policy_tokens(ids: torch.Tensor) -> torch.Tensor:
        """(batch, seq) True on the tokens a compact-style policy writes: after each ':' up to and including '|'."""
        out = torch.zeros_like(ids, dtype=torch.bool)
        for r, row in enumerate(ids.tolist()):
            inside = False
            for c, t in enumerate(row):
                out[r, c] = inside
                if t == turn_start:
                    inside = True
                elif t == turn_end:
                    inside = False
        return out

    print(f"overrides: {' '.join(overrides)}{' (loss on actions only)' if args.actions_only else ''}")
    print(f"step 0: greedy validation success {greedy_success():.3f} on {args.maps} maps")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    t0 = time.perf_counter()
    model.train()
    for step in range(1, args.steps + 1):
        batch = [[tok.bos_token_id, *policy.encode(line)] for line in rng.sample(lines, args.batch)]
        width = max(map(len, batch))
        ids = torch.tensor([row + [tok.pad_token_id] * (width - len(row)) for row in batch])
        labels = ids.masked_fill(ids == tok.pad_token_id, -100)
        if args.actions_only:
            labels = labels.masked_fill(~policy_tokens(ids), -100)
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % args.eval_every == 0:
            elapsed = time.perf_counter() - t0
            print(
                f"step {step}: loss {loss.item():.3f}, greedy validation success {greedy_success():.3f}, "
                f"{step * args.batch} optimal episodes, {elapsed:.0f}s"
            )


if __name__ == "__main__":
    main()
