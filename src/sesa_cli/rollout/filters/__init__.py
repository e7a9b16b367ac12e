"""Batch filters (``sampler.filters``): the protocol and registry (``base``) and sesa's own filters, one file each
(``dynamic_sampling``, ``rollout_filter``, ``reward_variance``). Importing the package registers every module in it;
torch-free."""

from sesa_cli.registry import import_submodules
from sesa_cli.rollout.filters.base import FILTERS, BatchFilter, Filters, build_filters, register_filter

import_submodules(__name__, __path__)

__all__ = ["FILTERS", "BatchFilter", "Filters", "build_filters", "register_filter"]
