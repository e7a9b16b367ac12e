"""Grid worlds moved in by named directions (FrozenLake, Sokoban): what their actions look like and how the
unskilled player of the warm start moves.

An action has a name (chat style, any case: ``Left``) and a letter, the name's first (compact style: ``L``); a
compact answer is a run of letters, a chat answer names separated by `` || `` (the valid-reply rule:
sesa_cli.tasks.layouts). The compact
vocabulary is the state's symbols (the chat legend's), the action letters and the agent layout's punctuation.
Sudoku is a grid too, but its actions are placements (``r1c2=3``), so it derives from AgentTask directly.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Sequence

from sesa_cli.tasks.agent import COMPACT_LAYOUT, AgentTask, Env

ACTION_WORD_MAX = 2
"""The longest run of action letters that is one token of the tiny model (``model.tokenizer=words``)."""
ROW_MIN_COUNT = 2
"""A row of a state is one token of the tiny model when the warm-start corpus holds it at least this often."""


def draw_grid(height: int, width: int, symbol: Callable[[int, int], str]) -> str:
    """The text picture of a grid world's state: ``height`` lines of ``width`` symbols, ``symbol(row, col)`` each."""
    return "\n".join("".join(symbol(r, c) for c in range(width)) for r in range(height))


class GridTask(AgentTask):
    """An agent task whose ``action_names`` are moves with distinct first letters; ``chat_vocab`` names every
    symbol a state shows."""

    def sketch_followed(self) -> bool:
        """Compact style with first-turn sketches and plan lines in the warm start, as the tiny FrozenLake and Sokoban
        recipes set them: stage II plays its plan in 0.99 (FrozenLake) and 0.96-0.975 (Sokoban) of the episodes at
        the base (docs/samplers.md); whole-episode plans, or a base without plan lines, follow <= 0.17."""
        one_turn = 0 < self.cfg.sketch_max_actions <= self.cfg.max_actions_per_turn
        return not self.chat and one_turn and self.cfg.warm_start_plan_lines > 0

    def alphabet(self) -> str:
        symbols = "".join(symbol for symbol, _ in self.chat_vocab)
        return symbols + "".join(a[0] for a in self.action_names) + COMPACT_LAYOUT

    def vocabulary(self, corpus: Sequence[str]) -> list[str]:
        """The characters; every run of 1..``ACTION_WORD_MAX`` action letters (``DR``: a turn of two actions is one
        token; the letters of a longer run are cut into pairs); each such run as a plan where ``solve_prompt`` quotes
        it, ``!DR:``, one token (see below); and every row of a state (a run of two or more state symbols) that the
        corpus holds at least ``ROW_MIN_COUNT`` times (a rarer row is spelled by its symbols, so the base has read
        rows that way too).

        Why a quoted plan is one token: the first response of the episode then follows a token that names its plan,
        so carrying out the plan is a bigram, which the warm start teaches within a few hundred steps. Quoted as
        ``!`` ``DR`` ``:``, the base had to copy an earlier token, which the 1M-parameter model learned late and
        unreliably: in paired warm starts (FrozenLake tiny, the same corpus) the copy appeared after 400 steps for
        one initialisation and not within 800 for another (docs/samplers.md)."""
        letters = [a[0] for a in self.action_names]
        symbols = "".join(symbol for symbol, _ in self.chat_vocab)
        if set(letters) & set(symbols):
            raise ValueError(f"task {self.name!r}: action letters {letters} are also state symbols {symbols!r}")
        runs = [""]
        actions: list[str] = []
        for _ in range(ACTION_WORD_MAX):
            runs = [run + letter for run in runs for letter in letters]
            actions += runs
        row = re.compile(f"[{re.escape(symbols)}]{{2,}}")
        counts = Counter(word for line in corpus for word in row.findall(line))
        rows = sorted(word for word, n in counts.items() if n >= ROW_MIN_COUNT)
        # a row after a line break is one token too, and so is each mark that ends a state (``\n:`` a turn follows,
        # ``\n?`` plans follow): an observation of h rows is h + 1 tokens instead of 2h + 1 (a FrozenLake turn 7
        # tokens instead of 12, so the update and the warm start read ~40% fewer)
        broken = re.compile(f"\n[{re.escape(symbols)}]{{2,}}")
        counts_broken = Counter(word for line in corpus for word in broken.findall(line))
        broken_rows = sorted(word for word, n in counts_broken.items() if n >= ROW_MIN_COUNT)
        quoted = [self.solve_prompt_plan(a) for a in actions]
        marks = ["\n:", "\n?"]
        return super().vocabulary(corpus) + [a for a in actions if len(a) > 1] + quoted + rows + broken_rows + marks

    def compact_tokens(self, body: str) -> list[str]:
        """One character per action (a valid reply is its letters and the stop, nothing else)."""
        return list(body)

    def compact_action(self, token: str) -> str | None:
        return next((a for a in self.action_names if a[0] == token), None)

    def compact_word(self, action: str) -> str:
        return action[0]

    def chat_action(self, token: str) -> str | None:
        name = token.strip().lower()  # RAGEN matches action names case-insensitively
        return next((a for a in self.action_names if a.lower() == name), None)

    def chat_word(self, action: str) -> str:
        return action

    def listable_actions(self) -> Sequence[str] | None:
        """Every move: a grid world is deterministic unless a subclass says otherwise (slippery FrozenLake)."""
        return self.action_names

    def random_actions(self, env: Env, rng: random.Random, k: int) -> list[str]:
        """Uniform moves (walls and holes included)."""
        return [rng.choice(self.action_names) for _ in range(k)]

    def longest_plan(self) -> list[str]:
        """sketch_max_actions actions."""
        return [self.action_names[0]] * self.sketch_max_actions
