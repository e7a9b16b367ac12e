"""Stop strings that are not one token.

The engine stops a row on a stop *token*. A task's stop string is one token in the tiny model's character
vocabulary, but not in a BPE vocabulary: SmolLM2 splits ``</answer>`` into ``</`` ``answer`` ``>``, and the
split depends on the neighbouring text, so no fixed id sequence can be matched. Instead the engine asks
:func:`stop_string_fn`'s predicate after every token whether the decoded tail of the row contains the string.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def stop_string_fn(policy: Any, stop: str) -> Callable[[list[int]], bool] | None:
    """A predicate ``ids -> bool``: the completion ``ids`` has just produced ``stop``. None when ``stop`` is empty or
    a single token (the engine's stop ids already cover it).

    Only the last ``len(stop) + 1`` tokens are decoded (a token decodes to at least one character, so they
    hold any occurrence that the newest token completed; an earlier occurrence would have stopped the row before).
    """
    if not stop or len(policy.encode(stop)) == 1:
        return None
    tokenizer = policy.tokenizer
    window = len(stop) + 1

    def stopped(ids: list[int]) -> bool:
        return stop in tokenizer.decode(ids[-window:])

    return stopped
