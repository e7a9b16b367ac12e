"""Advantage estimators (``algo.advantage``): the protocol and registry (``base``) and sesa's own estimators, one file
each (``group``: GRPO, Dr. GRPO, RLOO; ``passk``: Pass@k Training and verl's grpo_passk; ``pkpo``, ``maxrl``,
``w_reinforce``, ``darling``). Importing the package registers every module in it; torch-free."""

from sesa_cli.advantages.base import (
    ADVANTAGES,
    Advantage,
    Outcomes,
    build_advantage,
    compute_advantages,
    register_advantage,
)
from sesa_cli.registry import import_submodules

import_submodules(__name__, __path__)

__all__ = ["ADVANTAGES", "Advantage", "Outcomes", "build_advantage", "compute_advantages", "register_advantage"]
