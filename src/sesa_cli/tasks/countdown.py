"""Countdown (RAGEN's ``countdown`` env): combine the numbers into an equation for the target.

Instances are drawn like RAGEN's data: 3-4 numbers and a target, kept only if some equation using every number
exactly once reaches the target. RAGEN keeps only instances solvable with + and - alone (its ``has_solution``
filter); ``task.solvable_ops`` selects that check, and the generator verifies it by exhaustive search. The policy
may always use + - * / and parentheses.

Reward, exactly RAGEN's ``compute_reward`` (score 1, format_score 0.1):

* 0    if the multiset of integers in the answer (regex ``\\d+``) is not the multiset of the numbers, or the
       answer is missing (chat: no ``<think>...</think><answer>...</answer>``; RAGEN's es_manager then adds its
       -0.1 format penalty, available as ``task.format_penalty``);
* 0.1  if the numbers are right but the expression is invalid or its value is not the target;
* 1    if it evaluates to within 1e-5 of the target.

Chat style is RAGEN's format (sesa_cli.tasks.ragen): the answer is the first action of
``<think>...</think><answer>...</answer>``.

RAGEN evaluates with Python's ``eval``; here :mod:`sesa_cli.tasks.safe_arith` computes the same value exactly and
never runs code (differences: no decimals or ``**``, which RAGEN's eval would accept; both are 0.1 here when the
integers match). Solution key: :func:`safe_arith.canonical`, equal up to commutativity, associativity and sign
moves, so ``3+4*5`` and ``5*4+3`` are one solution. Sketch: the first operation, two numbers combined
(``44+19``). The exhaustive search behind the generator and coverage@k is sesa_cli.tasks.countdown_solver.

Compact layout (``stop`` = "|"): prompt ``P98:44,19,35=`` ; answer ``44+19+35|`` ; a sequential group continues the
line ``P98:44,19,35=44+19+35|44*(35-19)|...`` ; sketches ``S98:44,19,35=44+19|35-19|...`` ; a sketch is expanded
from the prompt with the step quoted, as an answer that carries it out starts, in place of its ``=``:
``P98:44,19,35!(44+19)`` (the solution is a full expression; the tiny base's starts with the quoted step).
"""

from __future__ import annotations

import operator
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sesa_cli.config import ConfigError, TaskConfig, at_least, raise_if, subset_of
from sesa_cli.tasks import ragen, safe_arith
from sesa_cli.tasks.base import Score, check_split, draw_distinct, register_task
from sesa_cli.tasks.countdown_solver import TOLERANCE, Item, divide, find_solution, solution_keys
from sesa_cli.tasks.ragen import MAX_TEXT, RagenTask

SCORE = 1.0
"""RAGEN's ``score``: reward of a correct equation."""
FORMAT_SCORE = 0.1
"""RAGEN's ``format_score``: the numbers are used exactly once but the value is wrong (or does not evaluate)."""
INSTRUCTION = (
    "You are solving the Countdown puzzle. You should use the num list to create an equation that equals the "
    "target. Example answer format: <think> To find an equation using [3, 5, 2] to get 4. Let's check 2 + 5 = 7, "
    "7 - 3 = 4. So the answer is 2 + 5 - 3 = 4. </think><answer>2 + 5 - 3</answer>"
)
"""RAGEN's ``env_instruction`` for Countdown (config/envs.yaml), verbatim."""
WARM_POOL = 2000
"""The warm-start corpus draws its puzzles from this many train-split instances."""
_OP_WEIGHTS = (3, 3, 1, 1)
"""Warm start: how often an unskilled answer uses + - * / (mostly + and -, which RAGEN's puzzles need)."""
QUOTE = "!"
"""Compact solve prompt: ``!`` then the sketched step, in place of the plain prompt's ``=`` (``P98:4,5,3!(4+5)``)."""
LINE_SHARES = (0.2, 0.15, 0.65)
"""Warm start: the shares of P lists (answers), S lists (sketches) and sketch -> solution pairs among the corpus lines
(``CountdownTask.warm_start_corpus`` says why)."""
LED_ANSWERS = 0.25
"""Warm start: the share of the P lists' answers that start with a step in parentheses, ``(4+5)*3-2``."""
_LED = 10**6
"""Warm start: a number no puzzle holds (numbers are at most 999), standing in for the leading step of a drawn tree."""


@dataclass
class CountdownTaskConfig(TaskConfig):
    """Countdown: reach the target with the numbers, each used exactly once (RAGEN).

    RAGEN's data (HF ``Jiayi-Pan/Countdown-Tasks-3to4``) has 3-4 numbers of up to two digits and a target;
    RAGEN's notes do not record exact ranges, so chat style draws numbers from 1-99 and targets from 1-100. Compact
    style (the character-level tiny model) defaults to one-digit numbers: in its 600-step warm start the tiny model
    learns to copy one-digit numbers (about half its answers use them exactly once) but not two-digit ones (none).
    """

    min_numbers: int = 3
    """Fewest numbers in an instance."""
    max_numbers: int = 4
    """Most numbers in an instance (at most 5: solvability is checked by exhaustive search)."""
    min_number: int = 1
    """Smallest number."""
    max_number: int | None = None
    """Largest number (at most 999); null = 9 in compact style, 99 in chat style (RAGEN)."""
    min_target: int = 1
    """Smallest target."""
    max_target: int | None = None
    """Largest target; null = 30 in compact style, 100 in chat style (RAGEN)."""
    solvable_ops: str = "+-"
    """Operators the generator's solvability check may use. ``+-`` is RAGEN's filter (instances solvable with + and
    - alone); ``+-*/`` admits targets that need * or /. The policy may use all four either way."""
    format_penalty: float = 0.0
    """Reward of a completion with no readable answer (chat: no ``<think>...</think><answer>...</answer>`` or an
    empty answer; compact: no ``stop``). 0 keeps RAGEN's rewards 1 / 0.1 / 0 (correct / right numbers / neither); RAGEN's es_manager adds -0.1."""
    chat_max_words: int = 100
    """chat style: the length budget the prompt states (RAGEN's ``max_tokens: 100``); not a generation limit."""
    list_max: int = 16
    """Longest list of distinct answers (or sketches) in the warm-start corpus (should be >= sampler.group_size)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        chat = self.style == "chat"
        if self.max_number is None:
            self.max_number = 99 if chat else 9
        if self.max_target is None:
            self.max_target = 100 if chat else 30
        if self.format_penalty > 0:
            raise ConfigError(f"task.format_penalty={self.format_penalty} must be <= 0 (it is a penalty)")
        if not 2 <= self.min_numbers <= self.max_numbers <= 5:
            raise ConfigError(
                "task.min_numbers and task.max_numbers must satisfy 2 <= min_numbers <= max_numbers <= 5"
            )
        if not 1 <= self.min_number <= self.max_number <= 999:
            raise ConfigError("task.min_number and task.max_number must satisfy 1 <= min_number <= max_number <= 999")
        if not 1 <= self.min_target <= self.max_target:
            raise ConfigError("task.min_target and task.max_target must satisfy 1 <= min_target <= max_target")
        raise_if(subset_of(self, "task", "+-*/", "solvable_ops"))
        raise_if(at_least(self, "task", 1, "list_max", "chat_max_words"))


@dataclass(frozen=True)
class CountdownInstance:
    """One puzzle; ``solution`` is the generator's verified witness (uses every number once, equals the target)."""

    target: int
    nums: tuple[int, ...]
    solution: str


# -------------------------------------------------------------------------------------------------- reward
def uses_numbers(expr: str, nums: tuple[int, ...]) -> bool:
    """RAGEN's ``check_format``: the integers in ``expr`` (regex ``\\d+``) are exactly the multiset ``nums``."""
    found = re.findall(r"\d+", expr[:MAX_TEXT])
    if len(found) != len(nums) or any(len(tok) > 4000 for tok in found):  # int() refuses > 4300 digits
        return False
    try:
        return sorted(int(tok) for tok in found) == sorted(nums)
    except ValueError:
        return False


def ragen_reward(expr: str | None, nums: tuple[int, ...], target: int) -> float:
    """RAGEN's Countdown reward for one answer (1 / 0.1 / 0, see the module docstring); never raises."""
    if expr is None or not uses_numbers(expr, nums):
        return 0.0
    value = safe_arith.evaluate(expr)
    if value is None or abs(value - target) >= TOLERANCE:
        return FORMAT_SCORE
    return SCORE


# ------------------------------------------------------------------------------------------------------ the task
@register_task("countdown", CountdownTaskConfig)
class CountdownTask(RagenTask):
    cfg: CountdownTaskConfig
    chat_instruction = INSTRUCTION
    sketch_line = 200

    def alphabet(self) -> str:
        return "0123456789+-*/(),:=|PS" + QUOTE

    def vocabulary(self, corpus: Sequence[str]) -> list[str]:
        """The characters, and every step on two one-digit numbers of the puzzles in parentheses, ``(4+5)``, as one
        word (9 x 4 x 9 ordered steps by default). Everything else, the sketches included, is spelled by characters;
        a number of two or more digits has no words.

        Why: ``solve_prompt`` quotes the sketched step as this word and an answer that carries it out starts with it,
        so stage II's first token repeats the prompt's last one, which the warm start teaches; copying the step's
        characters from earlier in the context was learned late and unreliably by the 1M-parameter model (as for
        FrozenLake's plans, ``GridTask.vocabulary``). With a second word for the quoted step (``!4+5=`` -> ``(4+5)``,
        a bigram per step) the base put less mass on the step after 600 warm-start steps (0.18 against 0.28, same
        corpus): the repeat is one rule for every step, 324 bigrams are learned one by one (docs/samplers.md)."""
        return super().vocabulary(corpus) + [_in_parentheses(step) for step in self.word_steps()]

    def word_steps(self) -> list[str]:
        """Every step ``a op b`` on one-digit numbers of the puzzles (``task.min_number`` .. ``task.max_number``)."""
        assert self.cfg.max_number is not None  # resolved in __post_init__
        numbers = range(self.cfg.min_number, min(self.cfg.max_number, 9) + 1)
        return [f"{a}{op}{b}" for a in numbers for op in "+-*/" for b in numbers]

    def warm_start_key(self) -> dict[str, Any]:
        c = self.cfg
        return {
            "name": self.name,
            "numbers": [c.min_numbers, c.max_numbers, c.min_number, c.max_number],
            "targets": [c.min_target, c.max_target],
            "solvable_ops": c.solvable_ops,
            "list_max": c.list_max,
            "v": 2,
        }

    # ---------------------------------------------------------------- instances
    def instance(self, split: str, index: int) -> CountdownInstance:
        check_split(split)
        return self._generate(f"countdown/{split}/{self.seed}/{index}")

    def _generate(self, stream: str) -> CountdownInstance:
        c = self.cfg
        assert c.max_number is not None  # both resolved in __post_init__
        assert c.max_target is not None
        return _generate(
            stream,
            c.min_numbers,
            c.max_numbers,
            c.min_number,
            c.max_number,
            c.min_target,
            c.max_target,
            c.solvable_ops,
        )

    # ---------------------------------------------------------------- prompts and scoring
    def _compact(self, inst: CountdownInstance, head: str, end: str = "=") -> str:
        return f"{head}{inst.target}:{','.join(map(str, inst.nums))}{end}"

    def _state(self, inst: CountdownInstance) -> str:
        return f"Target: {inst.target}, nums: {list(inst.nums)}"

    def _chat(self, inst: CountdownInstance, hint: str = "") -> str:
        # RAGEN's header has no symbol legend and no action list for Countdown, so the turn follows the instruction.
        return self.chat_header() + ragen.turn_text(1, self._state(inst), 1, self.cfg.chat_max_words, hint=hint)

    def prompt(self, inst: CountdownInstance) -> str:
        return self._chat(inst) if self.chat else self._compact(inst, "P")

    def answer(self, completion: str) -> str | None:
        """The equation a completion proposes, or None if it has none. Never raises.

        chat: the one action of ``<think>...</think><answer>...</answer>`` (RAGEN reads the first of several and
        drops the rest; here an answer naming more than one is no answer, as an agent task's reply with text after
        its actions is invalid: sesa_cli.tasks.layouts); compact: the text before ``stop``, and None without a
        ``stop`` (cut at max_new_tokens, like RAGEN's missing ``</answer>``).
        """
        if self.chat:
            actions = ragen.answer_actions(completion)
            return actions[0] if actions and len(actions) == 1 else None
        return ragen.compact_answer(completion, self.stop)

    def score(self, inst: CountdownInstance, completion: str) -> Score:
        """RAGEN's reward (1 / 0.1 / 0, or format_penalty without an answer); success = reward 1; key = canonical
        equation (None if it does not parse)."""
        expr = self.answer(completion)
        if expr is None:
            return Score(self.cfg.format_penalty, False, None, penalty=self.cfg.format_penalty)
        reward = ragen_reward(expr, inst.nums, inst.target)
        return Score(reward=reward, success=reward == SCORE, key=safe_arith.canonical(expr))

    def target_keys(self, inst: CountdownInstance) -> frozenset[str] | None:
        """Keys of every correct equation: exhaustive over all trees for up to 4 numbers (~10 ms, cached); None
        for 5 (about 230k trees per puzzle)."""
        return solution_keys(inst.nums, inst.target) if len(inst.nums) <= 4 else None

    # ---------------------------------------------------------------- sketches: the first operation
    def sketch_followed(self) -> bool:
        """Compact style: the step words make stage II carry out its sketched step in 0.946 of the answers at the
        tiny base (seeds 0-4, docs/samplers.md); chat style is unmeasured."""
        return not self.chat

    def sketch_head(self, inst: CountdownInstance) -> str:
        if self.chat:
            request = (
                "Propose a first step: two numbers from the list combined by one operation, like 44 + 19, different "
                "from every step listed so far."
            )
            return ragen.sketch_request(self.chat_header(), self._state(inst), request)
        return self._compact(inst, "S")

    def sketch_step(self, inst: CountdownInstance, sketch: str) -> tuple[int, str, int] | None:
        """(a, op, b) if the sketch is one operation on two of the instance's numbers, else None. Never raises."""
        step = _one_step(self.sketch_content(sketch))
        if step is None:
            return None
        a, op, b = step
        pool = list(inst.nums)
        for n in (a, b):
            if n not in pool:
                return None
            pool.remove(n)
        return a, op, b

    def sketch_key(self, inst: CountdownInstance, sketch: str) -> str | None:
        """The step's canonical text (``19+44`` and ``44+19`` are one sketch)."""
        step = self.sketch_step(inst, sketch)
        return None if step is None else safe_arith.canonical("{}{}{}".format(*step))

    def sketch_response(self, inst: CountdownInstance, sketch: str) -> str | None:
        """compact: the sketched step in parentheses, ``(4+5)``, how an answer that carries it out starts (one token
        of the tiny model; ``(4+5)*3-2`` performs the step whatever follows it). chat: None (the answer follows
        free thinking)."""
        step = None if self.chat else self.sketch_step(inst, sketch)
        return None if step is None else _in_parentheses("{}{}{}".format(*step))

    def follows_sketch(self, inst: CountdownInstance, sketch: str, completion: str, score: Score) -> bool:
        """The answer's equation performs the sketched operation (:func:`safe_arith.has_step`)."""
        step = self.sketch_step(inst, sketch)
        expr = self.answer(completion) if step is not None else None
        node = safe_arith.parse(expr) if expr is not None else None
        return node is not None and step is not None and safe_arith.has_step(node, *step)

    def sketch_max_tokens(self) -> int:
        if self.chat:
            return self.cfg.max_new_tokens
        digits = len(str(self.cfg.max_number))
        return 2 * digits + 1 + len(self.stop)  # "a+b|"

    def solve_prompt(self, inst: CountdownInstance, sketch: str) -> str:
        """chat: the turn with ``First step: <sketch>`` under the state. compact: the plain prompt with ``!`` and the
        step in parentheses in place of its ``=``, ``P98:44,19,35!(44+19)``, one operation written plainly whatever
        the sketch's spacing or parentheses (any other sketch is quoted as it is). The plain prompt is no prefix of
        it, so the base never writes a quote where an answer belongs."""
        content = self.sketch_content(sketch)
        if self.chat:
            return self._chat(inst, hint=f"First step: {content}\n")
        step = _one_step(content)
        quoted = content if step is None else _in_parentheses("{}{}{}".format(*step))
        return self._compact(inst, "P", end=QUOTE + quoted)

    # ---------------------------------------------------------------- warm start
    def warm_start_corpus(self, rng: random.Random, n: int) -> list[str]:
        """Compact lines over WARM_POOL train-split instances (streams ``countdown/train/warm/<k>``, the same for
        every run seed, so one warm-started base serves them all). Answers are random well-formed equations (a random order
        of the numbers combined pairwise by random operators, mostly + and -), so the base hits the target a few percent
        of the time (tests/test_countdown.py measures the corpus rate). ``LINE_SHARES`` of the lines are

        * P lists: ``P...=`` + 1..list_max answers with distinct solution keys (single answers are lists of one), a
          share ``LED_ANSWERS`` of them starting with a step in parentheses, ``(4+5)*3-2`` (the word stage II starts
          with, so the plain policy writes it too);
        * S lists: ``S...=`` + 1..list_max distinct first steps (sequential sketches);
        * pairs: ``solve_prompt`` + an answer that starts with the quoted step, ``P98:4,5,3!(4+5)(4+5)*3-2|``.

        Pairs are 0.65 of the lines (0.37 of the tokens; P lists 0.42, S lists 0.21): the share of pairs buys stage
        II's repeat of the quoted step, that of the lists valid sketches and answers (1000 warm-start steps, sampling
        seed 0: pairs 0.7, S lists 0.1, stage II followed 0.93, valid sketches 0.945 at the worst chain position;
        pairs 0.5, S lists 0.15, 0.66 and 0.953; docs/samplers.md). Before, 0.15 of the lines were ``S...=step|P...=``
        + an answer with the step anywhere: the base followed 0.18 of its sketches, and after a first sketch often
        wrote the solve prompt as the next one (valid sketches 0.43 at chain position 2).
        """
        if self.chat:
            raise ConfigError(
                "the countdown warm-start corpus is compact-only; use task.style=compact with model=tiny"
            )
        out: list[str] = []
        for _ in range(n):
            inst = self._generate(f"countdown/train/warm/{rng.randrange(WARM_POOL)}")
            kind = rng.random()
            if kind < LINE_SHARES[0]:
                answers = _distinct(rng, inst.nums, rng.randint(1, self.cfg.list_max))
                out.append(self._compact(inst, "P") + "".join(a + self.stop for a in answers))
            elif kind < LINE_SHARES[0] + LINE_SHARES[1]:
                steps = _distinct_steps(rng, inst.nums, rng.randint(1, self.cfg.list_max))
                out.append(self._compact(inst, "S") + "".join(s + self.stop for s in steps))
            else:
                step, answer = _led_answer(rng, inst.nums)
                out.append(self.solve_prompt(inst, step + self.stop) + answer + self.stop)
        return out


@lru_cache(maxsize=8192)
def _generate(
    stream: str, min_numbers: int, max_numbers: int, lo: int, hi: int, min_target: int, max_target: int, ops: str
) -> CountdownInstance:
    """Rejection sampling like RAGEN's filtered data: draw numbers and a target, keep them if solvable."""
    rng = random.Random(stream)
    for _ in range(10_000):
        nums = tuple(rng.randint(lo, hi) for _ in range(rng.randint(min_numbers, max_numbers)))
        target = rng.randint(min_target, max_target)
        solution = find_solution(nums, target, ops)
        if solution is not None:
            return CountdownInstance(target=target, nums=nums, solution=solution)
    raise ConfigError(
        f"no solvable countdown instance in 10000 draws with numbers {lo}-{hi}, targets {min_target}-{max_target} "
        f"and solvable_ops={ops!r}; widen the ranges or add operators"
    )


# ------------------------------------------------------------------------------ unskilled answers for the warm start
def _random_step(rng: random.Random, a: int | Item, b: int | Item) -> Item:
    """a and b in random order combined by a random operator (never a division by zero)."""
    x = a if isinstance(a, tuple) else (a, a)
    y = b if isinstance(b, tuple) else (b, b)
    if rng.random() < 0.5:
        x, y = y, x
    op = rng.choices("+-*/", weights=_OP_WEIGHTS)[0]
    if op == "/" and y[0] == 0:
        x, y = y, x
        if y[0] == 0:
            op = "+"
    value = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": divide}[op](x[0], y[0])
    return value, ("sum" if op in "+-" else "prod", x[1], ((op, y[1]),))


def _random_tree(rng: random.Random, items: Sequence[int | Item]) -> safe_arith.Node:
    """Combine random pairs by random operators until one tree is left (each number used exactly once)."""
    pool: list[Item] = [i if isinstance(i, tuple) else (i, i) for i in items]
    while len(pool) > 1:
        i, j = rng.sample(range(len(pool)), 2)
        step = _random_step(rng, pool[i], pool[j])
        pool = [p for k, p in enumerate(pool) if k not in (i, j)] + [step]
    return pool[0][1]


def _led_answer(rng: random.Random, nums: tuple[int, ...]) -> tuple[str, str]:
    """(step, answer): a random first step on two of ``nums`` and a random equation over all of them that starts with
    it in parentheses, ``("4+5", "(4+5)*3-2")``: a random tree that renders with the step leftmost and unwrapped (or,
    after 20 that do not, about 0.6 ** 20 of the draws, the step plus a random tree of the rest)."""
    order = list(nums)
    rng.shuffle(order)
    first = _random_step(rng, order[0], order[1])
    step, led = safe_arith.render(first[1]), str(_LED)
    for _ in range(20):
        text = safe_arith.render(_random_tree(rng, [(first[0], _LED), *order[2:]]))
        if text.startswith(led):
            break
    else:
        text = safe_arith.render(("sum", _LED, (("+", _random_tree(rng, order[2:])),)))
    return step, _in_parentheses(step) + text[len(led) :]


def _distinct(rng: random.Random, nums: tuple[int, ...], k: int) -> list[str]:
    """Up to k random equations over ``nums`` with pairwise different solution keys, each starting with a step in
    parentheses with probability ``LED_ANSWERS`` (:func:`_led_answer`)."""

    def draw() -> str:
        if rng.random() < LED_ANSWERS:
            return _led_answer(rng, nums)[1]
        return safe_arith.render(_random_tree(rng, list(nums)))

    return draw_distinct(draw, safe_arith.canonical, k, tries=20)


def _distinct_steps(rng: random.Random, nums: tuple[int, ...], k: int) -> list[str]:
    """Up to k different first steps (two of the numbers and one operator)."""

    def step() -> str:
        i, j = rng.sample(range(len(nums)), 2)
        return safe_arith.render(_random_step(rng, nums[i], nums[j])[1])

    return draw_distinct(step, lambda text: text, k, tries=20)


def _one_step(text: str) -> tuple[int, str, int] | None:
    """(a, op, b) if ``text`` is one operation on two numbers (``4+5``, ``(4 + 5)``), else None. Never raises."""
    node = safe_arith.parse(text)
    if not (isinstance(node, tuple) and node[0] in ("sum", "prod") and isinstance(node[1], int)):
        return None
    if len(node[2]) != 1 or not isinstance(node[2][0][1], int):
        return None
    a, (op, b) = node[1], node[2][0]
    return a, op, b


def _in_parentheses(step: str) -> str:
    """``(4+5)``: how an answer that carries out the step ``4+5`` starts (a word of the tiny model)."""
    return f"({step})"
