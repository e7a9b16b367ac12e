"""Policy losses (``algo.loss``): the protocol and registry (``base``) and sesa's own losses, one file each
(``ppo_clip``; ``cov``: Clip-Cov and KL-Cov; ``forking``: the high-entropy forking tokens). Importing the package
registers every module in it; torch-free."""

from sesa_cli.losses.base import POLICY_LOSSES, PolicyLoss, build_loss, register_loss
from sesa_cli.registry import import_submodules

import_submodules(__name__, __path__)

__all__ = ["POLICY_LOSSES", "PolicyLoss", "build_loss", "register_loss"]
