"""Typed configuration schemas, which the command layer registers in Hydra's ConfigStore.

Every field is documented once, here, next to its definition. YAML files under ``conf/`` hold the values; these
dataclasses are the schema that validates every override before any work starts. Library code receives these
dataclasses (``OmegaConf.to_object``), never a ``DictConfig``.

The sections live by what reads them: ``base`` (the error, the checks, the conversion of a composed config),
``model`` (``model.*``, ``task.*``), ``method`` (``sampler.*``, ``algo.*``, ``optim.*``) and ``run`` (``train.*``,
``eval.*``, ``collapse.*``, ``logger_options.*``, ``sweep.*`` and the command schemas); this package hands them on.

This package must stay light: ``sesa --help`` and ``diversity-report`` import it and never import torch. It imports
nothing of sesa_cli.tasks: each task's schema extends ``TaskConfig`` in its own module, and
sesa_cli.commands.schemas.register_configs stores them all.
"""

from sesa_cli.config import base, method, model, run
from sesa_cli.config.base import *  # the face: each module's __all__
from sesa_cli.config.method import *
from sesa_cli.config.model import *
from sesa_cli.config.run import *

__all__ = base.__all__ + method.__all__ + model.__all__ + run.__all__
