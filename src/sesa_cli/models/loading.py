"""Load a policy (model + tokenizer) from a ModelConfig: the cached tiny base, or any local HF directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from sesa_cli.config import ConfigError, ModelConfig
from sesa_cli.tasks.base import Task


@dataclass
class Policy:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source: Path
    """The directory the weights came from (a cached base, a checkpoint, or model.path)."""

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))


def load_pretrained_dir(path: Path, device: str = "cpu") -> Policy:
    """Load a Hugging Face directory (a checkpoint or a local model); a clear ConfigError if it is not one."""
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} is not a model directory (no config.json)")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return Policy(model=model, tokenizer=tokenizer, source=path)


def load_policy(cfg: ModelConfig, task: Task, device: str = "cpu") -> Policy:
    """The policy named by ``cfg``: ``model.path`` if set, else the warm-started tiny base for ``task``."""
    if cfg.path:
        path = Path(cfg.path).expanduser()
        if not path.is_dir():
            raise ConfigError(f"model.path={cfg.path} does not exist")
        return load_pretrained_dir(path, device)
    if cfg.name != "tiny":
        raise ConfigError(f"model={cfg.name} is not available yet; set model.path to a local Hugging Face directory")
    from sesa_cli.models.tiny import tiny_base_dir

    return load_pretrained_dir(tiny_base_dir(cfg, task), device)
