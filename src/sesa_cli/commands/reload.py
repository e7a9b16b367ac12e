"""Rebuild a command's config from a parent run's resolved config plus the user's command-line overrides.

Used by ``eval`` and ``revive``: the model, task and sampler must match the checkpoint, and the user's overrides
apply on top of the parent's values, exactly as they would on top of the defaults in a fresh run (``eval`` takes the
run's evaluation protocol ``eval.*`` too, and draws i.i.d. from the plain prompt as the run's evaluations did unless
the command line chooses ``sampler=``):

* a group choice (``sampler=sequential``) applies that option's YAML values on top of the parent's group, so
  settings the parent changed and the option does not set (``sampler.group_size=4``) carry over: a revived run
  differs from its parent only where the user asked. A task choice naming another task replaces the whole task;
* any other override (``sampler.group_size=4``, ``seed=3``) changes one key of the parent's config.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sesa_cli.commands.common import hydra_context, torch_threads
from sesa_cli.commands.compose import explain
from sesa_cli.config import ConfigError, conf_dir, first_line, to_object
from sesa_cli.deprecations import upgrade_config

GROUPS = ("model", "task", "sampler", "algo")


def command_config(config_name: str, cfg: Any, overrides: list[str]) -> Any:
    """The typed config a command runs with: for ``eval``/``revive`` of a checkpoint (``ckpt=``) the checkpoint's
    run config plus ``overrides``, else the composed ``cfg`` itself."""
    from sesa_cli.runs import resolve_checkpoint, run_dir_of_checkpoint

    ckpt = cfg.get("ckpt") if config_name in ("eval", "revive") else None
    if not ckpt:
        return to_object(cfg)
    if config_name == "revive":
        path = pick_checkpoint(str(ckpt), str(cfg.get("step", "last")))
    else:
        path = resolve_checkpoint(str(ckpt))
    return reload_config(config_name, run_dir_of_checkpoint(path) / "config.yaml", overrides)


def pick_checkpoint(path: str, step: str) -> Path:
    """The checkpoint named by ``ckpt`` and ``step`` (last, auto = first saved after a collapse flag, or N)."""
    from sesa_cli.runs import list_checkpoints, read_trainer_state, resolve_checkpoint

    p = Path(path).expanduser()
    if (p / "trainer_state.json").is_file():
        return p
    last = resolve_checkpoint(p)  # validates the run dir, errors if it has no checkpoints
    if step == "last":
        return last
    ckpts = list_checkpoints(p)
    if step == "auto":
        for _, ckpt in ckpts:
            if read_trainer_state(ckpt, training=True)["collapse"].get("first_flag_step") is not None:
                return ckpt
        deepest = ckpts[-1]  # the last checkpoint: the furthest the run trained
        raise ConfigError(
            f"step=auto: the collapse monitor flagged no step in any checkpoint of {p}; to revive from its deepest "
            f"checkpoint, step {deepest[0]} ({deepest[1]}), pass step=last"
        )
    for n, ckpt in ckpts:
        if n == int(step):
            return ckpt
    raise ConfigError(f"run {p} has no checkpoint at step {step}; it has: {', '.join(str(n) for n, _ in ckpts)}")


def checkpoint_job(
    config_name: str, cfg: Any, run: Callable[[Any, Path, list[str]], dict[str, Any]]
) -> tuple[Path, dict[str, Any]]:
    """``eval``/``revive`` inside their Hydra job (``main`` and sesa_cli.api run it): the typed config
    (:func:`command_config`), the torch threads, then ``run(config, run_dir, overrides)``; (run dir, its metrics)."""
    run_dir, overrides = hydra_context()
    config = command_config(config_name, cfg, overrides)
    torch_threads(config.threads)
    return run_dir, run(config, run_dir, overrides)


def reload_config(config_name: str, parent_config: Path, overrides: list[str]) -> Any:
    """The typed config of ``config_name`` = parent run's values (where the schema has them) + ``overrides``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from sesa_cli.runs import read_yaml

    if not parent_config.is_file():
        raise ConfigError(f"{parent_config} is missing: the checkpoint's run config cannot be reloaded")
    data = read_yaml(parent_config)  # bounded: a file of nested aliases is refused, not expanded
    try:
        loaded = OmegaConf.to_container(OmegaConf.create(data), resolve=True) if isinstance(data, dict) else data
    except Exception as exc:  # noqa: BLE001  (OmegaConf's many error types: an interpolation that does not resolve)
        raise ConfigError(f"{parent_config} is not a valid run config ({first_line(exc)})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{parent_config} holds a {type(loaded).__name__}, not a mapping of config keys")
    parent = upgrade_config(loaded)  # a run written before a config key was renamed
    for group in GROUPS:
        if group in parent and not (isinstance(parent[group], dict) and isinstance(parent[group].get("name"), str)):
            raise ConfigError(f"{parent_config}: {group!r} must be a mapping with a 'name'")
    # Hydra's own settings (hydra.run.dir=..., hydra/launcher=joblib in a sweep) are not the run's config
    overrides = [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]
    parsed = OverridesParser.create().parse_overrides(overrides)
    user_groups = {ov.key_or_group for ov in parsed if ov.key_or_group in GROUPS}
    user_keys = [ov for ov in parsed if ov.key_or_group not in GROUPS]

    def _compose(extra: list[str]) -> Any:
        args = [*extra, *overrides]
        if GlobalHydra.instance().is_initialized():  # inside the command's @hydra.main app
            return compose(config_name, overrides=args)
        with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
            return compose(config_name, overrides=args)

    schema_keys = set(_compose([]).keys())
    if config_name == "eval" and "sampler" in parent and "sampler" not in user_groups:
        # The run's own evaluations drew i.i.d. from the plain prompt whatever it trained with: so does sesa eval of
        # its checkpoints unless the command line chooses a sampler (the sampler's settings carry over).
        parent["sampler"] = {**parent["sampler"], "name": "parallel"}
    choices = [f"{g}={parent[g]['name']}" for g in GROUPS if g in parent and g in schema_keys and g not in user_groups]
    try:
        cfg = _compose(choices)
    except Exception as exc:  # noqa: BLE001  (a group option the parent names that this install does not have)
        raise ConfigError(f"{parent_config}: {explain(exc, config_name, choices)}") from None
    for key, value in parent.items():
        if key not in schema_keys or key in ("ckpt", "step", "more_steps"):
            continue
        if key in user_groups:
            option = cfg[key]["name"]
            if key == "task" and option != value.get("name"):
                continue  # another task: its own config, not the parent's
            option_yaml = OmegaConf.load(conf_dir() / key / f"{option}.yaml")
            option_values = {k: v for k, v in option_yaml.items() if k != "defaults"}
            value = OmegaConf.to_container(OmegaConf.merge(value, option_values), resolve=False)
        try:
            OmegaConf.update(cfg, key, value, merge=True)
        except Exception as exc:  # noqa: BLE001  (a value of the wrong type for the schema: the file was edited)
            raise ConfigError(f"{parent_config}: {key}: {first_line(exc)}") from None
    for ov in user_keys:  # the user's own values win over the parent's
        OmegaConf.update(cfg, ov.key_or_group, ov.value(), merge=True)
    return to_object(cfg)


def with_total_steps(cfg: Any) -> tuple[Any, Path, int]:
    """A revive's config with ``train.steps`` = its parent checkpoint's step + ``more_steps``; the checkpoint; its
    step (what ``sesa revive`` runs, and writes to its config.yaml)."""
    from dataclasses import replace

    from sesa_cli.runs import read_trainer_state

    ckpt = pick_checkpoint(cfg.ckpt, cfg.step)
    start = int(read_trainer_state(ckpt, training=True)["step"])
    return replace(cfg, train=replace(cfg.train, steps=start + cfg.more_steps)), ckpt, start
