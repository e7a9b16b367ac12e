"""Data parallelism across processes (``accelerate launch``), behind the small seam the trainer uses.

Semantics (verl's convention: ``data.train_batch_size`` is global):

* ``train.batch_size`` is the **global** number of prompts per step. With W processes each rank draws
  ``batch_size / W`` of them (it must divide), whole groups, so group-normalised advantages are computed exactly as
  in one process. Rank r takes training instances r, r + W, r + 2W, ... of the seeded instance stream, so the
  ranks never share a prompt; rank r samples with its own generator (seed ``seed + 1_000_003 * r``).
* Each rank computes the loss of its shard; the gradients are averaged over ranks (one all-reduce per optimizer
  step) before clipping and the optimizer step, so every replica takes the same step and the weights stay
  identical. The averaged gradient is the mean over ranks of each shard's loss gradient: it equals the gradient of
  the whole batch in one process for the per-sequence aggregations (``seq_mean_token_mean``, ``seq_sum_norm``),
  and for ``token_mean`` when the shards hold equally many tokens (otherwise it weighs each rank's tokens by
  1 / its token count, as DDP does).
* A rule over the whole batch rather than over each group (``algo.off_policy=distinct_solutions`` counts a
  prompt's repeated solutions across groups) gathers what it needs from every rank (:meth:`~SingleProcess.gather`)
  and applies the result to its own rows, so each rank computes what one process computes for those rows.
* Rank 0 alone writes the run dir, checkpoints and evaluations; logged training metrics are the mean over ranks.

This is not DDP: the scorer calls the decoder directly (to apply the vocab projection in chunks), which DDP's
forward hooks would miss, so gradients are averaged explicitly. One process (no launcher) uses
:class:`SingleProcess`, whose every method is the identity, so a plain run is unchanged by this module.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

import torch

from sesa_cli.config import ConfigError

T = TypeVar("T")


class SingleProcess:
    """One process: every collective is the identity."""

    rank = 0
    world = 1
    is_main = True
    device: str | None = None

    def local_batch(self, batch_size: int) -> int:
        return batch_size

    def instance_index(self, k: int) -> int:
        """Index in the training stream of this rank's k-th prompt."""
        return k

    def seed(self, seed: int) -> int:
        """This rank's sampling seed."""
        return seed

    def broadcast_parameters(self, model: torch.nn.Module) -> None:
        pass

    def average_gradients(self, params: list[torch.nn.Parameter]) -> None:
        pass

    def all_finite(self, loss: torch.Tensor) -> bool:
        return bool(torch.isfinite(loss))

    def gather(self, items: list[T]) -> list[T]:
        """Every rank's ``items``, concatenated in rank order (rank 0's first); one process: its own."""
        return items

    def mean_metrics(self, row: dict[str, Any]) -> dict[str, Any]:
        return row

    def barrier(self) -> None:
        pass


class AccelerateReplicas(SingleProcess):
    """W processes started by ``accelerate launch`` (or torchrun): accelerate sets up the process group (gloo on
    CPU, NCCL on GPUs) and the device; the collectives are torch.distributed's."""

    def __init__(self, cpu: bool) -> None:
        from accelerate import Accelerator

        self.accelerator = Accelerator(cpu=cpu)
        state = self.accelerator.state
        self.rank = state.process_index
        self.world = state.num_processes
        self.is_main = state.is_main_process
        self.device = str(self.accelerator.device)

    def local_batch(self, batch_size: int) -> int:
        if batch_size % self.world:
            raise ConfigError(
                f"train.batch_size={batch_size} is the global batch and must divide by the {self.world} processes"
            )
        return batch_size // self.world

    def instance_index(self, k: int) -> int:
        return k * self.world + self.rank

    def seed(self, seed: int) -> int:
        return seed + 1_000_003 * self.rank

    def broadcast_parameters(self, model: torch.nn.Module) -> None:
        """Start every replica from rank 0's weights (e.g. LoRA's random init)."""
        import torch.distributed as dist

        with torch.no_grad():
            for p in model.parameters():
                dist.broadcast(p.data, src=0)

    def average_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Mean of the gradients over ranks, as one flat all-reduce (a missing grad counts as zero)."""
        import torch.distributed as dist

        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).clone()
            offset += n

    def all_finite(self, loss: torch.Tensor) -> bool:
        """True iff the loss is finite on every rank (so all ranks skip, or all step, together)."""
        import torch.distributed as dist

        flag = torch.tensor([float(torch.isfinite(loss.detach()).item())], device=loss.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item() > 0)

    def gather(self, items: list[T]) -> list[T]:
        """Every rank's ``items`` (picklable), concatenated in rank order (rank 0's first): one all_gather_object,
        which every rank must call."""
        import torch.distributed as dist

        shards: list[Any] = [None] * self.world
        dist.all_gather_object(shards, items)
        return [item for shard in shards for item in shard]

    def mean_metrics(self, row: dict[str, Any]) -> dict[str, Any]:
        """Numeric values averaged over ranks (keys a rank lacks are averaged over the ranks that have them)."""
        rows = self.gather([row])
        out = dict(row)
        for key, value in row.items():
            if key == "step" or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            values = [float(r[key]) for r in rows if isinstance(r.get(key), int | float)]
            out[key] = sum(values) / len(values)
        return out

    def barrier(self) -> None:
        self.accelerator.wait_for_everyone()


def launched_world_size() -> int:
    """Processes started by a launcher (accelerate launch / torchrun set WORLD_SIZE); 1 without one."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def replicas(device: str) -> SingleProcess:
    """The seam for this process: AccelerateReplicas under a multi-process launcher, else SingleProcess."""
    if launched_world_size() > 1:
        return AccelerateReplicas(cpu=device == "cpu")
    return SingleProcess()
