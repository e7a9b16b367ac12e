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

from sesa_cli import plugins
from sesa_cli.commands.common import hydra_context, torch_threads
from sesa_cli.commands.compose import explain, store_task_schemas
from sesa_cli.config import NAMED_PLUGINS, ConfigError, conf_dir, cut, first_line, plugin_name, to_object
from sesa_cli.deprecations import upgrade_config

GROUPS = ("model", "task", "sampler", "algo")
MODEL_SHAPE = (
    "name", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position_embeddings", "tokenizer",
    "warm_start_steps", "warm_start_batch_size", "warm_start_lr", "warm_start_corpus_size", "warm_start_block", "lora",
    "lora_rank", "lora_alpha", "lora_target_modules",
)  # fmt: skip
"""The ``model.*`` keys that say which weights and tokenizer a checkpoint holds (and which base is its KL reference):
``eval`` and ``revive`` of a checkpoint take them from it, and refuse an override of any (it would be recorded as
applied and ignored). Where the base lives stays settable (``model.path``, ``model.hub_id``, ``model.gguf_*``,
``model.cache_dir``: a base copied to another machine; its fingerprint in run.json says whether it is the same), as
do ``model.dtype``, ``model.max_batch_rows`` and the like."""


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

    from sesa_cli.yaml_files import read_yaml

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
    modules = parent.get("plugins", [])
    if not (isinstance(modules, list) and all(isinstance(m, str) for m in modules)):
        raise ConfigError(f"{parent_config}: 'plugins' must be a list of module names")
    plugins.load(modules)  # the run's own plug-ins (its task, terms...), before its config is composed
    store_task_schemas()  # a plug-in task's
    for group in GROUPS:
        if group in parent and not (isinstance(parent[group], dict) and isinstance(parent[group].get("name"), str)):
            raise ConfigError(f"{parent_config}: {group!r} must be a mapping with a 'name'")
    # Hydra's own settings (hydra.run.dir=..., hydra/launcher=joblib in a sweep) are not the run's config
    overrides = [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]
    parsed = OverridesParser.create().parse_overrides(overrides)
    shape = [ov.input_line for ov in parsed if ov.key_or_group == "model" or (
        ov.key_or_group.startswith("model.") and ov.key_or_group.split(".", 1)[1] in MODEL_SHAPE)]  # fmt: skip
    if shape:
        command = "sesa " + config_name.replace("_", "-")
        raise ConfigError(
            f"{', '.join(cut(str(line), 60) for line in shape)}: {command} of a checkpoint uses the model it was trained "
            f"with ({parent_config} says which); drop {'it' if len(shape) == 1 else 'them'}"
        )
    user_groups = {ov.key_or_group for ov in parsed if ov.key_or_group in GROUPS}
    user_keys = [ov for ov in parsed if ov.key_or_group not in GROUPS]

    def _compose(extra: list[str]) -> Any:
        args = plugins.with_search_path([*extra, *overrides])
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
    overlay: dict[str, Any] = {}  # the values of the options the user chose, by section
    for group in sorted(user_groups):
        option = cfg[group]["name"]
        if group == "task" and option != parent.get("task", {}).get("name"):
            continue  # another task: its own config, not the parent's
        for section, values in option_values(group, option).items():
            overlay[section] = OmegaConf.merge(overlay.get(section, {}), values)
    other_task = "task" in user_groups and cfg.task.name != parent.get("task", {}).get("name")
    for key, value in parent.items():
        if key not in schema_keys or key in ("ckpt", "step", "more_steps") or (key == "task" and other_task):
            continue  # another task than the parent's: its own config (check_checkpoint_model says if it fits)
        if key in overlay:
            value = _chosen_anew(value, OmegaConf.to_container(overlay[key], resolve=False), key)
            value = OmegaConf.to_container(OmegaConf.merge(value, overlay[key]), resolve=False)
        try:
            OmegaConf.update(cfg, key, value, merge=True)
        except Exception as exc:  # noqa: BLE001  (a value of the wrong type for the schema: the file was edited)
            raise ConfigError(f"{parent_config}: {key}: {first_line(exc)}") from None
    for ov in user_keys:  # the user's own values win over the parent's
        key = ov.key_or_group
        named = key.removesuffix(".name")
        if (
            named in NAMED_PLUGINS
            and key.endswith(".name")
            and plugin_name(OmegaConf.select(cfg, named)) != ov.value()
        ):
            OmegaConf.update(cfg, named, {}, merge=False)  # another method: the parent's settings were the old one's
        OmegaConf.update(cfg, key, ov.value(), merge=True)
    return to_object(cfg)


def _chosen_anew(parent: Any, option: Any, section: str) -> Any:
    """The parent's ``section`` without its settings of a method (:data:`sesa_cli.config.NAMED_PLUGINS`) that the
    user's group option chooses anew: ``algo=grpo`` revived from a ``passk`` run drops ``algo.advantage.k``, which
    grpo does not have (the rest of the section carries over)."""
    if not (isinstance(parent, dict) and isinstance(option, dict)):
        return parent
    out = dict(parent)
    for named in NAMED_PLUGINS:
        head, _, leaf = named.partition(".")
        if head == section and plugin_name(option.get(leaf, "")) not in ("", plugin_name(parent.get(leaf, ""))):
            out.pop(leaf, None)
    return out


def option_values(group: str, option: str) -> dict[str, Any]:
    """The values a group option's YAML sets, by config section: ``{group: values}``, or for an option in the global
    package (``# @package _global_``: ``algo=dapo`` also turns on a sampler filter) each section it sets. The file
    is sesa's own (``conf/``) or a plug-in's (sesa_cli.plugins.add_config_dir)."""
    from omegaconf import OmegaConf

    folders = plugins.config_folders()
    path = next((f / group / f"{option}.yaml" for f in folders if (f / group / f"{option}.yaml").is_file()), None)
    if path is None:
        raise ConfigError(f"{group}={option}: no {group}/{option}.yaml in {', '.join(map(str, folders))}")
    values = {k: v for k, v in OmegaConf.load(path).items() if k != "defaults"}
    header = [line for line in path.read_text().splitlines() if line.startswith("#")]
    if any(line.replace(" ", "") == "#@package_global_" for line in header):
        return {str(k): v for k, v in values.items()}
    return {group: values}


def with_total_steps(cfg: Any) -> tuple[Any, Path, int]:
    """A revive's config with ``train.steps`` = its parent checkpoint's step + ``more_steps``; the checkpoint; its
    step (what ``sesa revive`` runs, and writes to its config.yaml)."""
    from dataclasses import replace

    from sesa_cli.runs import read_trainer_state

    ckpt = pick_checkpoint(cfg.ckpt, cfg.step)
    start = int(read_trainer_state(ckpt, training=True)["step"])
    return replace(cfg, train=replace(cfg.train, steps=start + cfg.more_steps)), ckpt, start


def check_checkpoint_model(ckpt: Path, cfg: Any) -> None:
    """Before a checkpoint is loaded: it is the run's own, by the model it was trained with (its trainer_state.json
    ``config``, and its config.json's shape for ``model=tiny``) against the run's config ``cfg`` (``eval``, ``revive``:
    the run's config.yaml; a resumed ``train``: its own), and its tokenizer writes the prompts of ``cfg.task`` (a
    checkpoint evaluated on another task: a tiny model's tokenizer is its task's vocabulary, so another task's
    prompts would be all <unk>). A one-line ConfigError otherwise."""
    from sesa_cli.runs import read_json_object, read_trainer_state

    trained = _mapping(read_trainer_state(ckpt), "config")
    model = _mapping(trained, "model")
    wanted = {k: getattr(cfg.model, k) for k in MODEL_SHAPE}
    for k, value in wanted.items():
        if k in model and model[k] != value and not (isinstance(value, list) and list(model[k] or []) == value):
            raise ConfigError(
                f"{ckpt} was trained with model.{k}={cut(str(model[k]), 60)} and its run's config says "
                f"model.{k}={cut(str(value), 60)}: it is not that run's checkpoint (copied or linked in from another "
                "run?); evaluate or revive it from its own run dir"
            )
    if (ckpt / "config.json").is_file() and cfg.model.name == "tiny" and not (cfg.model.path or cfg.model.hub_id):
        hf = read_json_object(ckpt / "config.json")
        shape = {"num_hidden_layers": cfg.model.num_layers, "hidden_size": cfg.model.hidden_size,
                 "num_attention_heads": cfg.model.num_heads, "intermediate_size": cfg.model.intermediate_size}  # fmt: skip
        for k, value in shape.items():
            if hf.get(k) != value:
                raise ConfigError(
                    f"{ckpt / 'config.json'} has {k}={cut(str(hf.get(k)), 40)} where its run's config makes "
                    f"{value}: it is not that run's checkpoint"
                )
    task = _mapping(trained, "task")
    if task.get("name") not in (None, cfg.task.name):
        unknown = _unknown_prompt_tokens(ckpt, cfg)
        if unknown:
            raise ConfigError(
                f"task={cfg.task.name}: {ckpt} was trained on task={cut(str(task['name']), 40)} and its tokenizer "
                f"cannot write this task's prompts ({unknown}); use task={cut(str(task['name']), 40)}"
            )


def _mapping(data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` when it is a mapping (a checkpoint's record as written), else {} (nothing to compare)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _unknown_prompt_tokens(ckpt: Path, cfg: Any) -> str | None:
    """``N of M tokens of its first prompt are <unk>`` when the checkpoint's tokenizer cannot spell ``cfg.task``'s
    first validation prompt; None when it can (or has no <unk>: a byte-level tokenizer spells anything)."""
    from transformers import AutoTokenizer

    from sesa_cli.tasks.base import make_task

    try:
        tokenizer = AutoTokenizer.from_pretrained(ckpt)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{ckpt}: its tokenizer cannot be loaded ({first_line(exc)})") from None
    if tokenizer.unk_token_id is None:
        return None
    task = make_task(cfg.task, cfg.seed)
    ids = tokenizer(task.prompt(task.instance("val", 0)), add_special_tokens=False)["input_ids"]
    unknown = sum(1 for i in ids if i == tokenizer.unk_token_id)
    return f"{unknown} of {len(ids)} tokens of its first prompt are <unk>" if unknown else None
