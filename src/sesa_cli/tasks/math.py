"""Math: a question, one final answer, graded by ``math-verify``.

Data: a JSONL file (``task.data=path``), one ``{"question": str, "answer": str | number}`` object per line; a
malformed line is a ``ConfigError`` naming the file and its 1-based line number. Validation uses ``task.val_data``
when given, else a fixed tenth of the file's rows (the same rows for every seed, in file order). Without
``task.data`` the task generates an arithmetic set the tiny model can learn: ``terms`` numbers from
1..``max_operand`` joined by ``operators`` (``2+7*3``), the answer an integer (or a fraction ``a/b`` when ``/`` is
allowed).

Grading (sesa_cli.tasks.math_grading): exact numbers compared directly, everything else by math-verify within a CPU
budget. Reward 1 if correct, else 0; an answer the grader could not decide within its budget (``9^{9^{9}}``) scores
0 with ``Score.grader_timeout`` set, counted as ``rollout/grader_timeouts`` and ``eval/grader_timeouts``.

Solution key: the normalised final answer (numbers in lowest terms, ``1/2``; other text without spaces); every
correct answer gets the gold answer's key, so distinct-correct counts equivalent forms once. Sketch (generated set):
the first step, one operation with its value (``7*3=21``); a step taken out of precedence order (``12+7=19``)
leads to another answer.

Compact layout (``stop`` = "|"): prompt ``P12+7*3=`` ; answer ``33|`` ; sequential ``P12+7*3=33|57|...`` ; sketches
``S12+7*3=7*3=21|12+7=19|...`` ; a sketch is expanded from ``S12+7*3=7*3=21|P12+7*3=``. Chat: RAGEN's turn text
around the question, ``Put your final answer in \\boxed{}.``, and RAGEN's format (sesa_cli.tasks.ragen); the
answer is the last ``\\boxed{}`` inside ``<answer>``, or the whole ``<answer>`` content. With ``task.think=false``
(RAGEN's ``enable_think: false``) the prompt asks for the answer alone, shows one worked example, and pre-fills
``<answer>``; a sequential chain opens each later answer with ``<answer>`` too.
"""

from __future__ import annotations

import hashlib
import importlib.util
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache, partial
from pathlib import Path
from typing import Any

from sesa_cli.config import ConfigError, TaskConfig, at_least, raise_if, subset_of
from sesa_cli.runs import parse_json_object
from sesa_cli.tasks import ragen, safe_arith
from sesa_cli.tasks.base import Score, check_split, draw_distinct, register_task
from sesa_cli.tasks.math_grading import grade, last_boxed, normalize_answer, rational
from sesa_cli.tasks.ragen import SYSTEM_PROMPT, RagenTask

ENV_INSTRUCTION = "You are solving Math problems. "
"""RAGEN's MetamathQA ``env_instruction``."""
INSTRUCTION = ENV_INSTRUCTION + "Put your final answer in \\boxed{}."
"""The env instruction plus the boxed-answer rule."""
QUESTIONS = ("arithmetic", "larger")
"""The generated set's kinds of question (``task.question``)."""
WARM_POOL = 2000
"""The warm-start corpus draws its questions from this many train-split instances."""
_P_CORRECT = 0.1
"""Warm start: share of unskilled answers that are the right one on purpose (others are plausible mistakes)."""


@dataclass
class MathTaskConfig(TaskConfig):
    """Math questions with one final answer, graded by math-verify; a generated arithmetic set by default."""

    data: str | None = None
    """JSONL file of ``{"question": ..., "answer": ...}`` lines; empty or null = the generated arithmetic set."""
    val_data: str | None = None
    """JSONL file for validation; null = a fixed tenth (at least one row) of ``data`` is held out."""
    terms: int = 3
    """Generated set: numbers per question (2-6)."""
    max_operand: int = 9
    """Generated set: numbers are drawn from 1..max_operand (at most 999). After its 600-step warm start the tiny
    model answers 4.5% of the default questions right (0.8% with max_operand=20)."""
    operators: str = "+-*"
    """Generated set: operators a question may use (a subset of ``+-*/``; with ``/`` answers may be fractions)."""
    question: str = "arithmetic"
    """Generated set: ``arithmetic`` (``What is 2+7*3?``) or ``larger`` (``Which number is larger, 27 or 82?``; with
    ``terms`` > 2 the largest of ``terms`` distinct numbers from 1..max_operand; chat style only), a choice a weak
    instruction-tuned base gets right sometimes (SmolLM2-135M: docs/real-models.md)."""
    think: bool = True
    """chat style: RAGEN's ``enable_think``. false: the prompt asks for the final answer alone inside
    ``<answer></answer>`` with one worked example of the generated set, and the assistant turn is pre-filled with
    ``<answer>`` (a reply is its answer and ``</answer>``); true: RAGEN's ``<think>...</think><answer>...</answer>``."""
    chat_max_words: int = 100
    """chat style: the length budget the prompt states (RAGEN's ``max_tokens: 100``); not a generation limit."""
    list_max: int = 16
    """Longest list of distinct answers (or sketches) in the warm-start corpus (should be >= sampler.group_size)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 2 <= self.terms <= 6:
            raise ConfigError(f"task.terms={self.terms} must be between 2 and 6")
        if not 1 <= self.max_operand <= 999:
            raise ConfigError(f"task.max_operand={self.max_operand} must be between 1 and 999")
        raise_if(subset_of(self, "task", "+-*/", "operators"))
        raise_if(at_least(self, "task", 1, "list_max", "chat_max_words"))
        if self.question not in QUESTIONS:
            raise ConfigError(f"task.question={self.question!r} must be one of {', '.join(QUESTIONS)}")
        if self.question == "larger":
            if self.style != "chat":
                raise ConfigError(
                    "task.question=larger is chat-only: choose an instruction-tuned model (model=smollm2-135m)"
                )
            if self.max_operand < self.terms:
                raise ConfigError(
                    f"task.question=larger draws {self.terms} distinct numbers: task.max_operand must be >= {self.terms}"
                )


@dataclass(frozen=True)
class MathInstance:
    """One question; ``expr`` is the arithmetic expression of a generated question (None for dataset rows)."""

    question: str
    answer: str
    expr: str | None = None


# ------------------------------------------------------------------------------------------------------- the data
def load_jsonl(path: str | Path) -> list[MathInstance]:
    """Rows of a JSONL file; raises ConfigError naming the file and the 1-based line of the first bad line."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"math data file {str(path)!r} not found")
    rows: list[MathInstance] = []
    with file.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{file}:{lineno}"
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise ConfigError(f"{where}: not UTF-8 text") from None
            if not line:
                continue
            obj = parse_json_object(line, where, "an object with 'question' and 'answer'")
            for key in ("question", "answer"):
                if key not in obj:
                    raise ConfigError(f"{where}: missing field {key!r}")
            question, answer = obj["question"], obj["answer"]
            if not isinstance(question, str) or not question.strip():
                raise ConfigError(f"{where}: 'question' must be a non-empty string")
            if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
                raise ConfigError(f"{where}: 'answer' must be a string or a number, not {type(answer).__name__}")
            answer = str(answer).strip()
            if not answer:
                raise ConfigError(f"{where}: 'answer' is empty")
            rows.append(MathInstance(question=question.strip(), answer=answer))
    if not rows:
        raise ConfigError(f"math data file {str(path)!r} has no rows")
    return rows


# ------------------------------------------------------------------------------------------------------ the task
@register_task("math", MathTaskConfig)
class MathTask(RagenTask):
    cfg: MathTaskConfig
    chat_instruction = INSTRUCTION
    sketch_line = 300

    def __init__(self, cfg: TaskConfig, seed: int = 0) -> None:
        super().__init__(cfg, seed)
        if self.chat and not self.cfg.think:
            self.between = "\n" + ragen.ANSWER  # every answer of a sequential chain opens as the first one does
        if importlib.util.find_spec("math_verify") is None:
            raise ConfigError("task=math needs math-verify: pip install 'math-verify>=0.7'")
        self._rows: tuple[list[MathInstance], list[MathInstance]] | None = None
        self._data_hash = ""
        if self.cfg.data:
            self._rows = self._load()

    def _load(self) -> tuple[list[MathInstance], list[MathInstance]]:
        assert self.cfg.data
        rows = load_jsonl(self.cfg.data)
        # The warm-start cache follows the files' content (the corpus and the alphabet are made from them).
        digest = hashlib.sha256(Path(self.cfg.data).expanduser().read_bytes())
        if self.cfg.val_data:
            val = load_jsonl(self.cfg.val_data)
            digest.update(Path(self.cfg.val_data).expanduser().read_bytes())
            train = rows
        else:
            if len(rows) < 2:
                raise ConfigError(f"task.data={self.cfg.data!r} needs at least 2 rows to hold out validation rows")
            held = set(random.Random("math-holdout").sample(range(len(rows)), max(1, len(rows) // 10)))
            train = [r for i, r in enumerate(rows) if i not in held]
            val = [r for i, r in enumerate(rows) if i in held]
        self._data_hash = digest.hexdigest()[:16]
        return train, val

    def alphabet(self) -> str:
        chars = set("0123456789-=|PS") | set(self.cfg.operators)  # "-": negative answers, "/": fractions
        if self._rows is not None:
            for row in self._rows[0] + self._rows[1]:
                chars |= set(row.question) | set(row.answer)
        return "".join(sorted(chars))

    def warm_start_key(self) -> dict[str, Any]:
        c = self.cfg
        if self._rows is not None:
            source: dict[str, Any] = {"data": self._data_hash}
        else:
            source = {"terms": c.terms, "max_operand": c.max_operand, "operators": c.operators}
        return {"name": self.name, **source, "list_max": c.list_max, "v": 1}

    # ---------------------------------------------------------------- instances
    def instance(self, split: str, index: int) -> MathInstance:
        check_split(split)
        if self._rows is None:
            stream = f"math/{split}/{self.seed}/{index}"
            if self.cfg.question == "larger":
                return _larger(stream, self.cfg.terms, self.cfg.max_operand)
            return _generate(stream, self.cfg.terms, self.cfg.max_operand, self.cfg.operators)
        if split == "val":
            return self._rows[1][index % len(self._rows[1])]
        train = self._rows[0]
        return train[self._train_order[index % len(train)]]

    @cached_property
    def _train_order(self) -> list[int]:
        assert self._rows is not None
        order = list(range(len(self._rows[0])))
        random.Random(f"math/train/{self.seed}").shuffle(order)
        return order

    # ---------------------------------------------------------------- prompts and scoring
    def _compact(self, inst: MathInstance, head: str) -> str:
        return f"{head}{inst.expr or inst.question}="

    def _chat(self, inst: MathInstance, hint: str = "") -> str:
        if not self.cfg.think:
            return f"{self.chat_header()}{self._example()}\n{hint}{inst.question}{ragen.ANSWER}"
        return self.chat_header() + ragen.turn_text(1, inst.question, 1, self.cfg.chat_max_words, hint=hint)

    def instruction(self) -> str:
        # thinking off: the boxed-answer rule gives way to the answer-only rule (an answer is the tag's content)
        return self.chat_instruction if self.cfg.think else ENV_INSTRUCTION + ragen.ANSWER_ONLY

    def _example(self) -> str:
        """Thinking off: one worked example of the generated set (none for a dataset), after the answer rule."""
        if self._rows is not None:
            return ""
        if self.cfg.question == "larger":
            shown = (3, 8, 5, 7, 2, 6)[: self.cfg.terms]
            ex = MathInstance(question=_larger_question(shown), answer=str(max(shown)))
        else:
            ex = MathInstance(question="What is 2+3?", answer="5")
        return f" Example: {ex.question} {ragen.answer_block(ex.answer)}"

    def prompt(self, inst: MathInstance) -> str:
        return self._chat(inst) if self.chat else self._compact(inst, "P")

    def answer(self, completion: str) -> str | None:
        """The final answer of a completion, or None. Never raises.

        chat: the last ``\\boxed{}`` inside ``<answer>...</answer>`` (RAGEN's format; thinking off: the reply up to
        ``</answer>``), else that content (None if a box is left open);
        compact: the text before ``stop`` (None without a ``stop``: cut at max_new_tokens).
        """
        if not self.chat:
            return ragen.compact_answer(completion, self.stop)
        if self.cfg.think:
            parsed = ragen.think_answer(completion)
            found = None if parsed is None else parsed[1]
        else:
            found = ragen.answer_only(completion)
        if found is None:
            return None
        content = found.strip()
        boxed = last_boxed(content)
        if boxed is None and "\\boxed{" in content:
            return None  # an unclosed box: no final answer
        text = boxed if boxed is not None else content
        return text.strip() or None

    def score(self, inst: MathInstance, completion: str) -> Score:
        """Reward 1 iff the answer is equivalent to the gold answer; key = normalised answer (gold's if correct);
        ``grader_timeout`` when math-verify could not decide within its CPU budget (scored 0, and counted)."""
        text = self.answer(completion)
        if text is None:
            return Score(reward=0.0, success=False, key=None)
        verdict = grade(inst.answer, text)
        ok = verdict is True
        key = normalize_answer(inst.answer if ok else text)
        return Score(reward=1.0 if ok else 0.0, success=ok, key=key, grader_timeout=verdict is None)

    # ---------------------------------------------------------------- sketches: the first step
    def sketch_head(self, inst: MathInstance) -> str:
        if self.chat:
            # RAGEN's instruction without the boxed-answer rule: a method is not an answer
            header = SYSTEM_PROMPT + ENV_INSTRUCTION.rstrip()
            request = (
                "Do not solve it yet. Propose a method in one short sentence, different from every method listed "
                "so far."
            )
            return ragen.sketch_request(header, inst.question, request)
        return self._compact(inst, "S")

    def sketch_step(self, inst: MathInstance, sketch: str) -> tuple[list[int], Fraction] | None:
        """A compact sketch ``a op b=v`` of a generated question: the token indices where ``a op b`` occurs in the
        expression as neighbours, and v; None if it is not such a step. Never raises."""
        if self.chat or not inst.expr:
            return None
        pair, sep, value_text = self.sketch_content(sketch).partition("=")
        value = rational(value_text.strip()) if sep else None
        tokens = _tokens(inst.expr)
        where = [i for i in range(0, len(tokens) - 2, 2) if "".join(tokens[i : i + 3]) == pair.strip()]
        return (where, value) if where and value is not None else None

    def sketch_key(self, inst: MathInstance, sketch: str) -> str | None:
        """Compact, generated questions: ``a op b=v`` in lowest terms, if ``a op b`` is a neighbouring pair of the
        expression; otherwise (chat, datasets: a free-text method) the method's text, any non-empty one."""
        if self.chat or not inst.expr:
            return self.sketch_content(sketch) or None
        step = self.sketch_step(inst, sketch)
        return None if step is None else self.sketch_content(sketch).partition("=")[0].strip() + f"={_fmt(step[1])}"

    def follows_sketch(self, inst: MathInstance, sketch: str, completion: str, score: Score) -> bool | None:
        """Compact, generated questions: the answer is what the expression gives with the step's pair replaced by
        its value v (right or wrong); None where the sketch is free text."""
        if self.chat or not inst.expr:
            return None
        step = self.sketch_step(inst, sketch)
        answer = self.answer(completion) if step is not None else None
        value = rational(answer) if answer is not None else None
        return (
            value is not None
            and step is not None
            and any(_after_step(inst.expr, i, step[1]) == value for i in step[0])
        )

    def sketch_max_tokens(self) -> int:
        if self.chat or self._rows is not None:
            return self.cfg.max_new_tokens
        # "a op b=v|": operands of d digits; v at most 2d+1 characters (a product, a sign, or a fraction p/q)
        digits = len(str(self.cfg.max_operand))
        return (2 * digits + 1) + 1 + (2 * digits + 1) + len(self.stop)

    def solve_prompt(self, inst: MathInstance, sketch: str) -> str:
        step = self.sketch_content(sketch)
        if self.chat:
            return self._chat(inst, hint=f"Method: {step}\n")
        return self._compact(inst, "S") + step + self.stop + self._compact(inst, "P")

    # ---------------------------------------------------------------- warm start
    def warm_start_corpus(self, rng: random.Random, n: int) -> list[str]:
        """Compact lines over WARM_POOL train-split questions (the generated set: streams ``math/train/warm/<k>``,
        the same for every run seed; a dataset: its training rows). Answers are unskilled: the right one 10% of
        the time on purpose, otherwise a plausible mistake (generated set: an operation done first, in or out of
        precedence order, an off-by-a-little result, or a random number; dataset: another question's answer):

        * 70% (a dataset: 100%): ``P...=`` + 1..list_max answers with distinct keys;
        * 15%: ``S...=`` + 1..list_max distinct first steps ``a*b=v`` (the value is right 60% of the time);
        * 15%: ``S...=step|P...=`` + the answer that follows from that step.
        """
        if self.chat:
            raise ConfigError("the math warm-start corpus is compact-only; use task.style=compact with model=tiny")
        out: list[str] = []
        for _ in range(n):
            inst = self._warm_instance(rng)
            kind = rng.random() if inst.expr else 0.0
            if kind < 0.70:
                guesses = self._distinct(partial(self._guess, rng, inst), rng.randint(1, self.cfg.list_max))
                out.append(self._compact(inst, "P") + "".join(g + self.stop for g in guesses))
            elif kind < 0.85:
                assert inst.expr
                steps = self._distinct(partial(_random_step_text, rng, inst.expr), rng.randint(1, self.cfg.list_max))
                out.append(self._compact(inst, "S") + "".join(s + self.stop for s in steps))
            else:
                assert inst.expr
                step, answer = _random_step(rng, inst.expr)
                out.append(self.solve_prompt(inst, step) + answer + self.stop)
        return out

    def _warm_instance(self, rng: random.Random) -> MathInstance:
        if self._rows is None:
            c = self.cfg
            return _generate(f"math/train/warm/{rng.randrange(WARM_POOL)}", c.terms, c.max_operand, c.operators)
        return rng.choice(self._rows[0])  # training rows only, never the held-out ones

    def _guess(self, rng: random.Random, inst: MathInstance) -> str:
        u = rng.random()
        if u < _P_CORRECT:
            return inst.answer
        if self._rows is not None:
            return rng.choice(self._rows[0]).answer
        assert inst.expr
        if u < 0.35:
            return _random_step(rng, inst.expr, exact=True)[1]
        value = Fraction(inst.answer)
        if u < 0.7:
            return _fmt(value + rng.choice((-1, 1)) * rng.randint(1, 10))
        size = 2 * abs(int(value)) + 10  # a random number of the answer's sign and size
        return _fmt(Fraction(rng.randint(0, size) * (-1 if value < 0 else 1)))

    @staticmethod
    def _distinct(draw: Callable[[], str], k: int) -> list[str]:
        """Up to k draws with pairwise different answer keys."""
        return draw_distinct(draw, normalize_answer, k, tries=8)


def _fmt(value: Fraction) -> str:
    return str(value)  # "33", "-7", "7/2"


@lru_cache(maxsize=8192)
def _generate(stream: str, terms: int, max_operand: int, operators: str) -> MathInstance:
    rng = random.Random(stream)
    parts = [str(rng.randint(1, max_operand))]
    for _ in range(terms - 1):
        parts += [rng.choice(operators), str(rng.randint(1, max_operand))]
    expr = "".join(parts)
    value = safe_arith.evaluate(expr)
    assert value is not None  # operands are >= 1 and there are no parentheses: never a division by zero
    return MathInstance(question=f"What is {expr}?", answer=_fmt(value), expr=expr)


def _larger_question(numbers: Sequence[int]) -> str:
    if len(numbers) == 2:
        return f"Which number is larger, {numbers[0]} or {numbers[1]}?"
    return f"Which number is the largest: {', '.join(map(str, numbers))}?"


@lru_cache(maxsize=8192)
def _larger(stream: str, terms: int, max_operand: int) -> MathInstance:
    """``task.question=larger``: ``terms`` distinct numbers from 1..max_operand; the answer is the largest."""
    numbers = random.Random(stream).sample(range(1, max_operand + 1), terms)
    return MathInstance(question=_larger_question(numbers), answer=str(max(numbers)))


def _random_step(rng: random.Random, expr: str, exact: bool = False) -> tuple[str, str]:
    """A first step ``a op b=v`` on two neighbouring numbers of ``expr`` (v off by a little 40% of the time unless
    ``exact``) and the answer that follows from it (the rest evaluated with the usual precedence)."""
    tokens = _tokens(expr)
    i = 2 * rng.randrange(len(tokens) // 2)
    pair = "".join(tokens[i : i + 3])
    value = _after_step(expr, i, None)
    if not exact and rng.random() < 0.4:
        value += rng.choice((-1, 1)) * rng.randint(1, 5)
    rest = _after_step(expr, i, value)
    return f"{pair}={_fmt(value)}", _fmt(rest)


def _random_step_text(rng: random.Random, expr: str) -> str:
    return _random_step(rng, expr)[0]


@lru_cache(maxsize=8192)
def _tokens(expr: str) -> tuple[str, ...]:
    return tuple(re.findall(r"[0-9]+|[-+*/]", expr))


@lru_cache(maxsize=65536)
def _after_step(expr: str, i: int, value: Fraction | None) -> Fraction:
    """The value of tokens i..i+2 of ``expr`` (value=None), or of ``expr`` with them replaced by ``value``."""
    tokens = _tokens(expr)
    text = (
        "".join(tokens[i : i + 3]) if value is None else "".join(tokens[:i]) + f"({value})" + "".join(tokens[i + 3 :])
    )
    result = safe_arith.evaluate(text)
    return result if result is not None else Fraction(0)  # only a division by a zero step value gets here
