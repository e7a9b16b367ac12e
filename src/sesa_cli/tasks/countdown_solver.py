"""Countdown's exhaustive solver: every value the numbers of a puzzle can make, each used exactly once.

Exact arithmetic (``int`` and ``Fraction``) over expression trees of :mod:`sesa_cli.tasks.safe_arith`, so a found
solution renders to text the evaluator gives the same value. Used by the generator (is an instance solvable, with
which operators) and by coverage@k (the keys of every correct equation).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from functools import lru_cache

from sesa_cli.tasks import safe_arith

TOLERANCE = Fraction(1, 100_000)
"""RAGEN's ``abs(result - target) < 1e-5`` (here on exact values)."""

Value = int | Fraction
"""An exact value; integral values are kept as ``int`` (several times faster than Fraction in the search)."""
Item = tuple[Value, safe_arith.Node]


def divide(x: Value, y: Value) -> Value:
    """x / y exactly, as an ``int`` when integral (y != 0)."""
    if type(x) is int and type(y) is int:
        q, r = divmod(x, y)
        return q if r == 0 else Fraction(x, y)
    v = Fraction(x) / y
    return v.numerator if v.denominator == 1 else v


def combine(a: Item, b: Item, ops: str) -> Iterator[Item]:
    """Every value (with its tree) one operator makes from a and b, in both orders where it matters."""
    (va, na), (vb, nb) = a, b
    if "+" in ops:
        yield va + vb, ("sum", na, (("+", nb),))
    if "-" in ops:
        yield va - vb, ("sum", na, (("-", nb),))
        yield vb - va, ("sum", nb, (("-", na),))
    if "*" in ops:
        yield va * vb, ("prod", na, (("*", nb),))
    if "/" in ops:
        if vb:
            yield divide(va, vb), ("prod", na, (("/", nb),))
        if va:
            yield divide(vb, va), ("prod", nb, (("/", na),))


def expressions(nums: tuple[int, ...], ops: str = "+-*/") -> Iterator[Item]:
    """Every expression tree that uses each number exactly once (all shapes, orders and operators), with its value."""

    def rec(items: list[Item]) -> Iterator[Item]:
        if len(items) == 1:
            yield items[0]
            return
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                rest = items[:i] + items[i + 1 : j] + items[j + 1 :]
                for item in combine(items[i], items[j], ops):
                    yield from rec([*rest, item])

    yield from rec([(n, n) for n in nums])


def reachable(nums: tuple[int, ...], ops: str = "+-*/") -> dict[Value, safe_arith.Node]:
    """Every value an expression using each of ``nums`` exactly once can take, with one witness tree per value.

    Dynamic programming over subsets: the values of a subset come from splitting it into two non-empty parts and
    combining one value of each part with one operator. Exhaustive over trees, orders and operators.
    """
    n = len(nums)
    reach: list[dict[Value, safe_arith.Node]] = [{} for _ in range(1 << n)]
    for i, num in enumerate(nums):
        reach[1 << i][num] = num
    for mask in range(1, 1 << n):
        if mask & (mask - 1) == 0:
            continue
        table = reach[mask]
        low = mask & -mask  # the part holding the lowest element: each unordered split once
        part = (mask - 1) & mask
        while part:
            if part & low:
                rest = mask ^ part
                for a in reach[part].items():
                    for b in reach[rest].items():
                        for value, node in combine(a, b, ops):
                            table.setdefault(value, node)
            part = (part - 1) & mask
    return reach[(1 << n) - 1]


def find_solution(nums: tuple[int, ...], target: int, ops: str = "+-*/") -> str | None:
    """An expression over ``nums`` (each exactly once) equal to ``target``, or None if there is none."""
    node = reachable(nums, ops).get(target)
    return None if node is None else safe_arith.render(node)


@lru_cache(maxsize=4096)
def solution_keys(nums: tuple[int, ...], target: int) -> frozenset[str]:
    """Canonical keys of every correct equation (RAGEN's tolerance, any of + - * /)."""
    return frozenset(
        safe_arith.canonical_node(node) for value, node in expressions(nums) if -TOLERANCE < value - target < TOLERANCE
    )
