"""The number formats of a report; its intervals are :mod:`sesa_cli.intervals`' (re-exported here)."""

from __future__ import annotations

import math

from sesa_cli.intervals import (
    BOOTSTRAP_SEED,
    CURVE_RESAMPLES,
    LEVEL,
    METHOD,
    RESAMPLES,
    bootstrap_interval,
    difference_interval,
    is_missing,
    mean_interval,
)

__all__ = [
    "BOOTSTRAP_SEED",
    "CURVE_RESAMPLES",
    "LEVEL",
    "METHOD",
    "RESAMPLES",
    "bootstrap_interval",
    "decimals_for",
    "difference_interval",
    "format_interval",
    "format_value",
    "mean_interval",
]


# ------------------------------------------------------------------------------------------------ formatting
def decimals_for(*values: float, significant: int = 3) -> int:
    """Decimals that give the largest finite |value| ``significant`` digits (0-6): 0.5 → 3, 12.3 → 1, 1e-4 → 6."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    if not finite:
        return 0 if all(v == 0 for v in values if v is not None and math.isfinite(v)) else 3
    magnitude = math.floor(math.log10(max(finite)))
    return int(min(6, max(0, significant - 1 - magnitude)))


def format_value(value: float, decimals: int | None = None) -> str:
    """A number that reads: 3 significant digits by default (``0.0001`` for 1e-4, not ``0.000``; ``12.9``;
    ``1,234``), or ``decimals`` fixed decimals; ``–`` for NaN."""
    if is_missing(value) or not math.isfinite(value):
        return "–"
    if value == 0:
        return "0"
    if decimals is not None:
        text = f"{value:.{decimals}f}"
        return text[1:] if text.startswith("-") and float(text) == 0 else text
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if value != 0 and abs(value) < 1e-4:
        return f"{value:.2e}"
    return f"{value:.3g}"


def format_interval(mean: float, low: float, high: float, sign: bool = False) -> str:
    """``0.512 [0.41, 0.63]``: the mean with 3 significant digits and the bounds at the same decimals; the mean
    alone when there is no interval (one seed). ``sign``: a leading ``+`` on positive means (differences)."""
    if is_missing(mean):
        return "–"
    decimals = decimals_for(mean, low, high)
    text = format_value(mean, decimals)
    if sign and mean > 0 and text.strip("0.") != "":
        text = "+" + text
    if is_missing(low) or is_missing(high):
        return text
    return f"{text} [{format_value(low, decimals)}, {format_value(high, decimals)}]"
