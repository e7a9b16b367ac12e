"""The warm-start corpora and their cache keys are pinned: a cached tiny base is reused whenever its key matches.

sesa_cli.models.tiny caches a warm-started base under a key made of the model config, the task's
``warm_start_key()`` and its ``alphabet()``; the corpus text itself is not part of the key. A change to a corpus
that leaves the key alone would let every later run reuse a base trained on the old corpus (and a refactor that
changes a corpus by accident would change every measured number). So each task's first 500 corpus lines, drawn
exactly as the warm start draws them, are pinned here with the key they are cached under. A deliberate corpus
change bumps ``v`` in the task's ``warm_start_key`` and updates both columns of its row.
"""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from sesa_cli.tasks.base import make_task
from tests.conftest import compose_train

# label: (overrides, sha256 of the 500 lines joined by "\n", sha256 of [warm_start_key(), alphabet()]), 16 hex each.
PINNED = {
    "path": (["task=path"], "28ac31493c138610", "fc5417a8fcd9d592"),
    "countdown": (["task=countdown"], "e12f2e0bf7a4102a", "167d6b6dc01c8ff5"),
    "math": (["task=math"], "20febfae2d0b4489", "e09aea3316d3812e"),
    "frozenlake": (["task=frozenlake"], "2a9e83fe03329e9a", "ef74d7191b1e7957"),
    "frozenlake_tiny": (["experiment=frozenlake_tiny"], "0cac49fcdf73f32c", "f2774ece7073670d"),
    "frozenlake_chat": (["task=frozenlake", "task.style=chat"], "ea11d55c897ab7bf", "78f4d7cd0a16d39d"),
    "sokoban": (["task=sokoban"], "a2ced753f957079d", "7960977d7777f2c2"),
    "sokoban_chat": (["task=sokoban", "task.style=chat"], "1f8359bedaa28b7d", "91078ca3242da82c"),
    "sudoku": (["task=sudoku"], "62b24e7c8b5e5223", "b0b7a579090fbfb6"),
    "sudoku_chat": (["task=sudoku", "task.style=chat"], "8db3db83f7a19556", "8fe2aa8e460eff41"),
}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize("label", sorted(PINNED))
def test_corpus_and_cache_key_are_pinned(label: str) -> None:
    overrides, corpus_sha, key_sha = PINNED[label]
    task = make_task(compose_train(overrides).task, 0)
    lines = task.warm_start_corpus(random.Random(f"warm-start-{task.name}"), 500)
    assert len(lines) == 500
    key = _digest(json.dumps([task.warm_start_key(), task.alphabet()], sort_keys=True))
    corpus = _digest("\n".join(lines))
    if corpus != corpus_sha and key == key_sha:
        pytest.fail(f"{label}: the warm-start corpus changed but its cache key did not: bump v in warm_start_key")
    assert (corpus, key) == (corpus_sha, key_sha), f"{label}: a deliberate change updates this row of PINNED"
