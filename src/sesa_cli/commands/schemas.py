"""The typed schemas every command composes against, stored in Hydra's ConfigStore.

The command layer does this, not sesa_cli.config: each task's schema extends ``TaskConfig`` next to its class
(sesa_cli.tasks), so the config module stays below the tasks and imports nothing of them.
"""

from __future__ import annotations

from typing import Any

from sesa_cli import plugins
from sesa_cli.commands.compose import store_task_schemas
from sesa_cli.commands.sweep import register_resolver
from sesa_cli.config import (
    NAMED_PLUGINS,
    PLUGIN_MAPPINGS,
    DiversityReportConfig,
    EvalConfig,
    ReviveConfig,
    TrainConfig,
)


def register_configs() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent): the commands' and each task's
    (``schema/task/<name>``; conf/task/<name>.yaml names it in its defaults), a plug-in's task too (the entry points'
    are imported here; ``plugins=`` modules before, by the dispatcher); and register the resolver a sweep's job dirs
    go through (sesa_cli.commands.sweep)."""
    from hydra.core.config_store import ConfigStore

    plugins.load_entry_points()  # installed packages' tasks register their schemas (sesa_cli.plugins)
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=open_mappings(TrainConfig))
    cs.store(name="diversity_report_schema", node=DiversityReportConfig)
    cs.store(name="revive_schema", node=open_mappings(ReviveConfig))
    cs.store(name="eval_schema", node=EvalConfig)
    store_task_schemas()
    optuna_follows_sweep_direction(cs)
    register_resolver()  # hydra.sweep.subdir's (conf/hydra/default.yaml)


def open_mappings(schema: type) -> Any:
    """``schema`` as a structured config whose plug-in mappings (:data:`sesa_cli.config.PLUGIN_MAPPINGS`,
    :data:`sesa_cli.config.NAMED_PLUGINS`) take new keys with a plain override (``algo.terms.follow.coef=0.1``,
    ``algo.advantage.k=4``, no ``+``): Hydra's struct mode refuses a key the schema does not name, and a plug-in's
    names and settings are its registry's, checked there."""
    from omegaconf import OmegaConf

    node = OmegaConf.structured(schema)
    for key in (*PLUGIN_MAPPINGS, *NAMED_PLUGINS):
        OmegaConf.set_struct(OmegaConf.select(node, key), False)
    return node


def optuna_follows_sweep_direction(cs: Any) -> None:
    """With Hydra's Optuna sweeper installed (``sesa[optuna]``), ``hydra/sweeper=optuna`` defaults its
    ``direction`` to ``${sweep.direction}``, so a study names its direction once, next to ``sweep.objective``
    (the plugin's own default is ``minimize``). Hydra's plugin scan stores each plugin's configs, so it runs first."""
    import importlib.util

    # find_spec of a submodule raises when its parent is missing: no Hydra plugin at all (a plain `pip install sesa`)
    if importlib.util.find_spec("hydra_plugins") is None:
        return
    if importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None:
        return
    from hydra.core.plugins import Plugins

    Plugins.instance()
    from hydra_plugins.hydra_optuna_sweeper.config import OptunaSweeperConf

    node = OptunaSweeperConf(direction="${sweep.direction}")
    cs.store(group="hydra/sweeper", name="optuna", node=node, provider="optuna_sweeper")
