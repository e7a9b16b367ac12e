"""The two layouts of an agent task (``task.style``), one object each: how a context is rendered, what a valid reply
is, and the list of valid replies the exact policy walker enumerates. The rule lives here and nowhere else.

**A valid reply** names 1..``max_actions_per_turn`` actions, every one known, in the style's format and
nothing else:

* ``compact``: exactly the canonical rendering of its actions and then the stop (``DR|``; Sudoku ``124 141|``):
  no other character before the stop, none after it, no lower-case letter or space the canonical form lacks;
* ``chat``: RAGEN's ``...</think><answer>A || B</answer>`` (free text inside ``<think>``, only whitespace between
  ``</think>`` and ``<answer>`` and after ``</answer>``), every item between ``||`` an action name (RAGEN's
  case-insensitive names).

An invalid reply runs none of its actions, pays ``task.format_penalty`` and ends the episode unsolved. That is
stricter than RAGEN, which drops unknown actions, runs the known ones, truncates extra ones silently and plays on.
Why: a reply the rule rejects must never win. Under RAGEN's reading a compact policy learned to win with replies
such as ``RD\\nP__GRD|`` (its first two letters ran, the rest was dropped): ``eval/success`` 0.815 while the exact
walker, which enumerates clean turns only, gave the same policy a target mass of 0.017 (docs/tasks.md, "What a valid reply is"). With the
episode ended at the first invalid reply, every winning episode is a sequence of valid replies; the compact
layout lists every valid reply (:meth:`CompactLayout.turn_responses`), so the walker enumerates every winning
episode (up to its pruning) and the reward, ``eval/success``, ``eval/valid`` (an episode of valid replies only),
``policy/*`` and the collapse monitor read one definition.

A plan (SESA stage I's sketch) follows the same rule with ``sketch_max_actions`` actions: compact ``DR|``, chat
``<answer>Down || Right</answer>`` with nothing else but whitespace around it.

Model output is untrusted: every parser here accepts any value, never raises and reads at most ``ragen.MAX_TEXT``
characters.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, Protocol

from sesa_cli.tasks import ragen

MAX_TURN_RESPONSES = 2000
"""The longest list of one turn's responses :meth:`CompactLayout.turn_responses` returns (4 actions, up to 5 per
turn: 1364); a longer one is not walked (the task then has sampled diversity estimates only)."""


class Budget(Protocol):
    """The task settings a layout reads (``AgentTaskConfig``'s fields)."""

    @property
    def max_actions_per_turn(self) -> int: ...

    @property
    def max_actions(self) -> int: ...


class ActionWords(Protocol):
    """What a layout asks its task (``sesa_cli.tasks.agent.AgentTask``): how one action is written in each style."""

    @property
    def cfg(self) -> Budget: ...

    @property
    def chat_max_words(self) -> int: ...

    @property
    def compact_sep(self) -> str: ...

    def compact_tokens(self, body: str) -> list[str]:
        """Split a compact answer into raw action tokens. Never raises."""
        ...

    def compact_action(self, token: str) -> str | None:
        """The canonical action a compact token names, or None. Never raises."""
        ...

    def compact_word(self, action: str) -> str:
        """How the compact style writes a canonical action."""
        ...

    def chat_action(self, token: str) -> str | None:
        """The canonical action a chat item (the text between ``||``) names, or None. Never raises."""
        ...

    def chat_word(self, action: str) -> str:
        """How the chat style writes a canonical action."""
        ...

    def listable_actions(self) -> Sequence[str] | None:
        """The actions the walker may list replies of (None: the episodes cannot be walked)."""
        ...

    def chat_header(self) -> str: ...

    def solve_prompt_plan(self, plan: str) -> str: ...


class Layout(ABC):
    """One style's rendering and reading of an agent task's text (see the module docstring for the rule)."""

    name: ClassVar[str]
    stop: ClassVar[str]

    def __init__(self, task: ActionWords) -> None:
        self.task = task

    # ---------------------------------------------------------------- actions
    @abstractmethod
    def canonical(self, token: str) -> str | None:
        """The canonical action one raw token names, or None. Never raises."""

    @abstractmethod
    def encode(self, actions: Sequence[str]) -> str:
        """The text naming canonical ``actions`` (compact: the task's words joined; chat: `` || ``)."""

    @abstractmethod
    def actions(self, text: object, most: int) -> list[str] | None:
        """The canonical actions of ``text`` if it is a valid reply of 1..``most`` actions, else None (the rule).
        Never raises."""

    @abstractmethod
    def response(self, actions: Sequence[str]) -> str:
        """The valid reply naming ``actions`` (what the warm start teaches)."""

    def reply(self, text: object) -> list[str] | None:
        """The canonical actions of a valid turn reply (1..``max_actions_per_turn``), else None. Never raises."""
        return self.actions(text, self.task.cfg.max_actions_per_turn)

    def turn_responses(self) -> list[str] | None:
        """Every valid reply of one turn, each once, when the walker can enumerate them; None otherwise."""
        return None

    # ---------------------------------------------------------------- contexts
    @abstractmethod
    def prompt(self, state: str) -> str:
        """The first context: ends where the first reply begins."""

    @abstractmethod
    def feedback(self, state: str, turn: int, actions_left: int, shown_reward: float) -> str:
        """The text after a turn that did not end the episode (``turn``: the number of the next turn)."""

    # ---------------------------------------------------------------- plans (SESA stage I)
    @abstractmethod
    def sketch_head(self, state: str) -> str:
        """The context of the first plan of a chain."""

    @abstractmethod
    def sketch(self, actions: Sequence[str]) -> str:
        """The valid plan naming ``actions``."""

    @abstractmethod
    def plan(self, sketch: object, most: int) -> list[str] | None:
        """The canonical actions of a valid plan of 1..``most`` actions, else None. Never raises."""

    @abstractmethod
    def solve_prompt(self, state: str, plan: str) -> str:
        """The first context with the plan's text ``plan`` quoted in it."""


class CompactLayout(Layout):
    """``<state>\\n:<actions>|\\n<state>\\n:<actions>|...``; plans are drafted as ``<state>\\n?<plan>|<plan>|...`` and
    followed from ``<state>\\n!<plan>:`` (sesa_cli.tasks.agent's module docstring)."""

    name = "compact"
    stop = ragen.COMPACT_STOP

    def canonical(self, token: str) -> str | None:
        return self.task.compact_action(token)

    def encode(self, actions: Sequence[str]) -> str:
        return self.task.compact_sep.join(self.task.compact_word(a) for a in actions)

    def actions(self, text: object, most: int) -> list[str] | None:
        if not isinstance(text, str):
            return None
        head, found, tail = text[: ragen.MAX_TEXT].partition(self.stop)
        if not found or tail:
            return None  # cut before the stop (RAGEN's missing </answer>), or text after it
        named = [self.task.compact_action(t) for t in self.task.compact_tokens(head)]
        if not 1 <= len(named) <= most or None in named:
            return None
        actions = [a for a in named if a is not None]
        return actions if self.encode(actions) == head else None  # the canonical rendering, nothing else

    def response(self, actions: Sequence[str]) -> str:
        return self.encode(actions) + self.stop

    def turn_responses(self) -> list[str] | None:
        """Every valid reply: each run of 1..``max_actions_per_turn`` listable actions in its canonical rendering and
        the stop, at most ``MAX_TURN_RESPONSES`` of them (else None)."""
        listable = self.task.listable_actions()
        most = self.task.cfg.max_actions_per_turn
        if not listable or sum(len(listable) ** k for k in range(1, most + 1)) > MAX_TURN_RESPONSES:
            return None
        out: list[str] = []
        runs: list[list[str]] = [[]]
        for _ in range(most):
            runs = [[*run, a] for run in runs for a in listable]
            out += [self.response(run) for run in runs]
        return out

    def prompt(self, state: str) -> str:
        return f"{state}\n:"

    def feedback(self, state: str, turn: int, actions_left: int, shown_reward: float) -> str:
        return f"\n{state}\n:"

    def sketch_head(self, state: str) -> str:
        return f"{state}\n?"

    def sketch(self, actions: Sequence[str]) -> str:
        return self.encode(actions) + self.stop

    def plan(self, sketch: object, most: int) -> list[str] | None:
        return self.actions(sketch, most)

    def solve_prompt(self, state: str, plan: str) -> str:
        return f"{state}\n{self.task.solve_prompt_plan(plan)}"


class ChatLayout(Layout):
    """RAGEN's format (sesa_cli.tasks.ragen): the system text, ``Turn i:`` / ``State:`` blocks and ``Reward:`` lines;
    a reply reads ``...</think><answer>Right || Up</answer>``."""

    name = "chat"
    stop = ragen.CHAT_STOP

    def canonical(self, token: str) -> str | None:
        return self.task.chat_action(token)

    def encode(self, actions: Sequence[str]) -> str:
        return f" {ragen.ACTION_SEP} ".join(self.task.chat_word(a) for a in actions)

    def _items(self, answer: str, most: int) -> list[str] | None:
        named = [self.task.chat_action(item.strip()) for item in answer.split(ragen.ACTION_SEP)]
        if not 1 <= len(named) <= most or None in named:
            return None  # an empty item, or text between || that is not an action
        return [a for a in named if a is not None]

    def actions(self, text: object, most: int) -> list[str] | None:
        parts = ragen.answer_parts(text) if isinstance(text, str) else None
        if parts is None or parts[2].strip():
            return None  # no <think>...</think><answer>...</answer>, or text after </answer>
        return self._items(parts[1], most)

    def response(self, actions: Sequence[str]) -> str:
        return f"I will try {', '.join(actions)}.</think>" + ragen.answer_block(self.encode(actions))

    def prompt(self, state: str) -> str:
        cfg = self.task.cfg
        return self.task.chat_header() + ragen.turn_text(1, state, cfg.max_actions, self.task.chat_max_words)

    def feedback(self, state: str, turn: int, actions_left: int, shown_reward: float) -> str:
        reward_line = f"\nReward:\n{round(shown_reward, 6)}\n"
        return reward_line + ragen.turn_text(turn, state, actions_left, self.task.chat_max_words)

    def sketch_head(self, state: str) -> str:
        request = "Propose a plan: the sequence of actions you would take, different from every plan listed so far."
        return ragen.sketch_request(self.task.chat_header(), state, request)

    def sketch(self, actions: Sequence[str]) -> str:
        return ragen.answer_block(self.encode(actions))

    def plan(self, sketch: object, most: int) -> list[str] | None:
        if not isinstance(sketch, str):
            return None
        text = sketch[: ragen.MAX_TEXT].strip()
        opening = ragen.ANSWER
        if not (text.startswith(opening) and text.endswith(self.stop)):
            return None  # the request asks for <answer>...</answer> with no extra text
        return self._items(text[len(opening) : -len(self.stop)], most)

    def solve_prompt(self, state: str, plan: str) -> str:
        cfg = self.task.cfg
        turn = ragen.turn_text(1, state, cfg.max_actions, self.task.chat_max_words, plan=f"Plan: {plan}\n")
        return self.task.chat_header() + turn


LAYOUTS: dict[str, type[Layout]] = {"compact": CompactLayout, "chat": ChatLayout}
"""``task.style`` -> its layout."""
