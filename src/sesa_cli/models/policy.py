"""A loaded policy: model and tokenizer, and how a task's prompt becomes token ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from sesa_cli.tasks.ragen import ANSWER, THINK

SPELLINGS_LIMIT = 64
"""``Policy.spellings`` lists every spelling of a text up to this many (else the tokenizer's own only)."""

ASSISTANT_PREFILLS = (THINK, ANSWER)
"""Chat prompts of the tasks end with RAGEN's pre-filled ``<think>`` (or ``<answer>``, thinking off): with a chat
template it goes after the assistant header (the start of the model's answer), not inside the user message."""


@dataclass
class Policy:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source: Path
    """The directory the weights came from (a cached base, a checkpoint, or model.path)."""
    _piece_ids: dict[str, int] | None = field(default=None, init=False, repr=False)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def spellings(self, text: str, limit: int = SPELLINGS_LIMIT) -> list[list[int]]:
        """Every sequence of (non-special) tokens that spells ``text`` exactly, the tokenizer's own spelling first,
        when there are at most ``limit``; else the tokenizer's own only.

        The model may sample any spelling of an answer, so its probability of the answer is the sum over them (the
        exact ``policy/*`` metrics, sesa_cli.rollout.episode_tree). The tiny model's word vocabularies spell an answer in
        one or a few ways (``DR|`` as ``DR`` ``|`` or ``D`` ``R`` ``|``); a subword vocabulary spells a short text in
        thousands, of which a trained model samples the tokenizer's own nearly always, so only that one is counted.
        """
        own = self.encode(text)
        pieces = self._pieces()
        longest = max((len(p) for p in pieces), default=1)
        # counts[i]: spellings of text[i:], capped at limit + 1 (only whether there are more than limit matters)
        counts = [0] * len(text) + [1]
        for i in range(len(text) - 1, -1, -1):
            counts[i] = min(
                limit + 1, sum(counts[j] for j in range(i + 1, min(len(text), i + longest) + 1) if text[i:j] in pieces)
            )
        if counts[0] > limit or counts[0] == 0:
            return [own]
        out: list[list[int]] = []

        def walk(i: int, ids: list[int]) -> None:
            if i == len(text):
                out.append(ids)
                return
            for j in range(i + 1, min(len(text), i + longest) + 1):
                if counts[j] and text[i:j] in pieces:
                    walk(j, [*ids, pieces[text[i:j]]])

        walk(0, [])
        return [own] + [ids for ids in out if ids != own]

    def _pieces(self) -> dict[str, int]:
        """Token text -> id over the tokenizer's vocabulary without its special tokens (built once)."""
        if self._piece_ids is None:
            specials = set(self.tokenizer.all_special_ids)
            self._piece_ids = {}
            for token_id in range(len(self.tokenizer)):
                if token_id not in specials:
                    piece = str(self.tokenizer.decode([token_id]))
                    if piece:
                        self._piece_ids.setdefault(piece, token_id)
        return self._piece_ids

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode_prompt(self, text: str, chat: bool = False) -> list[int]:
        """Token ids of a prompt. Chat style with a tokenizer that has a chat template: ``text`` is one user message
        rendered with ``apply_chat_template(add_generation_prompt=True)``, and a trailing ``<think>`` (or ``<answer>``)
        pre-fills the assistant turn. Otherwise (compact style, or no template): BOS (if any) + ``text``."""
        if chat and self.has_chat_template:
            user, prefill = text, ""
            for head in ASSISTANT_PREFILLS:
                if text.endswith(head):
                    user, prefill = text[: -len(head)].rstrip("\n"), head
            rendered = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": user}], add_generation_prompt=True, tokenize=False
            )
            return self.encode(str(rendered) + prefill)
        bos = self.tokenizer.bos_token_id
        return ([int(bos)] if bos is not None else []) + self.encode(text)
