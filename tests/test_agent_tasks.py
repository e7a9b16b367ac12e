"""Shared contract of the multi-turn agent tasks (frozenlake, sokoban, sudoku): parsing, layouts, corpus, configs."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sesa_cli import config
from sesa_cli.commands.schemas import register_configs
from sesa_cli.config import ConfigError
from sesa_cli.tasks import ragen
from sesa_cli.tasks.agent import AgentTask, split_seed
from sesa_cli.tasks.base import Score
from sesa_cli.tasks.frozenlake import FrozenLakeTask, FrozenLakeTaskConfig
from sesa_cli.tasks.sokoban import SokobanTask, SokobanTaskConfig
from sesa_cli.tasks.sudoku import SudokuTask, SudokuTaskConfig

NAMES = ("frozenlake", "sokoban", "sudoku")
STYLES = ("compact", "chat")
_CLASSES = {
    "frozenlake": (FrozenLakeTask, FrozenLakeTaskConfig),
    "sokoban": (SokobanTask, SokobanTaskConfig),
    "sudoku": (SudokuTask, SudokuTaskConfig),
}
# One well-formed action per task and style, and one unknown name.
_ACTION = {
    ("frozenlake", "compact"): "D",
    ("frozenlake", "chat"): "Down",
    ("sokoban", "compact"): "U",
    ("sokoban", "chat"): "Up",
    ("sudoku", "compact"): "111",
    ("sudoku", "chat"): "place 1 at row 1 col 1",
}
_UNKNOWN = {"compact": "Z", "chat": "Jump"}


def make(name: str, style: str = "compact", seed: int = 0, **kw) -> AgentTask:
    cls, schema = _CLASSES[name]
    return cls(schema(name=name, style=style, **kw), seed)


def answer(task: AgentTask, body: str) -> str:
    return f"ok</think><answer>{body}</answer>" if task.chat else body + task.stop


@pytest.fixture(params=[(n, s) for n in NAMES for s in STYLES], ids=lambda p: f"{p[0]}-{p[1]}")
def task(request) -> AgentTask:
    return make(*request.param)


# ------------------------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("style", STYLES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(), min_size=1, max_size=6))
def test_step_and_score_never_raise(name: str, style: str, texts: list[str]) -> None:
    task = make(name, style)
    inst = task.instance("train", 0)
    env = task.make_env(inst)
    for text in texts:
        turn = env.step(text)
        assert isinstance(turn.reward, float)
        assert len(turn.actions) <= task.cfg.max_actions_per_turn
        assert turn.done or turn.feedback
    score = task.score(inst, texts[0])
    assert isinstance(score, Score)
    full, episode = task.transcript(inst, texts)
    assert full.startswith(task.prompt(inst))
    assert isinstance(episode.reward, float)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None)
@given(junk=st.text(alphabet="LDRUrc=0123456789 |.:?#_OXPSG√\n,;", max_size=40))
def test_compact_alphabet_junk_never_raises(name: str, junk: str) -> None:
    task = make(name)
    env = task.make_env(task.instance("val", 1))
    while not env.done:
        env.step(junk)
    assert env.turns <= task.cfg.max_turns


def _invalid_ends_the_episode(task: AgentTask, text: str) -> None:
    """``text`` is an invalid reply: it runs nothing, pays the format penalty, ends the episode unsolved, and the
    episode has no solution key (``eval/valid``)."""
    inst = task.instance("train", 0)
    env = task.make_env(inst)
    turn = env.step(text)
    assert (turn.valid, turn.actions, turn.done, turn.success, turn.feedback) == (False, (), True, False, "")
    assert turn.reward == pytest.approx(task.cfg.format_penalty)
    assert env.step(answer(task, _ACTION[task.name, task.cfg.style])).actions == ()  # nothing more is played
    score = env.score()
    assert (score.key, score.success, score.reward) == (None, False, pytest.approx(task.cfg.format_penalty))
    assert task.reply_actions(text) is None


def test_unknown_action_is_an_invalid_reply(task: AgentTask) -> None:
    style = task.cfg.style
    _invalid_ends_the_episode(task, answer(task, _UNKNOWN[style]))
    # An unknown action next to a known one: RAGEN would run the known one; here nothing runs.
    sep = " || " if task.chat else task.compact_sep
    _invalid_ends_the_episode(task, answer(task, _ACTION[task.name, style] + sep + _UNKNOWN[style]))
    good = task.make_env(task.instance("train", 0)).step(answer(task, _ACTION[task.name, style]))
    assert good.valid
    assert len(good.actions) == 1


def test_unparseable_and_empty_answers_are_invalid_replies(task: AgentTask) -> None:
    cases = ["", "no tags at all", answer(task, "")]
    cases += ["<answer>Up</answer>"] if task.chat else [_ACTION[task.name, "compact"]]  # no </think> / no stop
    for text in cases:
        _invalid_ends_the_episode(task, text)


def test_text_around_the_actions_is_an_invalid_reply(task: AgentTask) -> None:
    """Issue 49: replies that name their actions and then more (the parallel baseline learned to win with
    ``RD\nP__GRD|``) are invalid, as are too many actions, lower case, stray spaces and text after the stop."""
    act = _ACTION[task.name, task.cfg.style]
    most = task.cfg.max_actions_per_turn
    too_many = task.encode([task.canonical(act)] * (most + 1))  # type: ignore[list-item]
    if task.chat:
        cases = [
            f"ok</think><answer>{act} || </answer>",  # an empty item
            f"ok</think><answer>{act} || {act} now</answer>",  # text between || that is not an action
            f"ok</think><answer>{act}</answer> and more",  # text after </answer>
            f"ok</think>x<answer>{act}</answer>",  # text between </think> and <answer>
            f"ok</think><answer>{too_many}</answer>",
        ]
    else:
        cases = [
            f"{act}\nP__G{act}|",
            f"{act} |",
            f" {act}|",
            f"{act}|{act}",
            f"{act}:|",
            too_many + "|",
        ]
        cases += [f"{act.lower()}|"] if act.lower() != act else []
    for text in cases:
        _invalid_ends_the_episode(task, text)
    assert task.reply_actions(answer(task, task.encode([task.canonical(act)] * most))) is not None  # type: ignore[list-item]


_REPLY_PIECES = [
    "L",
    "D",
    "R",
    "U",
    "d",
    "|",
    " ",
    "\n",
    "P",
    "_",
    "124",
    "141",
    "r1c2=4",
    "ok",
    "</think>",
    "<answer>",
    "</answer>",
    " || ",
    "||",
    "Left",
    "down",
    "place 1 at row 1 col 1",
    "Jump",
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("style", STYLES)
@settings(max_examples=150, deadline=None)
@given(text=st.one_of(st.text(), st.lists(st.sampled_from(_REPLY_PIECES), max_size=10).map("".join)))
def test_a_valid_reply_is_its_actions_and_nothing_else(name: str, style: str, text: str) -> None:
    """The rule (sesa_cli.tasks.layouts) never raises, and what it accepts names 1..max_actions_per_turn actions:
    in the compact style exactly their canonical rendering and the stop; in chat, RAGEN's reading of the answer with
    nothing dropped. Plans follow the same rule with their own bound."""
    task = make(name, style)
    actions = task.reply_actions(text)
    plan = task.plan_actions(text)
    for got, most in ((actions, task.cfg.max_actions_per_turn), (plan, task.sketch_max_actions)):
        if got is None:
            continue
        assert 1 <= len(got) <= most
        assert all(task.canonical(task.encode([a])) == a for a in got)
        if not task.chat:
            assert task.encode(got) + task.stop == text
    if actions is not None and task.chat:
        assert [task.canonical(a) for a in ragen.answer_actions(text) or []] == actions


@pytest.mark.parametrize("name", ["frozenlake", "sokoban"])
def test_chat_action_names_are_case_insensitive(name: str) -> None:
    task = make(name, "chat")
    inst = task.instance("train", 2)
    text = "x</think><answer>dOwN ||  LEFT|| right </answer>"
    assert task.reply_actions(text) == ["Down", "Left", "Right"]
    turn = task.make_env(inst).step(text)
    assert turn.valid
    assert turn.actions == ("Down", "Left", "Right")[: len(turn.actions)]  # the episode may end early
    assert task.canonical("D") is None  # chat style wants names


def test_sudoku_chat_forms() -> None:
    task = make("sudoku", "chat")
    forms = ["place 3 at row 1 col 2", "PLACE 3 AT (1, 2)", "3 at 1,2", "(1,2,3)", "1, 2, 3", "R1C2=3"]
    assert [task.canonical(f) for f in forms] == ["r1c2=3"] * len(forms)
    assert task.canonical("place 7 at row 1 col 2") is None  # value out of range for 4x4
    assert task.canonical("9" * 5000 + ",1,1") is None


def test_actions_per_turn_and_budget(task: AgentTask) -> None:
    inst = task.instance("train", 3)
    env = task.make_env(inst)
    acts = task.random_actions(env, random.Random(0), task.cfg.max_actions_per_turn)
    turn = env.step(answer(task, task.encode(acts)))
    assert turn.valid
    assert 1 <= len(turn.actions) <= task.cfg.max_actions_per_turn
    # Play until the end: never more than max_actions actions or max_turns turns.
    while not env.done:
        env.step(answer(task, task.encode(task.random_actions(env, random.Random(env.turns), 5))))
    assert len(env.history) <= task.cfg.max_actions
    assert env.turns <= task.cfg.max_turns


# ------------------------------------------------------------------------------------------------ layouts
def test_transcript_is_prompt_plus_responses_and_feedbacks(task: AgentTask) -> None:
    rng = random.Random(5)
    for index in range(5):
        inst = task.instance("train", index)
        responses = task._random_responses(inst, rng)
        responses += [answer(task, "")]  # a response after the end is ignored
        env = task.make_env(inst)
        expected = task.prompt(inst)
        rewards = 0.0
        for text in responses:
            turn = env.step(text)
            expected += text + turn.feedback
            rewards += turn.reward
            ends = ("<think>",) if task.chat else (":",)
            assert turn.feedback.endswith(ends) if not turn.done else turn.feedback == ""
            if turn.done:
                break
        full, score = task.transcript(inst, responses)
        assert full == expected
        assert score.reward == pytest.approx(rewards)
        assert score.success == env.success
        assert score.key == env.solution_key()
        assert score.actions == tuple(env.history)


def test_prompt_ends_where_the_response_begins(task: AgentTask) -> None:
    inst = task.instance("val", 0)
    if task.chat:
        assert task.prompt(inst).endswith(f"Max response length: {task.chat_max_words} words (tokens).\n<think>")
        assert task.stop == "</answer>"
    else:
        assert task.prompt(inst).endswith("\n:")
        assert task.stop == "|"
    plan = task.random_plan(inst, random.Random(0))
    # compact: the plan right before the turn's ":" (the previous token of the first response, which copies it)
    assert task.solve_prompt(inst, task.sketch(plan)).endswith("<think>" if task.chat else f"!{task.encode(plan)}:")


def test_score_is_the_open_loop_first_turn(task: AgentTask) -> None:
    inst = task.instance("train", 1)
    text = answer(task, task.encode(task.random_actions(task.make_env(inst), random.Random(1), 3)))
    turn = task.make_env(inst).step(text)
    score = task.score(inst, text)
    assert score.reward == pytest.approx(turn.reward)
    assert score.success == turn.success
    assert score.actions == turn.actions
    env = task.make_env(inst)
    env.step(text)
    assert score.key == env.solution_key()


def test_sketches_and_solve_prompt(task: AgentTask) -> None:
    inst = task.instance("train", 4)
    rng = random.Random(2)
    plans = task._distinct_plans(inst, rng, 4)
    assert len({task.encode(p) for p in plans}) == len(plans) >= 2
    sketches = [task.sketch(p) for p in plans]
    assert all(s.endswith(task.stop) for s in sketches)
    assert all(task.sketch_content(s) == task.encode(p) for s, p in zip(sketches, plans, strict=True))
    head = task.sketch_head(inst)
    assert head.endswith("\n" if task.chat else "?")
    solve = task.solve_prompt(inst, sketches[0])
    assert task.encode(plans[0]) in solve
    assert task.has_sketch()


# ------------------------------------------------------------------------------------------------ instances
@pytest.mark.parametrize("name", NAMES)
def test_train_and_val_instances_differ_and_are_deterministic(name: str) -> None:
    task, again = make(name, seed=3), make(name, seed=3)
    train = [task.instance("train", i) for i in range(20)]
    val = [task.instance("val", i) for i in range(20)]
    assert train == [again.generate("train", i) for i in range(20)]
    train_prompts = [task.prompt(x) for x in train]
    val_prompts = [task.prompt(x) for x in val]
    assert not set(train_prompts) & set(val_prompts)
    assert len(set(train_prompts)) >= 18
    assert make(name, seed=4).prompt(make(name, seed=4).instance("train", 0)) != train_prompts[0]
    with pytest.raises(ValueError, match="split"):
        task.instance("test", 0)


def test_split_seeds_are_disjoint() -> None:
    train = {split_seed("x", "train", s, i) for s in range(3) for i in range(500)}
    val = {split_seed("x", "val", s, i) for s in range(3) for i in range(500)}
    assert not train & val
    assert all(v % 2 for v in val)
    assert not any(t % 2 for t in train)


# ------------------------------------------------------------------------------------------------ warm start
@pytest.mark.parametrize("name", NAMES)
def test_warm_start_corpus(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    task = make(name)
    splits: set[str] = set()
    original = task.instance

    def spy(split: str, index: int):
        splits.add(split)
        return original(split, index)

    monkeypatch.setattr(task, "instance", spy)
    corpus = task.warm_start_corpus(random.Random(0), 300)
    assert len(corpus) == 300
    alphabet = set(task.alphabet())
    for line in corpus:
        assert line
        assert set(line) <= alphabet, set(line) - alphabet
    assert splits == {"train"}
    # All three kinds are present: played episodes, sketch lists, sketch -> solution.
    assert any(":" in line and "?" not in line and "!" not in line for line in corpus)  # episodes
    assert any("?" in line and ":" not in line for line in corpus)  # plan lists
    assert any("!" in line and ":" in line and "?" not in line for line in corpus)  # plan -> episode
    assert corpus == make(name).warm_start_corpus(random.Random(0), 300)


@pytest.mark.parametrize("name", NAMES)
def test_warm_start_episodes_are_transcripts_with_some_success(name: str) -> None:
    task = make(name)
    rng = random.Random(1)
    wins = 0
    for i in range(150):
        inst = task.instance("train", i)
        responses = task._random_responses(inst, rng)
        assert all(1 <= len(task.reply_actions(r) or []) <= 5 for r in responses)
        wins += task.transcript(inst, responses)[1].success
    assert 0 < wins < 0.5 * 150  # unskilled: low but non-zero base success


@pytest.mark.parametrize("name", NAMES)
def test_chat_corpus_is_well_formed(name: str) -> None:
    task = make(name, "chat")
    for line in task.warm_start_corpus(random.Random(0), 20):
        assert line.startswith("You're a helpful assistant. ")


def test_warm_start_key_tracks_config_not_seed() -> None:
    assert make("sokoban").warm_start_key() != make("sokoban", num_boxes=2).warm_start_key()
    assert make("sokoban").warm_start_key() == make("sokoban", max_new_tokens=9).warm_start_key()
    # every seed shares one cached base: the corpus is played on seed 0's instances whatever the run's seed
    assert make("sokoban").warm_start_key() == make("sokoban", seed=1).warm_start_key()
    corpus = make("frozenlake", seed=3).warm_start_corpus(random.Random(5), 30)
    assert corpus == make("frozenlake").warm_start_corpus(random.Random(5), 30)


# ------------------------------------------------------------------------------------------------ configs
@pytest.mark.parametrize("name", NAMES)
def test_yaml_composes(name: str) -> None:
    from hydra import compose, initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=str(config.conf_dir()), version_base=None):
        cfg = compose(overrides=[f"+task={name}", "task.style=chat"])
    obj = config.to_object(cfg.task)
    cls, schema = _CLASSES[name]
    assert type(obj) is schema
    assert (obj.name, obj.style) == (name, "chat")
    compact = make(name)
    longest = compact.encode([compact.canonical(_ACTION[name, "compact"]) or ""] * 5) + compact.stop
    assert obj.max_new_tokens >= len(longest)
    assert isinstance(cls(obj, 0).prompt(cls(obj, 0).instance("val", 0)), str)


@pytest.mark.parametrize(
    ("name", "kw", "match"),
    [
        ("frozenlake", {"p": 0.0}, "task.p"),
        ("frozenlake", {"max_turns": 0}, "task.max_turns"),
        ("sokoban", {"dim_room": [3, 6]}, "task.dim_room"),
        ("sokoban", {"min_solution_steps": 11}, "task.min_solution_steps"),
        ("sudoku", {"size": 6}, "task.size"),
        ("sudoku", {"num_blanks": 8, "max_actions": 7}, "task.max_actions"),
        ("sudoku", {"num_blanks": 8, "max_turns": 1}, "task.max_turns"),
        ("sudoku", {"format_penalty": 0.5}, "task.format_penalty"),
    ],
)
def test_bad_configs_name_the_key(name: str, kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _CLASSES[name][1](name=name, **kw)


_RAGEN_PATTERN = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)
_PIECES = ["<think>", "</think>", "<answer>", "</answer>", " ", "\n", "Up", "||", "x", "<|im_end|>"]


def _ragen_actions(response: str) -> list[str] | None:
    """RAGEN's ``_parse_response`` (enable_think, ``<think>`` pre-filled): the answer's actions, or None."""
    match = _RAGEN_PATTERN.search("<think>" + response)
    if match is None:
        return None
    answer = match.group(2)
    for special in ("<think>", "</think>", "<answer>", "</answer>", "<|im_start|>", "<|im_end|>"):
        answer = answer.replace(special, "")
    return [a.strip() for a in answer.split("||") if a.strip()]


@settings(max_examples=400, deadline=None)
@given(response=st.one_of(st.text(), st.lists(st.sampled_from(_PIECES), max_size=14).map("".join)))
def test_chat_parsing_matches_ragens_regex(response: str) -> None:
    """RAGEN's reading of an answer (sesa_cli.tasks.ragen); the chat layout's valid reply is that reading with
    nothing dropped: every item an action, nothing after ``</answer>``."""
    assert ragen.answer_actions(response) == _ragen_actions(response)
    task = make("sokoban", "chat")
    actions = task.reply_actions(response)
    if actions is not None:
        assert [a.lower() for a in actions] == [a.lower() for a in _ragen_actions(response) or []]
