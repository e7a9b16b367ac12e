"""Batch filters (``sampler.filters``): the protocol and registry (``base``) and sesa's own filters, one file each
(``dynamic_sampling``, ``rollout_filter``). Importing the package registers them; torch-free."""

from sesa_cli.rollout.filters import dynamic_sampling, rollout_filter  # noqa: F401  (register)
from sesa_cli.rollout.filters.base import FILTERS, BatchFilter, Filters, build_filters, register_filter

__all__ = ["FILTERS", "BatchFilter", "Filters", "build_filters", "register_filter"]
