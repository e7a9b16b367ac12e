"""A loaded policy: model and tokenizer, and how a task's prompt becomes token ids."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from sesa_cli.tasks.ragen import THINK

ASSISTANT_PREFILL = THINK
"""Chat prompts of the tasks end with RAGEN's pre-filled ``<think>``: with a chat template it goes after the
assistant header (the start of the model's answer), not inside the user message."""


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

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode_prompt(self, text: str, chat: bool = False) -> list[int]:
        """Token ids of a prompt. Chat style with a tokenizer that has a chat template: ``text`` is one user message
        rendered with ``apply_chat_template(add_generation_prompt=True)``, and a trailing ``<think>`` pre-fills the
        assistant turn. Otherwise (compact style, or no template): BOS (if any) + ``text``."""
        if chat and self.has_chat_template:
            user, prefill = text, ""
            if text.endswith(ASSISTANT_PREFILL):
                user, prefill = text[: -len(ASSISTANT_PREFILL)].rstrip("\n"), ASSISTANT_PREFILL
            rendered = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": user}], add_generation_prompt=True, tokenize=False
            )
            return self.encode(str(rendered) + prefill)
        bos = self.tokenizer.bos_token_id
        return ([int(bos)] if bos is not None else []) + self.encode(text)
