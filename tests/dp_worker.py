"""One replica of the data-parallel test (tests/test_distributed.py), started by ``accelerate launch``.

Usage: ``accelerate launch --multi_gpu --num_processes 2 tests/dp_worker.py OUT_DIR [--planted] OVERRIDE...``. Every
rank trains with the same config; rank r saves to ``OUT_DIR/rank{r}.pt`` its step-1 rollouts, the gradients of its
first optimizer step (after the all-reduce and clipping) and its final trainable weights, for the test to compare.
``--planted``: each step's batch is rank r's :data:`PLANTED` chains instead of the sampler's draw.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

# Two sequential chains of four path answers per rank (indices into task.leaves; -1: a path one district short,
# unparseable, reward 0). Item 0 of a chain is drawn from the plain prompt, items 1-3 after the earlier ones
# (off-policy under loss_context=prompt). Leaf 1 is a rewarded off-policy row twice on rank 0 and once on rank 1:
# a rank counting its own shard alone gives it other shares than the batch does.
PLANTED = {0: [[0, 1, 2, -1], [-1, 3, 1, -1]], 1: [[4, 1, -1, -1], [5, 6, 7, -1]]}


def planted_groups(trainer, rank: int) -> list:
    """Rank ``rank``'s :data:`PLANTED` chains as the sequential sampler (stage1=solution) records them, scored by the
    task. The behaviour log-probs are zeros: one update without importance weights never reads them."""
    from sesa_cli.rollout.rollouts import Completion, Rollout

    task, policy = trainer.task, trainer.policy
    inst = task.instance("train", 0)
    prompt = trainer.sampler.encode_prompt(task.prompt(inst))
    between = policy.encode(task.between) if task.between else []
    groups = []
    for g, chain in enumerate(PLANTED[rank]):
        earlier: list[int] = []
        group = []
        for leaf in chain:
            path = task.leaves[max(leaf, 0)]
            text = (path if leaf >= 0 else path.rsplit("/", 1)[0]) + task.stop
            ids = policy.encode(text)
            completion = Completion(ids, [0.0] * len(ids), [0.0] * len(ids), True)
            group.append(Rollout(g, inst, prompt, prompt + earlier, completion, text, task.score(inst, text)))
            earlier += ids + between
        groups.append(group)
    return groups


def main(out_dir: Path, overrides: list[str], planted: bool = False) -> None:
    from hydra import compose, initialize_config_dir

    from sesa_cli.commands.common import seed_everything
    from sesa_cli.commands.schemas import register_configs
    from sesa_cli.config import conf_dir, to_object
    from sesa_cli.distributed import replicas
    from sesa_cli.models.loading import load_policy
    from sesa_cli.runs import ReplicaRunDir, RunDir
    from sesa_cli.tasks.base import make_task
    from sesa_cli.trainer import Trainer

    torch.set_num_threads(1)
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        cfg = to_object(compose("train", overrides=overrides))
    dist = replicas(cfg.device)
    assert dist.world == 2, dist.world
    seed_everything(cfg.seed)
    run_dir = out_dir / "run"
    run = RunDir(run_dir) if dist.is_main else ReplicaRunDir(run_dir)
    task = make_task(cfg.task, cfg.seed)
    trainer = Trainer(cfg, task, load_policy(cfg.model, task), run, dist)
    if planted:
        trainer._draw_batch = lambda: (planted_groups(trainer, dist.rank), 0)  # type: ignore[method-assign]

    record: dict = {"rank": dist.rank}
    draw = trainer._draw_batch

    def recording_draw():
        groups, rounds = draw()
        record.setdefault("groups", groups)
        return groups, rounds

    trainer._draw_batch = recording_draw  # type: ignore[method-assign]

    def first_grads(optimizer, args, kwargs):
        record.setdefault("grads", [p.grad.detach().clone() for p in trainer.learner.trainable])

    trainer.learner.optimizer.register_step_pre_hook(first_grads)
    trainer.fit()
    record["weights"] = [p.detach().clone() for p in trainer.learner.trainable]
    torch.save(record, out_dir / f"rank{dist.rank}.pt")


if __name__ == "__main__":
    args = sys.argv[2:]
    main(Path(sys.argv[1]), [a for a in args if a != "--planted"], planted="--planted" in args)
