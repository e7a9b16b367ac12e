"""Learning-rate schedules (``optim.lr_schedule``): the multiplier of ``optim.lr`` after a linear warm-up.

Each schedule maps ``done``, the fraction in [0, 1] of the post-warm-up steps already taken, to a multiplier;
:func:`lr_scale` adds the warm-up. The names follow the peers' defaults: verl's is ``constant``, TRL's ``linear``.
"""

from __future__ import annotations

import math

from sesa_cli.algos.registry import LR_SCHEDULES

__all__ = ["constant", "cosine", "linear", "lr_scale"]


@LR_SCHEDULES.register("constant")
def constant(done: float) -> float:
    """1 throughout (verl's default)."""
    return 1.0


@LR_SCHEDULES.register("linear")
def linear(done: float) -> float:
    """1 − done: linear decay to 0 at the last step (TRL's default)."""
    return 1.0 - done


@LR_SCHEDULES.register("cosine")
def cosine(done: float) -> float:
    """½ (1 + cos(π · done)): cosine decay to 0 at the last step."""
    return 0.5 * (1.0 + math.cos(math.pi * done))


def lr_scale(step: int, steps: int, warmup_steps: int, schedule: str) -> float:
    """The learning-rate multiplier of step ``step`` (0-based) of a run of ``steps``: (step + 1) / warmup_steps
    during the warm-up, then ``schedule`` over the remaining steps (a revived run decays over its new total)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    done = min(1.0, (step - warmup_steps) / max(1, steps - warmup_steps))
    return float(LR_SCHEDULES.lookup(schedule)(done))
