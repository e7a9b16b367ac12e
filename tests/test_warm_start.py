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
from collections.abc import Callable
from pathlib import Path

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
        "d6c3606de6796177",
        "19d338b4ba92b1c1",
    ),
    "sokoban": (["task=sokoban"], "3ab48446319b0c8f", "4918511adbfa8142"),
    "sokoban_chat": (["task=sokoban", "task.style=chat"], "bd9a273cfd879a08", "fd78db0ca6cc087b"),
    "sudoku": (["task=sudoku"], "887446284e4da58f", "ba1ead0e96aa8ab4"),
    "sudoku_chat": (["task=sudoku", "task.style=chat"], "696ccb246f4719c3", "2d70db533fc268bb"),
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


# ----------------------------------------------------------------------- issue 50 cases 6 and 9: the cache is whole
QUICK = ["task=path", "task.regions=2", "task.cities=2", "task.districts=2", "task.num_targets=4", "model.hidden_size=16",
         "model.num_heads=2", "model.num_layers=1", "model.intermediate_size=32", "model.warm_start_steps=2",
         "model.warm_start_corpus_size=50"]  # fmt: skip
"""A base built in about a second: the cache's mechanics, not a useful model."""


def _quick_base(cache: Path, extra: tuple[str, ...] = ()) -> tuple[Path, Callable[[], Path]]:
    from sesa_cli.models.tiny import cache_key, tiny_base_dir

    cfg = compose_train([*QUICK, *extra, f"model.cache_dir={cache}"])
    task = make_task(cfg.task, 0)
    return cache / cache_key(cfg.model, task), lambda: tiny_base_dir(cfg.model, task)


def _files(path: Path) -> dict[str, object]:
    """Every file's bytes (warm_start.json's record without its wall time)."""
    files: dict[str, object] = {p.name: p.read_bytes() for p in path.iterdir()}
    files["warm_start.json"] = {k: v for k, v in json.loads(files["warm_start.json"]).items() if k != "seconds"}
    return files


@pytest.mark.parametrize(
    "damage",
    ["marker-removed", "weights-truncated", "tokenizer-not-json", "config-missing", "tokenizer-swapped"],
)
def test_a_damaged_cached_base_is_built_again_whole_never_used(tmp_path, caplog, damage) -> None:
    target, base = _quick_base(tmp_path / "cache")
    assert base() == target
    built = _files(target)
    if damage == "marker-removed":  # a build killed before its last file (case 6: then OSError, a .tmp, each run)
        (target / "warm_start.json").unlink()
    elif damage == "weights-truncated":
        (target / "model.safetensors").write_bytes(built["model.safetensors"][:500])
    elif damage == "tokenizer-not-json":
        (target / "tokenizer.json").write_text("{")
    elif damage == "config-missing":
        (target / "config.json").unlink()
    else:  # the tokenizer of a base with more tokens than this model has embeddings
        tokenizer = json.loads(built["tokenizer.json"])
        tokenizer["model"]["vocab"].update({f"extra{i}": 1000 + i for i in range(500)})
        (target / "tokenizer.json").write_text(json.dumps(tokenizer))
    assert base() == target
    assert f"{target} is damaged" in caplog.text
    assert _files(target) == built  # the same build again: the warm start is deterministic
    assert sorted(p.name for p in target.parent.iterdir()) == sorted([target.name, target.name + ".lock"])
    assert base() == target  # and used from then on, not rebuilt each run
    assert caplog.text.count(f"{target} is damaged") == 1


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda rec, cfg: rec["built_for"]["model"].update(tokenizer="words"), "model.tokenizer: words -> chars"),
        (lambda rec, cfg: rec.pop("built_for") and rec.update(tokenizer="words"), "tokenizer: words -> chars"),
        (lambda rec, cfg: cfg.update(num_hidden_layers=3), "num_hidden_layers: 3 -> 1"),
        (lambda rec, cfg: rec.update(vocabulary=7), "vocab_size: "),
    ],
    ids=["recorded-config", "older-record", "model-shape", "vocabulary"],
)
def test_a_cached_base_built_for_another_config_is_refused_with_one_line(tmp_path, change, expected) -> None:
    from sesa_cli.config import ConfigError

    target, base = _quick_base(tmp_path / "cache")
    base()
    record = json.loads((target / "warm_start.json").read_text())
    config = json.loads((target / "config.json").read_text())
    change(record, config)
    (target / "warm_start.json").write_text(json.dumps(record))
    (target / "config.json").write_text(json.dumps(config))
    before = _files(target)
    with pytest.raises(ConfigError) as err:
        base()
    message = str(err.value)
    assert message.startswith(f"model.cache_dir: {target} holds a base built for another config (")
    assert expected in message
    assert "\n" not in message
    assert _files(target) == before  # never used, never deleted


def test_a_cache_dir_that_cannot_be_made_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    from tests.conftest import run_cli

    (tmp_path / "file").write_text("")
    code = run_cli(["train", *QUICK, f"model.cache_dir={tmp_path / 'file' / 'cache'}",
                    f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch)  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    cache = tmp_path / "file" / "cache"
    assert err == [f"sesa train: error: model.cache_dir={cache}: {tmp_path / 'file'} is a file, not a directory"]
    assert not (tmp_path / "run").exists()
