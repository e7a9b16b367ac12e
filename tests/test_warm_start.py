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

# FrozenLake as RAGEN sets it (conf/task/frozenlake.yaml), undoing what model=tiny adds (conf/task_model/)
RAGEN_ON_TINY = ["task.is_slippery=true", "task.random_start_goal=true", "task.max_actions_per_turn=5",
                 "task.warm_start_captions=0", "task.sketch_max_actions=0", "task.warm_start_plan_lines=0"]  # fmt: skip

# label: (overrides, sha256 of the 500 lines joined by "\n", sha256 of [warm_start_key(), alphabet()]), 16 hex each.
PINNED = {
    "path": (["task=path"], "28ac31493c138610", "fc5417a8fcd9d592"),
    "countdown": (["task=countdown"], "d68bc0a6358a3114", "67d760b9c66bbcdc"),
    "math": (["task=math"], "20febfae2d0b4489", "e09aea3316d3812e"),
    "frozenlake": (["task=frozenlake", *RAGEN_ON_TINY], "1d7d17936154bac1", "1e75d6a5fbd54fcd"),
    "frozenlake_tiny": (["experiment=frozenlake_tiny"], "68c5158eb70b9824", "627769c7e338d511"),
    "frozenlake_chat": (
        ["task=frozenlake", "task.style=chat", *RAGEN_ON_TINY],
        "56a9c7e5bb99acfd",
        "b15bedd6157f53ce",
    ),
    "sokoban": (["task=sokoban"], "3ab48446319b0c8f", "052787e0f598b4ec"),
    "sokoban_chat": (["task=sokoban", "task.style=chat"], "99fd8f42b48cf2b7", "90ba5f2a85f2048d"),
    "sudoku": (["task=sudoku"], "887446284e4da58f", "ba1ead0e96aa8ab4"),
    "sudoku_chat": (["task=sudoku", "task.style=chat"], "f3466338e9c594e3", "3663aa10b19d8883"),
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
