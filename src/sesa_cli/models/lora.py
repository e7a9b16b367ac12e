"""LoRA adapters (peft) on any causal LM: training only the adapters, with the base as the KL reference.

With ``model.lora=true`` the reference policy of the KL term is the same model with its adapter disabled
(:func:`reference`), so there is no second copy of the weights; checkpoints hold the adapter only (a few MB) and
are reloaded on top of the base named by the run's config.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import torch
from transformers import PreTrainedModel

from sesa_cli.config import ModelConfig


def add_lora(model: PreTrainedModel, cfg: ModelConfig) -> PreTrainedModel:
    """Wrap ``model`` in fresh LoRA adapters (B = 0, so the wrapped model starts equal to the base)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,  # type: ignore[arg-type]  # peft annotates an int; it only computes alpha / r
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_target_modules),
        task_type="CAUSAL_LM",
    )
    try:
        with _peft_asks_a_deprecated_name():
            # peft's annotations of the two entry points changed between releases (PeftModel, then Any)
            return cast(PreTrainedModel, get_peft_model(model, config))
    except ValueError as exc:  # e.g. a target module name the model does not have
        from sesa_cli.config import ConfigError

        raise ConfigError(f"model.lora_target_modules: {str(exc).splitlines()[0]}") from None


def load_adapter(model: PreTrainedModel, ckpt: Path) -> PreTrainedModel:
    """The base ``model`` with the (trainable) adapter saved in ``ckpt``."""
    from peft import PeftModel

    with _peft_asks_a_deprecated_name():
        return cast(PreTrainedModel, PeftModel.from_pretrained(model, ckpt, is_trainable=True))


@contextlib.contextmanager
def _peft_asks_a_deprecated_name() -> Iterator[None]:
    """peft's ``PeftModel`` reads ``model.is_gradient_checkpointing``, which transformers 5 deprecated (a
    FutureWarning naming its new name, ``is_activation_checkpointing``): printed on every LoRA run, about peft's code,
    nothing a user can act on. That one warning is ignored while peft wraps the model; any other stays."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def is_lora(model: torch.nn.Module) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        return False
    return isinstance(model, PeftModel)


@contextlib.contextmanager
def reference(model: PreTrainedModel) -> Iterator[PreTrainedModel]:
    """The KL reference policy of a LoRA model: the same model with its adapter disabled (no weight copy)."""
    with model.disable_adapter():  # type: ignore[operator]
        yield model
