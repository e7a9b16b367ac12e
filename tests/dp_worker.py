"""One replica of the data-parallel test (tests/test_distributed.py), started by ``accelerate launch``.

Usage: ``accelerate launch --multi_gpu --num_processes 2 tests/dp_worker.py OUT_DIR OVERRIDE...``. Every rank trains with
the same config; rank r saves to ``OUT_DIR/rank{r}.pt`` its step-1 rollouts, the gradients of its first optimizer
step (after the all-reduce and clipping) and its final trainable weights, for the test to compare.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch


def main(out_dir: Path, overrides: list[str]) -> None:
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

    record: dict = {"rank": dist.rank}
    draw = trainer._draw_batch

    def recording_draw():
        groups, rounds = draw()
        record.setdefault("groups", groups)
        return groups, rounds

    trainer._draw_batch = recording_draw  # type: ignore[method-assign]

    def first_grads(optimizer, args, kwargs):
        record.setdefault("grads", [p.grad.detach().clone() for p in trainer.trainable])

    trainer.optimizer.register_step_pre_hook(first_grads)
    trainer.fit()
    record["weights"] = [p.detach().clone() for p in trainer.trainable]
    torch.save(record, out_dir / f"rank{dist.rank}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
