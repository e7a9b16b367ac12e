"""RAGEN's text format, once: the two renderings and the tolerant parser shared by the RAGEN tasks (the agent tasks
of sesa_cli.tasks.agent, Countdown and Math).

``task.style=compact`` (the character-level tiny model): an answer ends with ``stop`` = ``|`` and the answers of a
sequential group follow one another directly (``between`` = "").

``task.style=chat`` (instruction-tuned models): RAGEN's own text, with no model chat template applied. A context is
the system line and the env instruction (:meth:`RagenTask.chat_header`), then a turn block (:func:`turn_text`):
``Turn i:``, ``State:``, the state and RAGEN's format reminder. Every context ends with the ``<think>`` RAGEN
pre-fills, so a response reads ``...</think><answer>...</answer>`` and ``stop`` = ``</answer>``; sequential answers
are separated by a newline. With a tokenizer's chat template the pre-filled ``<think>`` goes after the assistant
header (sesa_cli.models.policy.Policy.encode_prompt). A sketch (SESA stage I: a plan, a first step, a method) is
asked for as ``<answer>...</answer>`` alone, without thinking (:func:`sketch_request`).

Model output is untrusted: :func:`think_answer` reads RAGEN's format in linear time and never raises; every text is
cut at ``MAX_TEXT`` characters before it is parsed (a bound on the work a hostile string can cause).
"""

from __future__ import annotations

from typing import ClassVar

from sesa_cli.config import TaskConfig
from sesa_cli.tasks.base import Task

COMPACT_STOP = "|"
"""The compact style's stop: one character (one token of the tiny model)."""
CHAT_STOP = "</answer>"
"""The chat style's stop: the end of RAGEN's answer."""
THINK = "<think>"
"""RAGEN pre-fills the generation with ``<think>``: every chat context ends with it."""
SYSTEM_PROMPT = "You're a helpful assistant. "
"""RAGEN's system text, which starts every chat prompt."""
ANSWER = "<answer>"
"""Opens RAGEN's answer; pre-fills the assistant turn instead of ``<think>`` when thinking is off
(``task.think=false``)."""
ANSWER_ONLY = "Give only the final answer inside <answer></answer>."
"""The instruction's answer rule where a reply is its answer alone (reasoning-gym; math with ``task.think=false``)."""
FORMAT_PROMPT = "<think>...</think><answer>...</answer>"
"""RAGEN's format reminder in the turn text."""
SPECIAL_TOKENS = ("<think>", "</think>", "<answer>", "</answer>", "<|im_start|>", "<|im_end|>")
"""Removed from an answer's content before it is read (RAGEN's ``special_token_list``)."""
ACTION_SEP = "||"
"""Separates the actions of one answer (RAGEN's ``action_sep``; the prompts show it as `` || ``)."""
MAX_TEXT = 100_000
"""Longer texts are cut before parsing."""


def think_answer(text: str) -> tuple[str, str] | None:
    """(think, answer) of RAGEN's ``<think>(.*?)</think>\\s*<answer>(.*?)</answer>`` (DOTALL) searched in
    ``<think>`` + ``text``: chat prompts end with the pre-filled ``<think>``, so the completion continues it.

    A hand-written scan with the regex's first-match semantics in linear time (no backtracking); never raises.
    """
    parts = answer_parts(text)
    return None if parts is None else (parts[0], parts[1])


def answer_parts(text: str) -> tuple[str, str, str] | None:
    """:func:`think_answer`'s (think, answer) and the text after the match's ``</answer>`` (the chat layout's valid
    reply has only whitespace there). Never raises."""
    if not isinstance(text, str):
        return None
    text = THINK + text[:MAX_TEXT]
    start = len(THINK)
    pos = start
    while (end := text.find("</think>", pos)) != -1:
        k = end + len("</think>")
        while k < len(text) and text[k].isspace():
            k += 1
        if text.startswith(ANSWER, k):
            close = text.find(CHAT_STOP, k + len(ANSWER))
            if close == -1:
                return None  # no later </think> can be followed by a closed answer either
            return text[start:end], text[k + len(ANSWER) : close], text[close + len(CHAT_STOP) :]
        pos = end + 1
    return None


def answer_only(text: str) -> str | None:
    """The answer of a reply written after a pre-filled ``<answer>`` (RAGEN's ``enable_think: false``): the text
    before the first ``</answer>``; None when the answer is never closed (cut at the length limit). Never raises."""
    if not isinstance(text, str):
        return None
    content, closed, _ = text[:MAX_TEXT].partition(CHAT_STOP)
    return content if closed else None


def answer_actions(text: str) -> list[str] | None:
    """The actions of a chat response as RAGEN's context manager reads them (the answer's content without special
    tokens, split on ``||``, stripped, empty ones dropped); None if the format is wrong. Never raises."""
    parsed = think_answer(text)
    if parsed is None:
        return None
    answer = parsed[1]
    for token in SPECIAL_TOKENS:
        answer = answer.replace(token, "").strip()
    return split_actions(answer)


def split_actions(answer: str) -> list[str]:
    """The actions an answer's content names: split on ``||``, stripped, empty ones dropped."""
    return [a.strip() for a in answer.split(ACTION_SEP) if a.strip()]


def compact_answer(completion: str, stop: str) -> str | None:
    """A compact answer: the text before the first ``stop``, stripped; None when it is empty or there is no stop
    (the row was cut at max_new_tokens, like RAGEN's missing ``</answer>``). Never raises."""
    if not isinstance(completion, str):
        return None
    head, found, _ = completion[:MAX_TEXT].partition(stop)
    return head.strip() or None if found else None


def answer_block(content: str) -> str:
    """``<answer>content</answer>``."""
    return f"{ANSWER}{content}{CHAT_STOP}"


def turn_text(turn: int, state: str, actions_left: int, max_words: int, hint: str = "", plan: str = "") -> str:
    """RAGEN's turn block, ending with the pre-filled ``<think>``: ``Turn i:``, ``State:``, the state, and the format
    reminder that quotes ``max_words`` (RAGEN's ``max_tokens``; not a generation limit). A sketch to carry out is
    quoted as ``hint`` under the state (single-turn tasks: ``First step: ...``, ``Method: ...``) or as ``plan``
    after the reminder (agent tasks: ``Plan: ...``); each is a whole line."""
    return (
        f"\nTurn {turn}:\nState:\n{state}\n{hint}You have {actions_left} actions left. Always output: {FORMAT_PROMPT} "
        f"with no extra text. Strictly follow this format. Max response length: {max_words} words (tokens).\n"
        f"{plan}{THINK}"
    )


def sketch_request(header: str, state: str, request: str) -> str:
    """The context of the first sketch (later ones continue it): the header, the state, what to propose, and that
    the answer is ``<answer>...</answer>`` alone."""
    return f"{header}\nState:\n{state}\n{request} Always output: <answer>...</answer> with no extra text.\n"


class RagenTask(Task):
    """A task written in RAGEN's format, compact or chat by ``task.style`` (see the module docstring)."""

    chat_instruction: ClassVar[str] = ""
    """RAGEN's env instruction (its ``envs.yaml`` ``env_instruction``)."""
    sketch_line: ClassVar[int | None] = None
    """Single-turn tasks quote a sketch's first line only, at most this many characters; None: the whole sketch."""

    def __init__(self, cfg: TaskConfig, seed: int = 0) -> None:
        super().__init__(cfg, seed)
        # stop/between depend on the style, so they are set per instance.
        self.stop = CHAT_STOP if self.chat else COMPACT_STOP
        self.between = "\n" if self.chat else ""

    def instruction(self) -> str:
        """The env instruction of the chat style."""
        return self.chat_instruction

    def chat_header(self) -> str:
        """What every chat context starts with: RAGEN's system text and the env instruction."""
        return SYSTEM_PROMPT + self.instruction()

    def sketch_content(self, sketch: str) -> str:
        """In chat style the content of the sketch's ``<answer>``, stripped; in compact style the text before
        ``stop``; with ``sketch_line``, only the first line of that, stripped and cut to ``sketch_line`` characters.
        Never raises (any input type)."""
        if not isinstance(sketch, str):
            return ""
        body = sketch[:MAX_TEXT]
        if self.chat:
            body = body.split(ANSWER, 1)[-1]
        body = body.split(self.stop, 1)[0]
        if self.sketch_line is None:
            return body.strip() if self.chat else body
        return body.strip().split("\n", 1)[0][: self.sketch_line]
