"""The tiny model's tokenizer (sesa_cli.models.tiny.build_tokenizer) over each task's vocabulary (Task.vocabulary):
every corpus line is spelled without <unk> and reads back as itself, words are cut longest first, and the spellings
of a text (Policy.spellings) are every token sequence that writes it."""

from __future__ import annotations

import random

import pytest

from sesa_cli.models.policy import Policy
from sesa_cli.models.tiny import SPECIAL_TOKENS, build_tokenizer
from sesa_cli.tasks import TASK_SCHEMAS, make_task
from sesa_cli.tasks.grid import ACTION_WORD_MAX

TINY_TASKS = {
    "path": {},
    "frozenlake": {
        "is_slippery": False,
        "random_start_goal": False,
        "max_actions_per_turn": 2,
        "warm_start_plan_lines": 0.3,
    },
    "sokoban": {},
    "countdown": {},
    "sudoku": {},
    "math": {},
}


def _task(name: str):
    return make_task(TASK_SCHEMAS[name](name=name, **TINY_TASKS[name]), 0)


def _policy(tokens) -> Policy:
    return Policy(model=None, tokenizer=build_tokenizer(tokens), source=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(TINY_TASKS))
def test_every_corpus_line_is_spelled_without_unk_and_reads_back(name):
    task = _task(name)
    lines = task.warm_start_corpus(random.Random(f"warm-start-{name}"), 400)
    tokenizer = build_tokenizer(task.vocabulary(lines))
    chars = build_tokenizer(sorted(set(task.alphabet())))
    n_words = n_chars = 0
    for line in lines:
        ids = tokenizer(line, add_special_tokens=False)["input_ids"]
        assert tokenizer.unk_token_id not in ids, line
        assert tokenizer.decode(ids) == line
        n_words += len(ids)
        n_chars += len(chars(line, add_special_tokens=False)["input_ids"])
    assert n_words <= n_chars
    if name in ("path", "frozenlake", "sokoban"):  # the tasks with words: at least 1.5x shorter
        assert n_words * 1.5 < n_chars


def test_single_characters_give_the_character_tokenizer():
    tok = build_tokenizer(sorted(set("ba|")))
    assert tok.convert_ids_to_tokens(list(range(len(tok)))) == [*SPECIAL_TOKENS.values(), "a", "b", "|"]
    assert tok("ab|", add_special_tokens=False)["input_ids"] == [4, 5, 6]
    assert tok("abc", add_special_tokens=False)["input_ids"][-1] == tok.unk_token_id


def test_words_are_cut_longest_first():
    tok = build_tokenizer(["D", "R", "|", "DR", "DRD"])
    assert tok.convert_ids_to_tokens(tok("DRDR|", add_special_tokens=False)["input_ids"]) == ["DRD", "R", "|"]


def test_spellings_are_every_token_sequence_that_writes_the_text_the_own_first():
    policy = _policy(["D", "R", "|", "DR"])
    ids = policy.tokenizer.convert_tokens_to_ids
    assert policy.spellings("DR|") == [ids(["DR", "|"]), ids(["D", "R", "|"])]
    assert policy.spellings("D|") == [ids(["D", "|"])]
    assert len(policy.spellings("DRDR|")) == 4
    assert policy.spellings("DRDR|", limit=3) == [policy.encode("DRDR|")]  # more than the limit: the own only
    assert policy.spellings("X|") == [policy.encode("X|")]  # no spelling (X is no token): the own, with its <unk>


def test_grid_vocabulary_has_action_runs_and_frequent_rows():
    task = _task("frozenlake")
    lines = task.warm_start_corpus(random.Random(0), 200)
    vocab = task.vocabulary(lines)
    assert {"L", "D", "R", "U", "DR", "UU"} <= set(vocab)
    assert not any(len(t) > ACTION_WORD_MAX and set(t) <= set("LDRU") for t in vocab)
    rows = [t for t in vocab if len(t) > 1 and set(t) <= set("P_OGX√")]
    assert rows
    assert all(len(t) == task.cfg.size for t in rows)
    policy = _policy(vocab)
    for response in task.turn_responses():  # one action per token, or a pair per token
        assert 1 <= len(policy.spellings(response)) <= 2


def test_an_observation_is_a_token_per_row_and_one_for_its_mark():
    task = _task("frozenlake")
    lines = task.warm_start_corpus(random.Random(0), 400)
    policy = _policy(task.vocabulary(lines))
    inst = task.instance("val", 0)
    prompt, size = task.prompt(inst), task.cfg.size
    # the first row, each later row with its line break, the turn mark "\n:" (rows the corpus holds twice or more)
    assert len(policy.encode(prompt)) == size + 1
    assert policy.decode(policy.encode(prompt)) == prompt
    assert len(policy.encode("\n" + prompt)) == size + 1  # feedback: every row after a line break
    assert policy.encode(task.sketch_head(inst))[-1] == policy.encode("\n?")[0]


def test_every_path_answer_has_one_spelling_in_the_closed_world():
    task = _task("path")
    policy = _policy(task.vocabulary([]))
    assert not any(len(t) == 1 and t.isalpha() and t.islower() for t in policy.tokenizer.get_vocab())
    for answer in task.solution_space(None):
        spellings = policy.spellings(answer)
        assert len(spellings) == 1, answer
        assert len(spellings[0]) == 6  # region / city / district |
