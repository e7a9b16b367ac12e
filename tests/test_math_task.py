"""Math: grading equivalent answers, the JSONL reader, the generated arithmetic set, sketches and the corpus."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sesa_cli.config import ConfigError
from sesa_cli.tasks import math as math_task
from sesa_cli.tasks import math_grading
from sesa_cli.tasks.math import MathInstance, MathTask, MathTaskConfig, load_jsonl
from sesa_cli.tasks.math_grading import is_equivalent, last_boxed, normalize_answer


def make(**kw) -> MathTask:
    return MathTask(MathTaskConfig(name="math", **kw), 0)


def write(tmp_path: Path, lines: list[str], name: str = "data.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def reference_value(expr: str | list) -> Fraction:
    """Independent precedence evaluation of ``a op b op c ...`` (no parentheses): * and / first, then + and -.
    ``expr`` may also be a token list whose numbers are Fractions."""
    tokens = re.findall(r"[0-9]+|[-+*/]", expr) if isinstance(expr, str) else expr
    terms: list[Fraction] = [Fraction(tokens[0])]
    signs = [1]
    for op, num in zip(tokens[1::2], tokens[2::2], strict=True):
        n = Fraction(num)
        if op == "*":
            terms[-1] *= n
        elif op == "/":
            terms[-1] /= n
        else:
            terms.append(n)
            signs.append(1 if op == "+" else -1)
    return sum((s * t for s, t in zip(signs, terms, strict=True)), Fraction(0))


# ------------------------------------------------------------------------------------------------ grading
EQUIVALENT = [
    ("1/2", "0.5"),
    ("1/2", "\\frac{1}{2}"),
    ("1/2", "\\frac12"),
    ("1/2", "\\dfrac{1}{2}"),
    ("1/2", "2/4"),
    ("1/2", "0.50"),
    ("1/2", "$\\frac{1}{2}$"),
    ("1/2", "\\boxed{0.5}"),
    ("0.5", "1/2"),
    ("\\frac{1}{2}", "0.5"),
    ("2", "2.0"),
    ("2.0", "2"),
    ("-3", "-3"),
    ("1000", "1,000"),
    ("1/3", "0.333333"),  # math-verify's float rounding
    ("\\sqrt{2}", "2^{1/2}"),
    ("x+1", "1+x"),
    ("\\pi", "\\pi"),
]
DIFFERENT = [("1/2", "0.3"), ("1/2", "1/3"), ("2", "3"), ("2", "-2"), ("x+1", "x+2"), ("3", "x"), ("1/2", "")]


@pytest.mark.parametrize(("gold", "answer"), EQUIVALENT)
def test_equivalent_forms_are_correct(gold: str, answer: str) -> None:
    assert is_equivalent(gold, answer)


@pytest.mark.parametrize(("gold", "answer"), DIFFERENT)
def test_wrong_answers_are_incorrect(gold: str, answer: str) -> None:
    assert not is_equivalent(gold, answer)


def test_keys_normalise_numbers_and_correct_answers_share_the_gold_key() -> None:
    for form in ("1/2", "0.5", "\\frac{1}{2}", "\\frac12", "$0.50$", "2/4", "\\boxed{1/2}"):
        assert normalize_answer(form) == "1/2", form
    assert normalize_answer("2.0") == normalize_answer("2") == "2"
    assert normalize_answer(" x + 1 ") == "x+1"
    task = make()
    inst = MathInstance(question="What is half of one?", answer="1/2")
    keys = {task.score(inst, a + "|").key for a in ("0.5", "1/2", "\\frac{1}{2}")}
    assert keys == {"1/2"}


def test_scores_in_both_styles() -> None:
    inst = MathInstance(question="What is 12+7*3?", answer="33", expr="12+7*3")
    compact = make()
    assert compact.score(inst, "33|") == math_task.Score(1.0, True, "33")
    assert compact.score(inst, "33.0|").success
    assert compact.score(inst, "57|") == math_task.Score(0.0, False, "57")
    assert compact.score(inst, "33") == math_task.Score(0.0, False, None)  # no stop: cut at max_new_tokens
    assert compact.score(inst, "|").key is None
    chat = make(style="chat")
    assert (chat.stop, chat.between) == ("</answer>", "\n")
    assert chat.score(inst, "7*3=21, 12+21=33</think><answer>\\boxed{33}</answer>").success
    assert chat.score(inst, "</think> <answer>The answer is \\boxed{33.0}.</answer>").success
    assert chat.score(inst, "</think><answer>33</answer>").success
    assert not chat.score(inst, "</think><answer>\\boxed{57}</answer>").success
    assert chat.score(inst, "\\boxed{33}").key is None  # RAGEN's format is required
    assert chat.score(inst, "</think><answer>\\boxed{33</answer>").reward == 0.0


def test_last_boxed_handles_nesting_and_garbage() -> None:
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{1} \\boxed{unclosed") == "1"
    assert last_boxed("no box") is None
    assert last_boxed("\\boxed{" * 10_000) is None


def test_math_verify_failures_count_as_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    import math_verify

    def boom(*args, **kwargs):
        raise RuntimeError("grader crashed")

    monkeypatch.setattr(math_verify, "verify", boom)
    assert not is_equivalent("\\sqrt{2}", "2^{1/2}")
    assert is_equivalent("1/2", "0.5")  # exact numbers never reach math-verify


@pytest.mark.parametrize(
    ("text", "shed"),
    [
        ("((((1))))", "1"),
        ("(x+1)", "x+1"),
        ("(((1+0)))", "1+0"),
        ("x^{{2}}", "x^{2}"),
        ("\\frac{{1}}{2}", "\\frac{1}{2}"),
        ("((1,2))", "(1,2)"),
        ("(1,2)", "(1,2)"),
        ("(1)(2)", "(1)(2)"),
        ("\\{1\\}", "\\{1\\}"),
        ("((1)", "((1)"),
        ("(0,1]", "(0,1]"),
        ("", ""),
    ],
)
def test_redundant_brackets_are_shed_and_meaningful_ones_kept(text: str, shed: str) -> None:
    assert math_grading.shed_brackets(text) == shed


def test_deeply_parenthesised_correct_answers_are_correct_at_once() -> None:
    # issue 17: 20 levels took math-verify over 3 s and were graded wrong by its wall-clock timeout on a busy machine
    task = make()
    for answer in ("(" * 20 + "1" + ")" * 20, "{" * 16 + "1" + "}" * 16, "\\left(" * 12 + "1" + "\\right)" * 12):
        start = time.process_time()
        assert task.score(MathInstance("q", "1"), answer + "|") == math_task.Score(1.0, True, "1"), answer
        assert time.process_time() - start < 0.5


def test_the_budget_is_the_graders_cpu_time_not_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import math_verify

    monkeypatch.setattr(math_grading, "GRADER_CPU_S", 0.2)
    real = math_verify.verify

    def descheduled(*args, **kwargs):  # what a loaded machine does to the grader: wall time passes, CPU time not
        time.sleep(0.6)
        return real(*args, **kwargs)

    monkeypatch.setattr(math_verify, "verify", descheduled)
    assert math_grading.grade("x+1", "1+x") is True


def test_an_answer_over_the_cpu_budget_is_counted_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    import math_verify

    monkeypatch.setattr(math_grading, "GRADER_CPU_S", 0.2)

    def busy(*args, **kwargs):
        end = time.thread_time() + 5
        while time.thread_time() < end:
            pass
        return True

    monkeypatch.setattr(math_verify, "verify", busy)
    start = time.perf_counter()
    score = make().score(MathInstance("q", "x+1"), "1+x|")
    assert time.perf_counter() - start < 2
    assert score == math_task.Score(0.0, False, "1+x", grader_timeout=True)
    monkeypatch.undo()
    assert math_grading.grade("x+1", "1+x") is True  # the alarm is gone: the next answer is graded normally


def test_power_towers_stay_bounded_and_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(math_grading, "GRADER_CPU_S", 0.3)
    for answer in ("9^{9^{9}}", "9^{9^{9^{9}}}"):
        start = time.thread_time()  # the budget is CPU time: a loaded machine stretches the wall time, not this
        assert math_grading.grade("2", answer) is None
        assert time.thread_time() - start < 0.3 + 1.0


def test_an_alarm_the_graded_code_drops_comes_again() -> None:
    dropped = []

    def grader_that_drops_the_first_alarm() -> None:
        with math_grading._cpu_budget(0.05):
            try:
                while True:
                    pass
            except math_grading._OverBudget:
                dropped.append(1)  # as the interpreter drops an exception raised in a finalizer
            while True:  # the grader goes on: the next tick stops it
                pass

    with pytest.raises(math_grading._OverBudget):
        grader_that_drops_the_first_alarm()
    assert dropped == [1]
    assert math_grading.grade("x+1", "1+x") is True  # and nothing fires once the block is left


def test_grading_off_the_main_thread_has_no_alarm_and_still_works() -> None:
    import threading

    out = []
    worker = threading.Thread(target=lambda: out.append(math_grading.grade("x+1", "(1+x)")))
    worker.start()
    worker.join()
    assert out == [True]


@pytest.mark.slow
def test_hostile_answers_time_out_and_are_wrong() -> None:
    start = time.perf_counter()
    assert not is_equivalent("2", "9^{9^{9^{9}}}")
    assert time.perf_counter() - start < 2 * math_grading.GRADER_CPU_S + 2


def test_overlong_answers_are_wrong_without_parsing() -> None:
    start = time.perf_counter()
    assert not is_equivalent("2", "1+" * 10_000 + "1")
    assert time.perf_counter() - start < 0.5


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_score_never_raises(s: str) -> None:
    inst = MathInstance(question="q", answer="1/2")
    for task in (COMPACT, CHAT, ANSWER_ONLY):
        for text in (s, s + "|", f"</think><answer>{s}</answer>", f"{s}</answer>"):
            score = task.score(inst, text)
            assert score.reward in (0.0, 1.0)


COMPACT = make()
CHAT = make(style="chat")
ANSWER_ONLY = make(style="chat", think=False, question="larger", terms=2, max_operand=99)


# ------------------------------------------------------------------------------- thinking off, the larger number
def test_larger_questions_name_distinct_numbers_and_the_answer_is_the_largest() -> None:
    for terms in (2, 3):
        task = make(style="chat", question="larger", terms=terms, max_operand=9 if terms == 3 else 99)
        for i in range(200):
            inst = task.instance("train", i)
            numbers = [int(n) for n in re.findall(r"\d+", inst.question)]
            assert len(numbers) == len(set(numbers)) == terms
            assert all(1 <= n <= task.cfg.max_operand for n in numbers)
            assert inst.answer == str(max(numbers))
            assert inst == task.instance("train", i)  # deterministic
        assert task.instance("train", 0) != task.instance("val", 0)
    assert (
        make(style="chat", question="larger", terms=2)
        .instance("val", 3)
        .question.startswith("Which number is larger, ")
    )
    assert (
        make(style="chat", question="larger", terms=3)
        .instance("val", 3)
        .question.startswith("Which number is the largest: ")
    )


def test_thinking_off_asks_for_the_answer_alone_and_prefills_it() -> None:
    task = ANSWER_ONLY
    inst = task.instance("val", 0)
    prompt = task.prompt(inst)
    assert prompt.endswith(f"{inst.question}<answer>")
    assert "Give only the final answer inside <answer></answer>." in prompt
    assert "Example: Which number is larger, 3 or 8? <answer>8</answer>" in prompt
    assert "<think>" not in prompt
    assert "\\boxed" not in prompt
    assert (task.stop, task.between) == ("</answer>", "\n<answer>")  # each answer of a chain opens alike
    right, wrong = inst.answer, str(int(inst.answer) - 1)
    assert task.score(inst, f"{right}</answer>").success
    assert task.score(inst, f" {right} </answer>\nmore text").success
    assert task.score(inst, f"\\boxed{{{right}}}</answer>").success
    assert task.score(inst, f"{wrong}</answer>") == math_task.Score(0.0, False, wrong)
    assert task.score(inst, right).key is None  # never closed: cut at the length limit
    assert not task.score(inst, f"</think><answer>{right}</answer>").success  # the answer is all before </answer>
    arithmetic = make(style="chat", think=False)
    assert "Example: What is 2+3? <answer>5</answer>" in arithmetic.prompt(arithmetic.instance("val", 0))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"question": "smallest", "style": "chat"}, "task.question='smallest' must be one of arithmetic, larger"),
        ({"question": "larger"}, "task.question=larger is chat-only"),
        ({"question": "larger", "style": "chat", "terms": 4, "max_operand": 3}, "task.max_operand must be >= 4"),
    ],
)
def test_bad_question_settings_are_one_line_errors(kw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        MathTaskConfig(name="math", **kw)


# ---------------------------------------------------------------------------------------------- the reader
def test_reader_reads_rows(tmp_path: Path) -> None:
    path = write(tmp_path, ['{"question": "1+1?", "answer": "2"}', "", '{"question": "half?", "answer": 0.5}'])
    rows = load_jsonl(path)
    assert [(r.question, r.answer) for r in rows] == [("1+1?", "2"), ("half?", "0.5")]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"question": "q", "answer": "a"', "is not valid JSON"),
        ("not json at all", "is not valid JSON"),
        ('{"question": "q"}', "missing field 'answer'"),
        ('{"answer": "a"}', "missing field 'question'"),
        ('{"question": 3, "answer": "a"}', "'question' must be"),
        ('{"question": "q", "answer": ["a"]}', "'answer' must be"),
        ('{"question": "q", "answer": true}', "'answer' must be"),
        ('{"question": "q", "answer": null}', "'answer' must be"),
        ('{"question": "q", "answer": " "}', "'answer' is empty"),
        ('["question", "answer"]', "is a JSON list, not an object with 'question' and 'answer'"),
    ],
)
def test_malformed_line_3_is_named(tmp_path: Path, bad: str, message: str) -> None:
    good = json.dumps({"question": "1+1?", "answer": "2"})
    path = write(tmp_path, [good, good, bad, good])
    with pytest.raises(ConfigError, match=message) as err:
        load_jsonl(path)
    assert re.search(rf"{re.escape(str(path))}:3[: ]", str(err.value))  # line 3 named (not 30)
    with pytest.raises(ConfigError, match=r":3[: ]"):
        make(data=str(path))


def test_missing_or_empty_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        make(data=str(tmp_path / "nope.jsonl"))
    with pytest.raises(ConfigError, match="no rows"):
        make(data=str(write(tmp_path, [""])))
    with pytest.raises(ConfigError, match="at least 2 rows"):
        make(data=str(write(tmp_path, ['{"question": "q", "answer": "1"}'])))
    (tmp_path / "bin.jsonl").write_bytes(b'{"question": "q", "answer": "1"}\n\xff\xfe\n')
    with pytest.raises(ConfigError, match=":2: not UTF-8"):
        load_jsonl(tmp_path / "bin.jsonl")


def test_dataset_splits(tmp_path: Path) -> None:
    rows = [json.dumps({"question": f"q{i}?", "answer": str(i)}) for i in range(30)]
    task = make(data=str(write(tmp_path, rows)))
    train = {task.instance("train", i) for i in range(100)}
    val = [task.instance("val", i) for i in range(3)]
    assert len(train) == 27
    assert len(set(val)) == 3
    assert not train & set(val)
    assert [make(data=task.cfg.data).instance("val", i) for i in range(3)] == val  # fixed rows, file order
    assert [MathTask(task.cfg, 1).instance("val", i) for i in range(3)] == val  # the same for every seed
    other = MathTask(task.cfg, 1)
    assert [other.instance("train", i) for i in range(27)] != [task.instance("train", i) for i in range(27)]
    separate = make(data=task.cfg.data, val_data=str(write(tmp_path, rows[:2], "val.jsonl")))
    assert separate.instance("val", 1).question == "q1?"
    assert len({separate.instance("train", i) for i in range(60)}) == 30
    assert set(task.alphabet()) >= set("q?0123456789")
    # the warm start uses training rows only
    corpus = task.warm_start_corpus(random.Random(0), 300)
    held = {r.question for r in val}
    assert not any(line[1:].split("=", 1)[0] in held for line in corpus)
    assert task.warm_start_key()["data"]


# ----------------------------------------------------------------------------------------- generated set
def test_generated_answers_are_correct() -> None:
    task = make(operators="+-*/", terms=4)
    for split in ("train", "val"):
        for i in range(300):
            inst = task.instance(split, i)
            assert inst.expr is not None
            assert Fraction(inst.answer) == reference_value(inst.expr)
            assert task.score(inst, inst.answer + "|").success
    default = make()
    for i in range(100):
        inst = default.instance("train", i)
        assert re.fullmatch(r"[0-9]+([-+*][0-9]+){2}", inst.expr)
        assert inst.question == f"What is {inst.expr}?"
        assert int(inst.answer) == reference_value(inst.expr)
        assert len(inst.answer) + 1 <= 8  # fits conf/task/math.yaml's max_new_tokens


def test_generated_instances_are_deterministic() -> None:
    assert [make().instance("train", i) for i in range(20)] == [make().instance("train", i) for i in range(20)]
    assert [make().instance("train", i) for i in range(20)] != [make().instance("val", i) for i in range(20)]


def test_compact_layout_from_the_docstring() -> None:
    task = make()
    inst = MathInstance(question="What is 12+7*3?", answer="33", expr="12+7*3")
    assert task.prompt(inst) == "P12+7*3="
    assert task.sketch_head(inst) == "S12+7*3="
    assert task.solve_prompt(inst, "7*3=21|") == "S12+7*3=7*3=21|P12+7*3="
    chat = make(style="chat").prompt(inst)
    assert chat.startswith("You're a helpful assistant. You are solving Math problems. Put your final answer in ")
    assert "\nTurn 1:\nState:\nWhat is 12+7*3?\n" in chat
    assert chat.endswith("<think>")


def test_config_validation() -> None:
    for bad in ({"terms": 1}, {"terms": 7}, {"operators": "^"}, {"operators": ""}, {"max_operand": 0}):
        with pytest.raises(ConfigError):
            MathTaskConfig(name="math", **bad)


def test_warm_start_corpus_is_well_formed() -> None:
    task = make()
    lines = task.warm_start_corpus(random.Random(0), 2000)
    alphabet = set(task.alphabet())
    first_hits = firsts = 0
    for line in lines:
        assert set(line) <= alphabet, line
        m = re.fullmatch(r"([PS])([0-9+*-]+)=(.*)\|", line)
        assert m, line
        expr = m.group(2)
        inst = MathInstance(question="", answer=str(reference_value(expr)), expr=expr)
        if m.group(1) == "P":
            answers = m.group(3).split("|")
            assert all(re.fullmatch(r"-?[0-9]+", a) for a in answers), line
            assert len(set(answers)) == len(answers)
            first_hits += task.score(inst, answers[0] + "|").success
            firsts += 1
        elif "|P" in m.group(3):
            step, answer = m.group(3).split("|P" + expr + "=")
            pair, value = step.split("=")
            # the answer follows from the step as written (even when its value is wrong)
            tokens = re.findall(r"[0-9]+|[-+*/]", expr)
            pair_tokens = re.findall(r"[0-9]+|[-+*/]", pair)
            followed = [
                reference_value([*tokens[:i], Fraction(value), *tokens[i + 3 :]])
                for i in range(0, len(tokens) - 2, 2)
                if tokens[i : i + 3] == pair_tokens
            ]
            assert Fraction(answer) in followed, line
        else:
            steps = m.group(3).split("|")
            assert len(set(steps)) == len(steps)
            assert all(re.fullmatch(r"[0-9]+[-+*][0-9]+=-?[0-9]+", s) for s in steps), line
    assert 0.05 < first_hits / firsts < 0.5  # unskilled: right sometimes, mostly wrong


def test_module_is_cheap_to_import() -> None:
    code = "import sys, sesa_cli.tasks.math; print(sorted(m for m in ('torch', 'math_verify', 'sympy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_task_configs_compose() -> None:
    from hydra import compose, initialize_config_dir

    import sesa_cli.tasks.countdown  # noqa: F401  (registers the schema)
    from sesa_cli.commands.schemas import register_configs
    from sesa_cli.config import conf_dir, to_object
    from sesa_cli.tasks.countdown import CountdownTaskConfig

    register_configs()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        math_cfg = to_object(compose(config_name="train", overrides=["task=math"])).task
        cd_cfg = to_object(compose(config_name="train", overrides=["task=countdown", "task.style=chat"])).task
    assert isinstance(math_cfg, MathTaskConfig)
    assert (math_cfg.name, math_cfg.max_new_tokens, math_cfg.data) == ("math", 8, None)
    assert isinstance(cd_cfg, CountdownTaskConfig)
    assert (cd_cfg.name, cd_cfg.style, cd_cfg.max_new_tokens, cd_cfg.max_number) == ("countdown", "chat", 16, 99)
