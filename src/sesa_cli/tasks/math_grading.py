"""Math grading: is an answer equivalent to the gold answer, and which solution key does it get.

Redundant brackets are dropped first (``((((1))))`` is ``1``: math-verify's parser takes seconds on deep nesting);
equal exact numbers (``1/2``, ``0.5``, ``\\frac{1}{2}``, ``2`` vs ``2.0``) are then decided without math-verify;
everything else goes to ``math_verify.verify(parse(gold), parse(answer))``, imported lazily, and any exception
counts as wrong. Its work is bounded by answer size (``MAX_ANSWER_CHARS``) and by ``GRADER_CPU_S`` seconds of the
grading thread's own CPU time, not wall time, so a busy machine never flips a verdict (main thread only, where
signals arrive). An answer that exhausts the budget (``9^{9^{9}}``) is not decided (:func:`grade` returns
None): the task scores it 0 and counts it.

Solution key (:func:`normalize_answer`): an exact number in lowest terms (``1/2``), other text without spaces.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from functools import lru_cache
from typing import Any

GRADER_CPU_S = 3.0
"""CPU seconds math-verify may spend on one answer (gold and answer parsing plus the comparison), counted on the
grading thread's own clock (``time.thread_time``): a correct answer that needs 1.6 s of work is correct on an idle
machine and on a loaded one alike (math-verify's own wall-clock alarm, 3 s, was the bound before)."""
MAX_ANSWER_CHARS = 1000
"""Longer answers are graded wrong without parsing (bounds the work when no timeout is possible)."""

_INT = re.compile(r"[+-]?[0-9]{1,60}")
_THOUSANDS = re.compile(r"[+-]?[0-9]{1,3}(,[0-9]{3})+")
_DECIMAL = re.compile(r"[+-]?[0-9]{0,60}\.[0-9]{0,60}")
_RATIO = re.compile(r"([+-]?[0-9]{1,60})/([0-9]{1,60})")
_FRAC = re.compile(r"([+-]?)\\[dt]?frac\{([+-]?[0-9]{1,60})\}\{([+-]?[0-9]{1,60})\}")
_FRAC_SHORT = re.compile(r"([+-]?)\\[dt]?frac([0-9])([0-9])")


def rational(text: str) -> Fraction | None:
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
    value = rational(text)
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
        # Raised at every tick past the budget, not once: an exception raised while the interpreter runs a
        # finalizer is printed and dropped, and a grader whose one alarm was lost that way computed 9**387420489
        # without end (seen under load). The block's own exit disarms the timer.
        if time.thread_time() - start > seconds:
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
    g, a = rational(_unwrap(gold)), rational(_unwrap(answer))
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
