"""Math: a question, one final answer, graded by ``math-verify`` (spec section 3).

Data: a JSONL file (``task.data=path``), one ``{"question": str, "answer": str | number}`` object per line; a
malformed line is a ``ConfigError`` naming the file and its 1-based line number. Validation uses ``task.val_data``
when given, else a fixed tenth of the file's rows (the same rows for every seed, in file order). Without
``task.data`` the task generates an arithmetic set the tiny model can learn: ``terms`` numbers from
1..``max_operand`` joined by ``operators`` (``2+7*3``), the answer an integer (or a fraction ``a/b`` when ``/`` is
allowed).

Grading: redundant brackets are dropped first (``((((1))))`` is ``1``: math-verify's parser takes seconds on deep
nesting); equal exact numbers (``1/2``, ``0.5``, ``\\frac{1}{2}``, ``2`` vs ``2.0``) are then decided without
math-verify; everything else goes to ``math_verify.verify(parse(gold), parse(answer))``, imported lazily, and any
exception counts as wrong. Its work is bounded by answer size (1000 characters) and by ``GRADER_CPU_S`` seconds of
the grading thread's own CPU time, not wall time, so a busy machine never flips a verdict (issue 17; main thread
only, where signals arrive). An answer that exhausts the budget (``9^{9^{9}}``) scores 0 with
``Score.grader_timeout`` set, counted as ``rollout/grader_timeouts`` and ``eval/grader_timeouts``. Reward 1 if
correct, else 0.

Solution key: the normalised final answer (numbers in lowest terms, ``1/2``; other text without spaces); every
correct answer gets the gold answer's key, so distinct-correct counts equivalent forms once. Sketch (generated set):
the first step, one operation with its value (``7*3=21``); a step taken out of precedence order (``12+7=19``)
leads to another answer.

Compact layout (``stop`` = "|"): prompt ``P12+7*3=`` ; answer ``33|`` ; sequential ``P12+7*3=33|57|...`` ; sketches
``S12+7*3=7*3=21|12+7=19|...`` ; a sketch is expanded from ``S12+7*3=7*3=21|P12+7*3=``. Chat: RAGEN's turn text
around the question, ``Put your final answer in \\boxed{}.``, and ``<think>...</think><answer>...</answer>``; the
answer is the last ``\\boxed{}`` inside ``<answer>``, or the whole ``<answer>`` content.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import random
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache, partial
from pathlib import Path
from typing import Any

from sesa_cli.config import ConfigError, TaskConfig, at_least, raise_if
from sesa_cli.tasks import safe_arith
from sesa_cli.tasks.base import Score, Task, register_task, sketch_body
from sesa_cli.tasks.countdown import CHAT_STOP, COMPACT_STOP, FORMAT_PROMPT, SYSTEM_PROMPT, THINK, think_answer

INSTRUCTION = "You are solving Math problems. Put your final answer in \\boxed{}."
"""RAGEN's MetamathQA ``env_instruction`` ("You are solving Math problems. ") plus the boxed-answer rule."""
GRADER_CPU_S = 3.0
"""CPU seconds math-verify may spend on one answer (gold and answer parsing plus the comparison), counted on the
grading thread's own clock (``time.thread_time``): a correct answer that needs 1.6 s of work is correct on an idle
machine and on a loaded one alike (math-verify's own wall-clock alarm, 3 s, was the bound before)."""
MAX_ANSWER_CHARS = 1000
"""Longer answers are graded wrong without parsing (bounds the work when no timeout is possible)."""
WARM_POOL = 2000
"""The warm-start corpus draws its questions from this many train-split instances."""
_P_CORRECT = 0.1
"""Warm start: share of unskilled answers that are the right one on purpose (others are plausible mistakes)."""
_MAX_TEXT = 100_000
_INT = re.compile(r"[+-]?[0-9]{1,60}")
_THOUSANDS = re.compile(r"[+-]?[0-9]{1,3}(,[0-9]{3})+")
_DECIMAL = re.compile(r"[+-]?[0-9]{0,60}\.[0-9]{0,60}")
_RATIO = re.compile(r"([+-]?[0-9]{1,60})/([0-9]{1,60})")
_FRAC = re.compile(r"([+-]?)\\[dt]?frac\{([+-]?[0-9]{1,60})\}\{([+-]?[0-9]{1,60})\}")
_FRAC_SHORT = re.compile(r"([+-]?)\\[dt]?frac([0-9])([0-9])")


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
        if not self.operators or set(self.operators) - set("+-*/"):
            raise ConfigError(f"task.operators={self.operators!r} must be a non-empty subset of '+-*/'")
        raise_if(at_least(self, "task", 1, "list_max", "chat_max_words"))


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
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{where}: invalid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise ConfigError(f"{where}: expected a JSON object with 'question' and 'answer'")
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


# --------------------------------------------------------------------------------------------------- answers
def _rational(text: str) -> Fraction | None:
    """The exact number ``text`` writes (``-3``, ``1,000``, ``0.5``, ``1/2``, ``\\frac{1}{2}``), or None."""
    if _INT.fullmatch(text):
        return Fraction(int(text))
    if _THOUSANDS.fullmatch(text):
        return Fraction(int(text.replace(",", "")))
    if _DECIMAL.fullmatch(text) and any(ch.isdigit() for ch in text):
        return Fraction(text)
    for pattern in (_RATIO, _FRAC, _FRAC_SHORT):
        m = pattern.fullmatch(text)
        if m:
            *sign, num, den = m.groups()
            if int(den) == 0:
                return None
            value = Fraction(int(num), int(den))
            return -value if sign and sign[0] == "-" else value
    return None


def _unwrap(text: str) -> str:
    """Strip spaces, ``$``, ``\\left``/``\\right``, a trailing period, one outer ``\\boxed{}`` and redundant
    brackets."""
    text = re.sub(r"\s+", "", text[:MAX_ANSWER_CHARS]).replace("\\left", "").replace("\\right", "")
    text = text.strip("$").rstrip(".")
    boxed = last_boxed(text)
    if boxed is not None and text.startswith("\\boxed{") and text.endswith("}") and len(boxed) == len(text) - 8:
        text = boxed
    return shed_brackets(text)


_CLOSE = {"(": ")", "{": "}"}


def _bracket_pairs(text: str) -> dict[int, int] | None:
    """Index of each ``(``/``{`` -> index of its closing bracket (``\\{``, ``\\}`` are literal braces, not
    grouping); None when the brackets do not balance."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(text):
        if i and text[i - 1] == "\\":
            continue
        if ch in _CLOSE:
            stack.append(i)
        elif ch in ")}":
            if not stack or _CLOSE[text[stack[-1]]] != ch:
                return None
            pairs[stack.pop()] = i
    return None if stack else pairs


def shed_brackets(text: str) -> str:
    """``text`` without grouping that changes nothing: a bracket pair whose content is one pair of the same kind
    (``((x))`` -> ``(x)``, ``x^{{2}}`` -> ``x^{2}``), then a pair around the whole answer that holds no top-level
    comma (``(x+1)`` -> ``x+1``; ``(1,2)`` stays a tuple). Linear in the length; unbalanced text is unchanged."""
    pairs = _bracket_pairs(text)
    if not pairs:
        return text
    doubled = [o for o, c in pairs.items() if pairs.get(o + 1) == c - 1 and text[o] == text[o + 1]]
    cut = set(doubled) | {pairs[o] for o in doubled}
    text = "".join(ch for i, ch in enumerate(text) if i not in cut)
    pairs = _bracket_pairs(text) or {}
    if pairs.get(0) == len(text) - 1:
        inner = text[1:-1]
        depth = 0
        for i, ch in enumerate(inner):
            if i and inner[i - 1] == "\\":
                continue
            depth += (ch in _CLOSE) - (ch in ")}")
            if ch == "," and depth == 0:
                return text
        text = inner
    return text


def normalize_answer(text: str) -> str:
    """The solution key of an answer: an exact number in lowest terms (``1/2``, ``-3``), else the unwrapped text."""
    text = _unwrap(text)
    value = _rational(text)
    return str(value) if value is not None else text[:200]


def last_boxed(text: str) -> str | None:
    """The content of the last closed ``\\boxed{...}`` (balanced braces), or None. One linear scan; never raises."""
    opens: list[int] = []  # start of each open brace's content, negative when it opened a \boxed{
    best: tuple[int, int] | None = None
    i, n, mark = 0, len(text), "\\boxed{"
    while i < n:
        if text.startswith(mark, i):
            i += len(mark)
            opens.append(-i)
            continue
        ch = text[i]
        if ch == "{":
            opens.append(i + 1)
        elif ch == "}" and opens:
            start = opens.pop()
            if start < 0 and (best is None or -start > best[0]):
                best = (-start, i)
        i += 1
    return None if best is None else text[best[0] : best[1]]


class _OverBudget(BaseException):
    """math-verify used up GRADER_CPU_S (a BaseException: math-verify catches Exception around its own steps)."""


@contextlib.contextmanager
def _cpu_budget(seconds: float) -> Iterator[None]:
    """Raise _OverBudget once the calling thread has spent ``seconds`` of CPU time in the block. A SIGALRM every
    50 ms of wall time reads the thread's CPU clock, so time spent waiting for a busy CPU does not count. Signals
    reach the main thread only; elsewhere the answer-length cap is the one bound (math-verify's alarm was the same)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    start = time.thread_time()

    def check(signum: int, frame: Any) -> None:
        if time.thread_time() - start > seconds:
            signal.setitimer(signal.ITIMER_REAL, 0)  # disarmed before raising: nothing fires after the block
            raise _OverBudget

    previous = signal.signal(signal.SIGALRM, check)
    signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _math_verify() -> Any:
    """The math_verify module, imported on first use (its notice that timeouts are ours to handle is dropped)."""
    import math_verify

    _drop_timeout_notice()
    return math_verify


@lru_cache(maxsize=1)
def _drop_timeout_notice() -> None:
    import logging

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(lambda record: "Timeout is disabled" not in record.getMessage())


@lru_cache(maxsize=4096)
def _parsed_gold(gold: str) -> Any:
    return _math_verify().parse(f"\\boxed{{{shed_brackets(gold)}}}", parsing_timeout=None)


def grade(gold: str, answer: str) -> bool | None:
    """Whether ``answer`` is equivalent to ``gold`` (exact numbers directly, else math-verify); None when
    math-verify used up its CPU budget before deciding. Never raises."""
    if not isinstance(answer, str) or not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
        return False
    g, a = _rational(_unwrap(gold)), _rational(_unwrap(answer))
    if g is not None and a is not None and (g == a or ("." not in gold and "." not in answer)):
        return g == a  # decimals that differ still go to math-verify (its float rounding: 1/3 ~ 0.333333)
    mv = _math_verify()
    try:
        with _cpu_budget(GRADER_CPU_S):
            pred = mv.parse(f"\\boxed{{{shed_brackets(answer.strip())}}}", parsing_timeout=None)
            return bool(mv.verify(_parsed_gold(gold), pred, timeout_seconds=None))
    except _OverBudget:
        return None
    except Exception:  # noqa: BLE001  (untrusted text: any failure of the grader = wrong)
        return False


def is_equivalent(gold: str, answer: str) -> bool:
    """Whether ``answer`` is equivalent to ``gold``; an answer the grader could not decide in budget is not."""
    return grade(gold, answer) is True


# ------------------------------------------------------------------------------------------------------ the task
@register_task("math", MathTaskConfig)
class MathTask(Task):
    stop = COMPACT_STOP
    between = ""
    cfg: MathTaskConfig

    def __init__(self, cfg: TaskConfig, seed: int = 0) -> None:
        if not isinstance(cfg, MathTaskConfig):
            raise ConfigError("task=math needs a MathTaskConfig")
        super().__init__(cfg, seed)
        # stop/between depend on the style (as in tasks/agent.py): a chat answer ends with </answer>.
        self.stop = CHAT_STOP if self.chat else COMPACT_STOP  # type: ignore[misc]
        self.between = "\n" if self.chat else ""  # type: ignore[misc]
        if importlib.util.find_spec("math_verify") is None:
            raise ConfigError("task=math needs math-verify: pip install 'math-verify>=0.7'")
        self._rows: tuple[list[MathInstance], list[MathInstance]] | None = None
        self._data_hash = ""
        if cfg.data:
            self._rows = self._load()

    @property
    def chat(self) -> bool:
        return self.cfg.style == "chat"

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
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', not {split!r}")
        if self._rows is None:
            return _generate(f"math/{split}/{self.seed}/{index}", self.cfg.terms, self.cfg.max_operand,
                             self.cfg.operators)  # fmt: skip
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
        return (
            f"{SYSTEM_PROMPT}{INSTRUCTION}\nTurn 1:\nState:\n{inst.question}\n{hint}You have 1 actions left. "
            f"Always output: {FORMAT_PROMPT} with no extra text. Strictly follow this format. Max response length: "
            f"{self.cfg.chat_max_words} words (tokens).\n{THINK}"
        )

    def prompt(self, inst: MathInstance) -> str:
        return self._chat(inst) if self.chat else self._compact(inst, "P")

    def answer(self, completion: str) -> str | None:
        """The final answer of a completion, or None. Never raises.

        chat: the last ``\\boxed{}`` inside ``<answer>...</answer>`` (RAGEN's format), else that content (None if
        a box is left open);
        compact: the text before ``stop`` (None without a ``stop``: cut at max_new_tokens).
        """
        if not isinstance(completion, str):
            return None
        if self.chat:
            parsed = think_answer(completion)
            if parsed is None:
                return None
            content = parsed[1].strip()
            boxed = last_boxed(content)
            if boxed is None and "\\boxed{" in content:
                return None  # an unclosed box: no final answer
            text = boxed if boxed is not None else content
        else:
            head, found, _ = completion[:_MAX_TEXT].partition(self.stop)
            text = head if found else ""
        text = text.strip()
        return text or None

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
            return (
                f"{SYSTEM_PROMPT}You are solving Math problems.\nState:\n{inst.question}\nDo not solve it yet. "
                "Propose a method in one short sentence, different from every method listed so far. Always output: "
                "<answer>...</answer> with no extra text.\n"
            )
        return self._compact(inst, "S")

    def sketch_text(self, sketch: str) -> str:
        """The plan inside a drafted sketch (chat: the answer's content; compact: the text before ``stop``)."""
        return sketch_body(sketch, self.stop, self.chat, 300, _MAX_TEXT)

    def sketch_step(self, inst: MathInstance, sketch: str) -> tuple[list[int], Fraction] | None:
        """A compact sketch ``a op b=v`` of a generated question: the token indices where ``a op b`` occurs in the
        expression as neighbours, and v; None if it is not such a step. Never raises."""
        if self.chat or not inst.expr:
            return None
        pair, sep, value_text = self.sketch_text(sketch).partition("=")
        value = _rational(value_text.strip()) if sep else None
        tokens = _tokens(inst.expr)
        where = [i for i in range(0, len(tokens) - 2, 2) if "".join(tokens[i : i + 3]) == pair.strip()]
        return (where, value) if where and value is not None else None

    def sketch_key(self, inst: MathInstance, sketch: str) -> str | None:
        """Compact, generated questions: ``a op b=v`` in lowest terms, if ``a op b`` is a neighbouring pair of the
        expression; otherwise (chat, datasets: a free-text method) the method's text, any non-empty one."""
        if self.chat or not inst.expr:
            return self.sketch_text(sketch) or None
        step = self.sketch_step(inst, sketch)
        return None if step is None else self.sketch_text(sketch).partition("=")[0].strip() + f"={_fmt(step[1])}"

    def follows_sketch(self, inst: MathInstance, sketch: str, completion: str, score: Score) -> bool | None:
        """Compact, generated questions: the answer is what the expression gives with the step's pair replaced by
        its value v (right or wrong); None where the sketch is free text."""
        if self.chat or not inst.expr:
            return None
        step = self.sketch_step(inst, sketch)
        answer = self.answer(completion) if step is not None else None
        value = _rational(answer) if answer is not None else None
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
        step = self.sketch_text(sketch)
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
        seen: set[str] = set()
        out: list[str] = []
        for _ in range(8 * k):
            text = draw()
            key = normalize_answer(text)
            if key not in seen:
                seen.add(key)
                out.append(text)
                if len(out) == k:
                    break
        return out


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
