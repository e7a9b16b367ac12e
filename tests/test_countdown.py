"""Countdown: the safe evaluator, solvable instances, RAGEN's rewards, keys, sketches and the warm-start corpus."""

from __future__ import annotations

import itertools
import random
import re
import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sesa_cli.config import ConfigError
from sesa_cli.models.tiny import build_tokenizer
from sesa_cli.tasks import safe_arith
from sesa_cli.tasks.countdown import (
    FORMAT_SCORE,
    INSTRUCTION,
    SCORE,
    CountdownInstance,
    CountdownTask,
    CountdownTaskConfig,
    ragen_reward,
)
from sesa_cli.tasks.countdown_solver import reachable
from sesa_cli.tasks.ragen import think_answer


def make(**kw) -> CountdownTask:
    return CountdownTask(CountdownTaskConfig(name="countdown", **kw), 0)


INST = CountdownInstance(target=98, nums=(44, 19, 35), solution="44+19+35")


# ------------------------------------------------------------------------------------------- the evaluator
# Expression trees built independently of safe_arith: ("num", n) | ("neg", t) | (op, left, right).
def trees(max_leaves: int = 8):
    leaf = st.integers(0, 30).map(lambda n: ("num", n))

    def extend(children):
        binary = st.tuples(st.sampled_from("+-*/"), children, children)
        return binary | children.map(lambda t: ("neg", t))

    return st.recursive(leaf, extend, max_leaves=max_leaves)


def exact(tree) -> Fraction | None:
    """The reference value: plain recursion with Fractions; None on a division by zero."""
    if tree[0] == "num":
        return Fraction(tree[1])
    if tree[0] == "neg":
        v = exact(tree[1])
        return None if v is None else -v
    op, left, right = tree
    a, b = exact(left), exact(right)
    if a is None or b is None:
        return None
    if op == "/":
        return None if b == 0 else a / b
    return a + b if op == "+" else a - b if op == "-" else a * b


def text(tree, sp: str = "") -> str:
    """Fully parenthesised rendering, with ``sp`` around every token."""
    if tree[0] == "num":
        return str(tree[1])
    if tree[0] == "neg":
        return f"-{sp}({text(tree[1], sp)})"
    op, left, right = tree
    return f"({sp}{text(left, sp)}{sp}{op}{sp}{text(right, sp)}{sp})"


@given(trees(), st.sampled_from(["", " ", "\t", " \t "]))
@settings(max_examples=300, deadline=None)
def test_evaluator_agrees_with_exact_arithmetic(tree, sp) -> None:
    expr = text(tree, sp)
    assert safe_arith.evaluate(expr) == exact(tree)


@given(trees())
@settings(max_examples=200, deadline=None)
def test_minimal_parentheses_rendering_keeps_the_value(tree) -> None:
    node = safe_arith.parse(text(tree))
    assert node is not None
    value = safe_arith.value_of(node)
    assert safe_arith.evaluate(safe_arith.render(node)) == value
    # the canonical form is a valid expression of the same value, and canonicalising it again changes nothing
    key = safe_arith.canonical_node(node)
    if value is not None:
        assert safe_arith.evaluate(key) == value
    assert safe_arith.canonical(key) == key


def test_evaluator_matches_python_semantics_on_examples() -> None:
    cases = {
        "3+4*5": 23,
        "(3+4)*5": 35,
        "2 + 5 - 3": 4,
        "8/3": Fraction(8, 3),
        "1-2-3": -4,
        "12/4/3": 1,
        "--1": 1,
        "2*-3": -6,
        "-(2+3)": -5,
        "+7": 7,
        "00": 0,
        "1/(2/3)": Fraction(3, 2),
        " ( 1 ) ": 1,
    }
    for expr, value in cases.items():
        assert safe_arith.evaluate(expr) == value, expr
    for bad in ("1/0", "5/(3-3)", "05", "1.5", "2 3", "", "()", "(1", "1)", "1+", "*2", "2//3"):
        assert safe_arith.evaluate(bad) is None, bad


HOSTILE = [
    "__import__('os').system('echo pwned')",
    "().__class__.__bases__[0].__subclasses__()",
    "(1).__class__",
    "x",
    "abs(-1)",
    "2**9999999",
    "9**9**9",
    "2**-1",
    "(" * 10_000 + "1" + ")" * 10_000,
    "(" * 50 + "1" + ")" * 50 + "+" + "-" * 10_000 + "1",
    "9" * 100_000,
    "9" * 31,
    "1" + "*99999999999999999999" * 60,
    "٣+٤",
    "１+２",
    "²",
    "lambda: 1",
    "1; import os",
    "1\n+1",
    "[1]",
    "1 if 1 else 2",
    "'1'",
    "1e9",
    "0x10",
    "1_000",
    "\x00",
]


@pytest.mark.parametrize("expr", HOSTILE)
def test_hostile_strings_are_invalid_and_fast(expr: str) -> None:
    start = time.perf_counter()
    assert safe_arith.evaluate(expr) is None
    assert safe_arith.canonical(expr) is None
    assert time.perf_counter() - start < 0.5


def test_nesting_and_size_limits() -> None:
    deep = "(" * safe_arith.MAX_DEPTH + "1" + ")" * safe_arith.MAX_DEPTH
    assert safe_arith.evaluate(deep) == 1
    assert safe_arith.evaluate("(" + deep + ")") is None
    # the largest values MAX_CHARS allows are computed quickly; MAX_BITS backs that bound up
    big = "*".join(["999999999999999999999999999999"] * 32)
    start = time.perf_counter()
    assert safe_arith.evaluate(big) == 999999999999999999999999999999**32
    assert safe_arith.evaluate("1" + "/97+1/89+1/83" * 70) is not None
    assert time.perf_counter() - start < 0.5


def test_oversized_intermediate_values_are_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(safe_arith, "MAX_BITS", 64)
    assert safe_arith.evaluate("99999*99999*99999") is not None
    assert safe_arith.evaluate("99999*99999*99999*99999*99999") is None
    assert safe_arith.evaluate("1/99999/99999/99999/99999/99999") is None


@given(st.text(max_size=2000))
@settings(max_examples=500, deadline=200)
def test_evaluate_any_text_never_raises_and_finishes_quickly(s: str) -> None:
    value = safe_arith.evaluate(s)
    assert value is None or isinstance(value, Fraction)
    safe_arith.canonical(s)


@given(st.text(alphabet="0123456789+-*/() ", max_size=300))
@settings(max_examples=500, deadline=200)
def test_evaluate_grammar_soup_never_raises(s: str) -> None:
    safe_arith.evaluate(s)
    safe_arith.canonical(s)


# ---------------------------------------------------------------------------------------- solution keys
def test_keys_identify_commutative_and_associative_rewrites() -> None:
    same = [
        ("3+4*5", "5*4+3"),
        ("(44+19)-35", "44-(35-19)"),
        ("44+19-35", "-35+19+44"),
        ("(a-b)*c".replace("a", "9").replace("b", "4").replace("c", "7"), "-(4-9)*7"),
        ("8/(4/2)", "8*2/4"),
        ("(2+3)+4", "2+(3+4)"),
        ("((3))*(4)", "4*3"),
    ]
    for a, b in same:
        assert safe_arith.canonical(a) == safe_arith.canonical(b), (a, b)
    different = [("(2+3)*4", "2*4+3*4"), ("8-4", "4-8"), ("8/4", "4/8"), ("3+4*5", "(3+4)*5")]
    for a, b in different:
        assert safe_arith.canonical(a) != safe_arith.canonical(b), (a, b)


# --------------------------------------------------------------------------------------------- instances
def ragen_has_solution(nums: tuple[int, ...], target: int) -> bool:
    """RAGEN's filter, reimplemented: pad to 4 numbers, try every +/- sign pattern."""
    padded = list(nums) + [0] * (4 - len(nums))
    return any(
        sum(s * n for s, n in zip(signs, padded, strict=True)) == target
        for signs in itertools.product((1, -1), repeat=4)
    )


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"style": "chat"},
        {"solvable_ops": "+-*/", "max_number": 99},
        {"min_numbers": 2, "max_numbers": 5, "max_number": 12},
    ],
)
def test_every_instance_is_solvable_with_each_number_once(kw) -> None:
    task = make(**kw)
    for split in ("train", "val"):
        for i in range(40):
            inst = task.instance(split, i)
            cfg = task.cfg
            assert cfg.min_numbers <= len(inst.nums) <= cfg.max_numbers
            assert all(cfg.min_number <= n <= cfg.max_number for n in inst.nums)
            assert cfg.min_target <= inst.target <= cfg.max_target
            assert safe_arith.evaluate(inst.solution) == inst.target
            assert sorted(map(int, re.findall(r"\d+", inst.solution))) == sorted(inst.nums)
            completion = f"</think><answer>{inst.solution}</answer>" if task.chat else inst.solution + "|"
            assert task.score(inst, completion).success
            if cfg.solvable_ops == "+-" and len(inst.nums) <= 4:
                assert ragen_has_solution(inst.nums, inst.target)
            keys = task.target_keys(inst)
            assert keys is None if len(inst.nums) > 4 else safe_arith.canonical(inst.solution) in keys


def test_ranges_default_to_the_style() -> None:
    compact, chat = CountdownTaskConfig(name="countdown"), CountdownTaskConfig(name="countdown", style="chat")
    assert (compact.max_number, compact.max_target) == (9, 30)  # what the tiny model learns to copy
    assert (chat.max_number, chat.max_target) == (99, 100)  # RAGEN's data
    explicit = CountdownTaskConfig(name="countdown", max_number=50, max_target=70)
    assert (explicit.max_number, explicit.max_target) == (50, 70)


def test_instances_are_deterministic_and_splits_differ() -> None:
    a, b = make(max_number=99, max_target=100), make(max_number=99, max_target=100)
    assert [a.instance("train", i) for i in range(20)] == [b.instance("train", i) for i in range(20)]
    train = {a.instance("train", i) for i in range(50)}
    val = {a.instance("val", i) for i in range(50)}
    assert len(train & val) <= 2  # different seeds; a coincidence of numbers and target is possible, not systematic
    other_seed = CountdownTask(a.cfg, 1)
    assert [other_seed.instance("train", i) for i in range(10)] != [a.instance("train", i) for i in range(10)]
    with pytest.raises(ValueError, match="split"):
        a.instance("test", 0)


def test_reachable_is_exhaustive_on_a_small_case() -> None:
    values = reachable((1, 2), "+-*/")
    assert set(values) == {3, -1, 1, 2, Fraction(1, 2)}
    assert all(safe_arith.value_of(node) == v for v, node in values.items())


def test_config_validation() -> None:
    for bad in (
        {"min_numbers": 1},
        {"max_numbers": 6},
        {"solvable_ops": "^"},
        {"solvable_ops": ""},
        {"min_target": 5, "max_target": 4},
        {"max_number": 1000},
        {"list_max": 0},
    ):
        with pytest.raises(ConfigError):
            CountdownTaskConfig(name="countdown", **bad)


# ------------------------------------------------------------------------------------------------ rewards
def test_ragen_reward_semantics() -> None:
    nums, target = (44, 19, 35), 98
    assert ragen_reward("44+19+35", nums, target) == SCORE
    assert ragen_reward("(35 + 19) + 44", nums, target) == SCORE
    # the numbers exactly once but a wrong value, or no value: format_score
    assert ragen_reward("44-19+35", nums, target) == FORMAT_SCORE
    assert ragen_reward("44/(19-19+0)*35", nums, target) == 0.0  # uses 19 twice and a 0: wrong numbers
    assert ragen_reward("44 19 35", nums, target) == FORMAT_SCORE  # RAGEN: check_format passes, eval fails
    assert ragen_reward("44/(35-35)", (44, 35, 35), 1) == FORMAT_SCORE  # division by zero
    assert ragen_reward("44+19+35.0", nums, target) == 0.0  # "35.0" contributes a 0
    # wrong numbers (missing, extra, repeated), an equation with "= target", or nothing: 0
    assert ragen_reward("44+19", nums, target) == 0.0
    assert ragen_reward("44+19+35+0", nums, target) == 0.0
    assert ragen_reward("44+19+35 = 98", nums, target) == 0.0
    assert ragen_reward("44+44+10", nums, target) == 0.0
    assert ragen_reward("", nums, target) == 0.0
    assert ragen_reward(None, nums, target) == 0.0
    # RAGEN accepts values within 1e-5 of the target
    assert ragen_reward("1/99999+1", (1, 99999, 1), 1) == FORMAT_SCORE
    assert ragen_reward("1/999999+1", (1, 999999, 1), 1) == SCORE


def test_compact_scores() -> None:
    task = make()
    s = task.score(INST, "44+19+35|junk after the stop")
    assert (s.reward, s.success, s.key) == (1.0, True, "19+35+44")
    s = task.score(INST, "44-19+35|")
    assert (s.reward, s.success, s.key) == (0.1, False, "35+44-19")
    assert task.score(INST, "44+19|") == task.score(INST, "44+19|").__class__(0.0, False, "19+44")
    assert task.score(INST, "44+19+35").reward == 0.0  # no stop: cut at max_new_tokens, like a missing </answer>
    assert task.score(INST, "|") == task.score(INST, "").__class__(0.0, False, None)
    assert task.score(INST, "35+19+44|").key == task.score(INST, "44+(19+35)|").key


def test_chat_scores_follow_ragen_parsing() -> None:
    task = make(style="chat")
    assert (task.stop, task.between) == ("</answer>", "\n")
    good = " 44 + 19 = 63, 63 + 35 = 98.</think><answer>44 + 19 + 35</answer>"
    assert task.score(INST, good).reward == SCORE
    assert task.score(INST, "<think>x</think>\n <answer> 44 + 19 + 35 </answer>").reward == SCORE
    # RAGEN would read the first of two actions; here a second one makes the answer invalid (issue 49)
    assert task.score(INST, "<think>x</think><answer>44 + 19 + 35 || 1+2</answer>").key is None
    assert task.score(INST, "</think><answer>44 - 19 + 35</answer>").reward == FORMAT_SCORE
    assert task.score(INST, "<answer>44 + 19 + 35</answer>").reward == 0.0  # no </think>: RAGEN's regex fails
    assert task.score(INST, "</think> text <answer>44+19+35</answer>").reward == 0.0  # text between the blocks
    assert task.score(INST, "</think><answer>44+19+35").reward == 0.0  # unclosed answer
    assert task.score(INST, "</think><answer></answer>").reward == 0.0
    assert think_answer("a</think>b</think> <answer>c</answer>") == ("a</think>b", "c")


RAGEN_REGEX = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)


@given(
    st.lists(
        st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", " ", "\n", "\u2003", "a", "<"]), max_size=40
    )
)
@settings(max_examples=1000, deadline=None)
def test_think_answer_scan_matches_ragens_regex(parts) -> None:
    text = "".join(parts)
    match = RAGEN_REGEX.search("<think>" + text)
    assert think_answer(text) == (match.groups() if match else None)


def test_format_penalty_applies_only_without_an_answer() -> None:
    task = make(format_penalty=-0.1)
    assert task.score(INST, "44+19+35").reward == -0.1
    assert task.score(INST, "44+19|").reward == 0.0
    assert task.score(INST, "44+19+35|").reward == SCORE
    assert make(style="chat", format_penalty=-0.1).score(INST, "<answer>44+19+35</answer>").reward == -0.1
    with pytest.raises(ConfigError, match="format_penalty"):
        CountdownTaskConfig(name="countdown", format_penalty=0.5)


@given(st.text(max_size=3000))
@settings(max_examples=300, deadline=500)
def test_score_never_raises(s: str) -> None:
    for task in (make(), make(style="chat")):
        score = task.score(INST, s)
        assert score.reward in (0.0, FORMAT_SCORE, SCORE)
        score = task.score(INST, s + "|")
        assert score.reward in (0.0, FORMAT_SCORE, SCORE)
    think_answer(s)


@given(
    st.lists(st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", " ", "\n", "1+2", "||"]), max_size=200)
)
@settings(max_examples=300, deadline=500)
def test_tag_soup_never_raises(parts) -> None:
    make(style="chat").score(INST, "".join(parts))


def test_parsing_a_long_hostile_completion_is_fast() -> None:
    task = make(style="chat")
    start = time.perf_counter()
    task.score(INST, "</think>" * 50_000 + "<answer>" * 50_000)
    task.score(INST, "<think>" * 100_000)
    make().score(INST, "(" * 100_000 + "|")
    assert time.perf_counter() - start < 2.0


# ------------------------------------------------------------------------------------------------ prompts
def test_compact_layout_from_the_docstring() -> None:
    task = make()
    assert task.prompt(INST) == "P98:44,19,35="
    assert task.sketch_head(INST) == "S98:44,19,35="
    assert task.solve_prompt(INST, "44+19|") == "P98:44,19,35!(44+19)"
    assert set(task.prompt(INST) + task.solve_prompt(INST, "44+19|")) <= set(task.alphabet())


def test_solve_prompt_quotes_one_operation_as_an_answer_that_carries_it_out_starts() -> None:
    task = make()
    inst = CountdownInstance(target=22, nums=(3, 5, 5, 9), solution="")
    for sketch in ("5+9|", "(5+9)|", " 5 + 9 |junk", "5+9"):  # spacing, parentheses, no stop: one quote
        assert task.solve_prompt(inst, sketch) == "P22:3,5,5,9!(5+9)"
    assert task.sketch_response(inst, "5+9|") == "(5+9)"
    assert task.sketch_response(inst, "9-5|") == "(9-5)"  # the order of a step is kept
    assert task.sketch_response(inst, "5-5|") == "(5-5)"  # the puzzle holds two 5s
    for invalid in ("3+3|", "7+1|", "3+5+9|", "junk|", ""):
        assert task.sketch_response(inst, invalid) is None
    assert task.solve_prompt(inst, "3+5+9|") == "P22:3,5,5,9!3+5+9"  # not one operation: quoted as it is
    assert task.solve_prompt(inst, "7+1|") == "P22:3,5,5,9!(7+1)"  # one operation, numbers the puzzle lacks
    # the plain prompt is no prefix of a solve prompt: the base never learns to quote a step where an answer belongs
    assert not task.solve_prompt(inst, "5+9|").startswith(task.prompt(inst))
    answer = "(5+9)*3-5|"
    assert task.follows_sketch(inst, "5+9|", answer, task.score(inst, answer))
    assert not task.follows_sketch(inst, "9+5|", "9*5+3-5|", task.score(inst, "9*5+3-5|"))


def test_every_one_digit_step_in_parentheses_is_one_word() -> None:
    task = make()
    vocab = task.vocabulary([])
    words = [w for w in vocab if len(w) > 1]
    assert len(words) == 9 * 4 * 9 == len(set(words))
    assert {"(4+5)", "(5+4)", "(9/9)", "(1-8)"} <= set(words)
    assert set(vocab) - set(words) == set(task.alphabet())
    tok = build_tokenizer(vocab)
    line = task.solve_prompt(INST_1, "4+5|") + "(4+5)*3-2|"
    pieces = tok.convert_ids_to_tokens(tok(line, add_special_tokens=False)["input_ids"])
    # stage II's first token repeats the prompt's last: the quoted step and the answer's start are one word
    assert pieces == [*"P12:4,5,3,2!", "(4+5)", "(4+5)", *"*3-2|"]
    assert len(tok(task.sketch_response(INST_1, "4+5|"), add_special_tokens=False)["input_ids"]) == 1
    # sketches are spelled by characters, and so is an answer but for its steps in parentheses
    sketches = "S12:4,5,3,2=4+5|3*2|"
    assert tok(sketches, add_special_tokens=False)["input_ids"] == tok.convert_tokens_to_ids(list(sketches))
    pieces = tok.convert_ids_to_tokens(tok("3*(2-5)+4|", add_special_tokens=False)["input_ids"])
    assert pieces == ["3", "*", "(2-5)", "+", "4", "|"]
    # only one-digit numbers have words: none for a range of two-digit numbers, 1-9 for a range that starts below 10
    assert not [w for w in make(min_number=10, max_number=99).vocabulary([]) if len(w) > 1]
    assert len([w for w in make(max_number=12).vocabulary([]) if len(w) > 1]) == 9 * 4 * 9


INST_1 = CountdownInstance(target=12, nums=(4, 5, 3, 2), solution="4*3+2-5+5")


def test_chat_prompt_uses_ragens_text() -> None:
    task = make(style="chat")
    prompt = task.prompt(INST)
    assert prompt.startswith("You're a helpful assistant. " + INSTRUCTION)
    assert "\nTurn 1:\nState:\nTarget: 98, nums: [44, 19, 35]\nYou have 1 actions left. Always output: " in prompt
    assert "Max response length: 100 words (tokens).\n" in prompt
    assert prompt.endswith("<think>")
    solve = task.solve_prompt(INST, "<answer>44 + 19</answer>")
    assert "First step: 44 + 19\n" in solve
    assert solve.endswith("<think>")
    assert task.sketch_response(INST, "<answer>44 + 19</answer>") is None  # free thinking comes first
    assert task.has_sketch()


# -------------------------------------------------------------------------------------------- warm start
def test_warm_start_corpus_is_well_formed_and_unskilled() -> None:
    task = make()
    lines = task.warm_start_corpus(random.Random(0), 3000)
    assert len(lines) == 3000
    alphabet = set(task.alphabet())
    hits = answers = led = 0
    kinds = {"P": 0, "S": 0, "pair": 0}
    for line in lines:
        assert set(line) <= alphabet, line
        m = re.fullmatch(r"([PS])(\d+):([\d,]+)(=|!\(\d[-+*/]\d\))(.*)", line)
        assert m, line
        inst = CountdownInstance(int(m.group(2)), tuple(map(int, m.group(3).split(","))), "")
        head, quote, body = m.group(1), m.group(4), m.group(5)
        assert body.endswith("|")
        if quote != "=":  # sketch -> solution: the answer starts with the quoted step and carries it out
            kinds["pair"] += 1
            sketch = quote[2:-1] + "|"
            assert head == "P", line
            assert task.sketch_step(inst, sketch) is not None, line
            assert line == task.solve_prompt(inst, sketch) + body
            assert body.startswith(quote[1:])
            assert body.count("|") == 1
            assert task.follows_sketch(inst, sketch, body, task.score(inst, body)), line
            assert task.score(inst, body).reward >= FORMAT_SCORE
        elif head == "P":
            kinds["P"] += 1
            items = body[:-1].split("|")
            assert 1 <= len(items) <= task.cfg.list_max
            scores = [task.score(inst, y + "|") for y in items]
            assert all(s.reward >= FORMAT_SCORE for s in scores), line  # each number exactly once, well formed
            assert len({s.key for s in scores}) == len(scores), line  # distinct solutions
            hits += sum(s.success for s in scores)
            answers += len(scores)
            led += sum(bool(re.match(r"\(\d[-+*/]\d\)", y)) for y in items)
        else:
            kinds["S"] += 1
            steps = body[:-1].split("|")
            assert len(set(steps)) == len(steps)
            for step in steps:
                node = safe_arith.parse(step)
                assert node is not None
                assert len(safe_arith.numbers(node)) == 2
                assert task.sketch_step(inst, step + "|") is not None
    assert kinds["pair"] > 0.6 * len(lines)
    assert min(kinds.values()) > 200
    assert 0.01 < hits / answers < 0.15  # base success low but not zero
    assert 0.2 < led / answers < 0.45  # LED_ANSWERS of the answers, and the random trees that start with a step


def test_chat_has_no_corpus() -> None:
    with pytest.raises(ConfigError, match="compact"):
        make(style="chat").warm_start_corpus(random.Random(0), 1)


# ------------------------------------------------------------------------------------------- rollout coverage
def test_rollout_coverage_counts_each_group_against_its_own_instances_targets():
    """Countdown's answers are per puzzle: each group of a step is counted against its own instance's targets (the
    trainer once read instance 0's for every group, so a second puzzle's wins counted nothing)."""
    from sesa_cli.evaluation import step_rollout_metrics
    from sesa_cli.rollout.rollouts import Completion, Rollout
    from sesa_cli.tasks.base import Score

    task = make()
    a = CountdownInstance(target=6, nums=(1, 2, 3), solution="1+2+3")
    b = CountdownInstance(target=9, nums=(2, 3, 4), solution="2+3+4")
    # a's targets: 1+2+3, 1*2*3, 2*3/1 (every correct equation, canonical); b's: 2+3+4 alone
    assert task.target_keys(a) == {"1+2+3", "1*2*3", "2*3/1"}
    assert task.target_keys(b) == {"2+3+4"}

    def group(g: int, inst: CountdownInstance, keys: list[str | None]) -> list[Rollout]:
        comp = Completion([5], [-1.0], [0.5], True)
        prompt = [g + 1]
        return [Rollout(g, inst, prompt, prompt, comp, str(k), Score(float(k is not None), False, k)) for k in keys]

    # a: two of its three targets and a wrong equation; b: its one target twice, and 3*(4-2), a's value 6 (wrong)
    groups = [group(0, a, ["1+2+3", "1*2*3", "1+2", None]), group(1, b, ["2+3+4", "2+3+4", "-(2-4)*3", None])]
    found: set[str] = set()
    row = step_rollout_metrics(task, groups, found)
    assert row["rollout/coverage"] == pytest.approx((2 / 3 + 1 / 1) / 2)  # each instance's share, averaged
    assert row["rollout/targets_found"] == 3
    assert found == {"1+2+3", "1*2*3", "2+3+4"}
    # a later step that finds nothing new leaves the run's count where it was
    again = step_rollout_metrics(task, [group(0, b, ["2+3+4", None, None, None])], found)
    assert again["rollout/coverage"] == 1.0
    assert again["rollout/targets_found"] == 3
