"""Chain health: what the chains of a sequential sampler looked like, position by position (``chain/*``).

An item of a chain is a stage-I sketch (two-stage sampling) or a whole solution (``stage1=solution``); these are
statistics of what the sampler drew, not properties of the policy (docs/samplers.md). Pure and torch-free, as
sesa_cli.metrics, which hands them on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ChainHealth", "chain_health"]


@dataclass(frozen=True)
class ChainHealth:
    """What the chains of a sequential sampler looked like, per chain position (index k = the (k+1)-th item).

    An item is a stage-I sketch (two-stage sampling) or a whole solution (``stage1=solution``). These are statistics
    of what the sampler drew, not properties of the policy.
    """

    valid: list[float]
    """Share of chains whose item k is valid (a sketch the task accepts; a solution with a key)."""
    new: list[float]
    """Share of chains whose item k is valid and differs from every earlier item of its chain. Summed over the
    positions it is :attr:`distinct`."""
    cut: list[float]
    """Share of chains whose item k hit its length limit without its stop."""
    followed: list[float | None]
    """Two-stage: share of the stage-II solutions expanding item k that follow it, over those the task can judge;
    None where none was judged (or for solution chains)."""
    followed_all: float | None
    """Two-stage: share of all judged stage-II solutions that follow their sketch; None if none was judged."""
    distinct: float
    """Mean number of distinct valid items per chain."""
    chains: int
    """Number of chains."""
    sketches: bool = False
    """Whether the items are stage-I sketches (two-stage sampling, judged with ``followed``) rather than solutions."""

    def scalars(self) -> dict[str, float]:
        """``valid`` and ``cut`` over all items, ``valid_last`` at the last position, ``distinct`` per chain, and
        ``followed`` over all judged solutions (only when some were judged); NaN when there is no chain item."""
        if not self.valid:
            return {"valid": math.nan, "valid_last": math.nan, "distinct": math.nan, "cut": math.nan}
        out = {
            "valid": float(np.mean(self.valid)),
            "valid_last": self.valid[-1],
            "distinct": self.distinct,
            "cut": float(np.mean(self.cut)),
        }
        if self.followed_all is not None:
            out["followed"] = self.followed_all
        return out


def chain_health(
    keys: Sequence[Sequence[str | None]],
    cut: Sequence[Sequence[bool]],
    followed: Sequence[Sequence[Sequence[bool | None]]] | None = None,
) -> ChainHealth:
    """Per-position health of ``len(keys)`` chains of equal length G.

    Args:
        keys: ``keys[c][k]``, the key of item k of chain c; None = invalid.
        cut: ``cut[c][k]``, True if that item hit its length limit without its stop.
        followed: two-stage only: ``followed[c][k]``, one judgement per stage-II solution expanding item k (True =
            follows it, None = the task cannot tell).

    No chain, or chains of no item (an evaluation with fewer samples than a chain's first sketch), is a chain
    health of ``chains`` = 0 with no position and NaN scalars: defined, and saying there was nothing to measure.

    Raises:
        ValueError: if the chains differ in length, or ``cut``/``followed`` do not match ``keys`` in shape (how the
            sampler laid them out, not what the model wrote).
    """
    if not keys or not keys[0]:
        return ChainHealth([], [], [], [], None, math.nan, 0, sketches=followed is not None)
    g = len(keys[0])
    if any(len(chain) != g for chain in keys) or len(cut) != len(keys) or any(len(c) != g for c in cut):
        raise ValueError(f"every chain needs the same {g} items in keys and cut")
    if followed is not None and (len(followed) != len(keys) or any(len(f) != g for f in followed)):
        raise ValueError(f"followed needs one list of judgements per item of each of the {len(keys)} chains")
    n = len(keys)
    valid = np.zeros(g)
    new = np.zeros(g)
    for chain in keys:
        seen: set[str] = set()
        for k, key in enumerate(chain):
            if key is not None:
                valid[k] += 1
                if key not in seen:
                    new[k] += 1
                    seen.add(key)
    cuts = np.asarray(cut, dtype=np.float64).mean(axis=0)
    per_pos: list[float | None] = [None] * g
    hits, judged = 0, 0
    if followed is not None:
        for k in range(g):
            marks = [bool(f) for chain in followed for f in chain[k] if f is not None]
            if marks:
                per_pos[k] = sum(marks) / len(marks)
                hits, judged = hits + sum(marks), judged + len(marks)
    return ChainHealth(
        valid=(valid / n).tolist(),
        new=(new / n).tolist(),
        cut=cuts.tolist(),
        followed=per_pos,
        followed_all=hits / judged if judged else None,
        distinct=float(new.sum() / n),
        chains=n,
        sketches=followed is not None,
    )
