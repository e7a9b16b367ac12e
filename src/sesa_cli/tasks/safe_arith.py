"""Exact, safe arithmetic over untrusted text: a small recursive-descent parser, never ``eval``.

Model output is untrusted input. Countdown answers are scored by this module instead of Python's
``eval``, which RAGEN uses (``eval(expr, {"__builtins__": None}, {})`` can still be escaped through attribute
access). Grammar, with spaces and tabs allowed between tokens::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/") unary)*
    unary  := ("+" | "-") unary | atom
    atom   := NUMBER | "(" expr ")"
    NUMBER := ASCII digits; no leading zero unless every digit is 0 (Python rejects "05" too)

The value is what Python's ``eval`` would give on the same text, computed exactly with ``fractions.Fraction``
(Python's ``/`` is float division; here 1/3 stays 1/3). Anything outside the grammar (names, attributes, calls,
``**``, decimals, unicode digits, ``;``) is invalid, as are inputs over the limits below and division by zero: every
function returns ``None`` for them and never raises.

Trees are plain tuples, flat so that long chains like ``1+1+...+1`` do not deepen the recursion:

* ``int``                                    a number
* ``("neg", node)`` / ``("pos", node)``      unary minus / plus
* ``("sum", first, ((op, node), ...))``      ``first op node op node ...`` with op in "+-", left to right
* ``("prod", first, ((op, node), ...))``     the same with op in "*/"
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

MAX_CHARS = 1000
"""Longest accepted input (characters)."""
MAX_DEPTH = 64
"""Deepest nesting of parentheses and unary signs."""
MAX_DIGITS = 30
"""Longest number literal. Countdown numbers have 1-3 digits; longer literals can never match them."""
MAX_BITS = 4096
"""Largest numerator + denominator size of any intermediate value, in bits."""

Node = int | tuple[Any, ...]
"""A parsed expression (see the module docstring)."""


class _Invalid(Exception):
    """Internal: the text is outside the grammar or over a limit."""


# ------------------------------------------------------------------------------------------------------ parsing
def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t":
            i += 1
        elif "0" <= ch <= "9":  # ASCII only: str.isdigit() would accept "٣" and "²"
            j = i
            while j < n and "0" <= text[j] <= "9":
                j += 1
            digits = text[i:j]
            if j - i > MAX_DIGITS or (len(digits) > 1 and digits[0] == "0" and digits.strip("0")):
                raise _Invalid
            tokens.append(digits)
            i = j
        elif ch in "+-*/()":
            if ch in "*/" and tokens and tokens[-1] == ch:  # "**" (power) and "//" (floor division) are not ours
                raise _Invalid
            tokens.append(ch)
            i += 1
        else:
            raise _Invalid
    return tokens


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise _Invalid
        self.pos += 1
        return tok

    def chain(self, kind: str, ops: str, operand: Any) -> Node:
        first = operand()
        rest = []
        while (tok := self.peek()) is not None and tok in ops:
            self.pos += 1
            rest.append((tok, operand()))
        return (kind, first, tuple(rest)) if rest else first

    def expr(self) -> Node:
        return self.chain("sum", "+-", self.term)

    def term(self) -> Node:
        return self.chain("prod", "*/", self.unary)

    def unary(self) -> Node:
        tok = self.peek()
        if tok in ("+", "-"):
            self.pos += 1
            self.enter()
            child = self.unary()
            self.depth -= 1
            return ("neg" if tok == "-" else "pos", child)
        return self.atom()

    def atom(self) -> Node:
        tok = self.take()
        if tok == "(":
            self.enter()
            node = self.expr()
            self.depth -= 1
            if self.take() != ")":
                raise _Invalid
            return node
        if tok[0].isdigit():
            return int(tok)
        raise _Invalid

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Invalid


def parse(text: str) -> Node | None:
    """The expression tree of ``text``, or None if it is not a valid expression. Never raises."""
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        return None
    try:
        parser = _Parser(_tokenize(text))
        node = parser.expr()
        if parser.pos != len(parser.tokens):
            return None
        return node
    except _Invalid:
        return None


# --------------------------------------------------------------------------------------------------- evaluation
def _check(value: Fraction) -> Fraction:
    if value.numerator.bit_length() + value.denominator.bit_length() > MAX_BITS:
        raise _Invalid
    return value


def _value(node: Node) -> Fraction:
    if isinstance(node, int):
        return Fraction(node)
    kind = node[0]
    if kind == "neg":
        return -_value(node[1])
    if kind == "pos":
        return _value(node[1])
    acc = _value(node[1])
    for op, child in node[2]:
        rhs = _value(child)
        if op == "+":
            acc = acc + rhs
        elif op == "-":
            acc = acc - rhs
        elif op == "*":
            acc = acc * rhs
        else:
            if rhs == 0:
                raise _Invalid
            acc = acc / rhs
        acc = _check(acc)
    return acc


def value_of(node: Node) -> Fraction | None:
    """Exact value of a tree; None on division by zero or an oversized intermediate. Never raises."""
    try:
        return _value(node)
    except _Invalid:
        return None


def evaluate(expr: str) -> Fraction | None:
    """Exact value of ``expr``, or None if it is invalid (see the module docstring). Never raises, never runs code."""
    node = parse(expr)
    return None if node is None else value_of(node)


def numbers(node: Node) -> list[int]:
    """The number literals of a tree, left to right."""
    out: list[int] = []
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, int):
            out.append(cur)
        elif cur[0] in ("neg", "pos"):
            stack.append(cur[1])
        else:
            stack.extend(child for _, child in reversed(cur[2]))
            stack.append(cur[1])
    return out


# ------------------------------------------------------------------------------------------------------- steps
def _groups(node: Node, out: list[tuple[str, list[tuple[int, Node]]]]) -> None:
    """Every maximal sum and product of ``node`` with its flattened operands: sums as (sign, operand) with unary
    signs folded in, products as (+1 multiplied / -1 divided, operand)."""

    def flat(cur: Node, kind: str, sign: int, into: list[tuple[int, Node]]) -> None:
        if isinstance(cur, tuple) and cur[0] in ("neg", "pos") and kind == "sum":
            flat(cur[1], kind, -sign if cur[0] == "neg" else sign, into)
        elif isinstance(cur, tuple) and cur[0] == kind:
            flat(cur[1], kind, sign, into)
            for op, child in cur[2]:
                flat(child, kind, -sign if op in "-/" else sign, into)
        else:
            into.append((sign, cur))

    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, int):
            continue
        if cur[0] in ("neg", "pos"):
            stack.append(cur[1])
            continue
        operands: list[tuple[int, Node]] = []
        flat(cur, cur[0], 1, operands)
        out.append((cur[0], operands))
        stack.extend(child for _, child in operands)


def has_step(node: Node, a: int, op: str, b: int) -> bool:
    """Whether the tree computes ``a op b`` on the number literals a and b as one operation, up to associativity
    and commutativity: one flattened sum holds a and b with equal signs (op ``+``) or opposite signs (``-``), or one
    flattened product multiplies both (``*``) or multiplies a and divides by b (``/``). So ``3+4+5`` has the step
    ``4+5`` and ``x-(4-5)`` the step ``4-5``, but ``3*4+5`` does not have ``4+5``."""
    kind = "sum" if op in "+-" else "prod"
    same = op in "+*"
    groups: list[tuple[str, list[tuple[int, Node]]]] = []
    _groups(node, groups)
    for group_kind, operands in groups:
        if group_kind != kind:
            continue
        literals = [(sign, value) for sign, value in operands if isinstance(value, int)]
        for i, (sa, va) in enumerate(literals):
            for j, (sb, vb) in enumerate(literals):
                if i != j and va == a and vb == b and (sa == sb) == same:
                    return True
    return False


# ------------------------------------------------------------------------------------------------ canonical form
def _sum_terms(node: Node, sign: int, out: list[tuple[int, str]]) -> None:
    """Flatten nested sums and unary signs into signed terms (sign, canonical body of a non-sum)."""
    if isinstance(node, tuple) and node[0] == "neg":
        _sum_terms(node[1], -sign, out)
    elif isinstance(node, tuple) and node[0] == "pos":
        _sum_terms(node[1], sign, out)
    elif isinstance(node, tuple) and node[0] == "sum":
        _sum_terms(node[1], sign, out)
        for op, child in node[2]:
            _sum_terms(child, sign if op == "+" else -sign, out)
    else:
        s, body = _canonical(node)
        out.append((sign * s, body))


def _render_sum(terms: list[tuple[int, str]]) -> str:
    pos = sorted(b for s, b in terms if s > 0)
    neg = sorted(b for s, b in terms if s < 0)
    return "+".join(pos) + "".join("-" + b for b in neg)


def _prod_factors(node: Node, exp: int, out: list[tuple[int, str]]) -> int:
    """Flatten nested products into factors (exponent +1/-1, body); returns the sign pulled out of them."""
    if isinstance(node, tuple) and node[0] in ("neg", "pos"):
        sign = _prod_factors(node[1], exp, out)
        return -sign if node[0] == "neg" else sign
    if isinstance(node, tuple) and node[0] == "prod":
        sign = _prod_factors(node[1], exp, out)
        for op, child in node[2]:
            sign *= _prod_factors(child, exp if op == "*" else -exp, out)
        return sign
    if isinstance(node, tuple) and node[0] == "sum":
        terms: list[tuple[int, str]] = []
        _sum_terms(node, 1, terms)
        # Orient the sum so that (a-b)*c and -(b-a)*c agree: most positive terms first, then the smaller text.
        flipped = [(-s, b) for s, b in terms]
        here = (-sum(s > 0 for s, _ in terms), _render_sum(terms))
        there = (-sum(s > 0 for s, _ in flipped), _render_sum(flipped))
        out.append((exp, "(" + min(here, there)[1] + ")"))
        return 1 if here <= there else -1
    sign, body = _canonical(node)
    out.append((exp, body))
    return sign


def _canonical(node: Node) -> tuple[int, str]:
    """(sign, body): the value of ``node`` is sign * value(body)."""
    if isinstance(node, int):
        return 1, str(node)
    if node[0] == "prod":
        factors: list[tuple[int, str]] = []
        sign = _prod_factors(node, 1, factors)
        num = sorted(b for e, b in factors if e > 0) or ["1"]
        den = sorted(b for e, b in factors if e < 0)
        return sign, "*".join(num) + "".join("/" + b for b in den)
    terms: list[tuple[int, str]] = []
    _sum_terms(node, 1, terms)
    if len(terms) == 1:
        return terms[0]
    return 1, _render_sum(terms)


def canonical_node(node: Node) -> str:
    """Canonical text of a tree (see :func:`canonical`)."""
    sign, body = _canonical(node)
    return body if sign > 0 else "-" + body


def canonical(expr: str) -> str | None:
    """A canonical text of ``expr``: two expressions get the same text iff they are equal up to

    * commutativity and associativity of + and * (``3+4*5`` = ``5*4+3``, ``(a+b)+c`` = ``a+(b+c)``),
    * writing - and / as adding a negated and multiplying by an inverted operand (``a-(b-c)`` = ``a+c-b``,
      ``a/(b/c)`` = ``a*c/b``), and moving unary signs out of products (``(a-b)*c`` = ``-(b-a)*c``),
    * redundant parentheses and spaces.

    Distributivity is not applied: ``(a+b)*c`` and ``a*c+b*c`` are different solutions. The canonical text is
    itself a valid expression with the same value. None if ``expr`` does not parse. Never raises.
    """
    node = parse(expr)
    return None if node is None else canonical_node(node)


# ------------------------------------------------------------------------------------------------------ rendering
def render(node: Node) -> str:
    """Text of a tree with only the parentheses Python's precedence needs (no spaces)."""
    if isinstance(node, int):
        return str(node)
    kind = node[0]
    if kind in ("neg", "pos"):
        child = node[1]
        inner = render(child)
        if isinstance(child, tuple) and child[0] in ("sum", "prod"):
            inner = "(" + inner + ")"
        return ("-" if kind == "neg" else "+") + inner
    parts = [_render_operand(node[1], kind, None)]
    for op, child in node[2]:
        parts.append(op + _render_operand(child, kind, op))
    return "".join(parts)


def _render_operand(child: Node, parent: str, op: str | None) -> str:
    text = render(child)
    if not isinstance(child, tuple):
        return text
    kind = child[0]
    needs = (
        (parent == "prod" and kind == "sum")
        or (parent == "sum" and op == "-" and kind == "sum")
        or (parent == "prod" and op == "/" and kind == "prod")
        or (op is not None and kind in ("neg", "pos"))  # "2--3" is valid Python, but "2-(-3)" reads better
    )
    return "(" + text + ")" if needs else text
