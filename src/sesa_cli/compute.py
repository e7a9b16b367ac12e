"""What a run spends, on record: tokens, FLOPs and wall seconds by phase (run.json's ``compute``).

Methods are compared at equal compute, not only at equal rollout budget: SESA's two-stage draw runs 1.35-1.42x the
matrix products of GRPO's parallel one per step (docs/measurements.md, "Where a step's time goes"), LTE's hinted rows
carry longer contexts. So every run counts, by *phase*:

* ``sample``: the training batch's draws (prefill of the prompts, the decode steps, the teacher-forced feedback of an
  episode and the contexts of stage II, a refilling filter's extra rounds);
* ``update``: the learner's scoring passes (old log-probs, the KL reference, the mini-batch forwards, a loss term's
  own rows) and their backward;
* ``policy``: the exact-policy snapshots of ``train.policy_every``;
* ``eval``: evaluations (i.i.d. draws, greedy answers, exact walks at evaluation time);
* ``checkpoint``: writing checkpoints (seconds only);

the wall seconds spent in it, the token positions run through the decoder (``forward_tokens``: rows x new tokens of
each forward, padding included, since it is computed), their FLOPs (``forward_flops``), the positions and FLOPs of the
forwards run with gradient (``backward_tokens``, ``backward_flops``: backward counted as 2x the forward FLOPs of
every forward whose output needs a gradient, the usual rule; recomputation under gradient checkpointing is not
counted, and a LoRA backward, which skips the frozen weights' gradients, costs less than the rule says) and the
tokens the policy sampled (``sampled_tokens``). A run's training cost is ``train_flops`` = sample forward + update
forward + update backward: evaluations and exact-policy measurement are left out, being the same for every method
and no part of what a method spends to learn.

FLOPs are counted analytically from the model's shapes (:class:`ModelShape`), not with ``torch.utils.flop_counter``
(which costs too much per op on a 1M-parameter model): a few integer products per forward, at the few call sites that
run the model (``Session._forward`` and the scoring passes of sesa_cli.rollout.scoring). They go to the phase open
at the time (:meth:`ComputeLedger.phase`); a forward outside any phase is not counted.

Torch-free at import: the report reads run.json's block through :func:`run_cost`.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any

from sesa_cli.config import ConfigError

__all__ = [
    "PHASES",
    "TRAIN_PHASES",
    "ComputeLedger",
    "ModelShape",
    "PhaseCost",
    "check_block",
    "count_forward",
    "count_sampled",
    "model_shape",
    "run_cost",
]

PHASES = ("sample", "update", "policy", "eval", "checkpoint")
"""The phases sesa's trainer and commands open, in the order a step meets them (module docstring)."""
TRAIN_PHASES = ("sample", "update")
"""The phases whose FLOPs make ``train_flops``: what a method spends to learn."""


@dataclass(frozen=True)
class ModelShape:
    """What a forward of a decoder costs, from its shapes (:func:`model_shape`).

    A forward of ``rows`` rows of ``new`` tokens on ``past`` cached positions (holes of right-padded chunks included:
    attention runs over them, masked) costs, in FLOPs (a multiply-add is 2)::

        2 * rows * new * linear                        every nn.Linear of the decoder (LoRA's A and B included)
      + 4 * attention * rows * new * (past + new)      Q K^T and A V at the dense shapes SDPA runs
      + 2 * head_rows * head                           the vocabulary head, at the positions whose logits are taken

    Elementwise work (norms, RoPE, softmax, SiLU) and the embedding lookup are not counted: at the tiny model's
    width they are a few percent of the products, and they are what the products are compared without elsewhere
    (docs/measurements.md)."""

    linear: int
    """Sum of in_features * out_features over every nn.Linear of the decoder (the head excluded)."""
    attention: int
    """layers * heads * head_dim: the width of Q (and of the values) summed over the layers."""
    head: int
    """hidden * vocab of the output embedding."""

    def forward_flops(self, rows: int, new: int, past: int, head_rows: int) -> int:
        """FLOPs of one forward (class docstring)."""
        return rows * new * (2 * self.linear + 4 * self.attention * (past + new)) + 2 * head_rows * self.head


_SHAPES: weakref.WeakKeyDictionary[Any, ModelShape] = weakref.WeakKeyDictionary()


def model_shape(model: Any) -> ModelShape:
    """The :class:`ModelShape` of a causal ``transformers`` model (a peft-wrapped one too): its decoder's nn.Linear
    layers, its config's layers x heads x head_dim, and its output embedding. A model whose config lacks the
    attention sizes counts no attention.

    Measured once per model object (a walk over its modules takes 45-65 us on ``model=tiny``, a scoring pass asks
    twice): sesa changes no model's layers after it is first run (LoRA adapters are added when it is loaded)."""
    shape = _SHAPES.get(model)
    if shape is None:
        shape = _SHAPES[model] = _measured(model)
    return shape


def _measured(model: Any) -> ModelShape:
    import torch

    decoder = model.get_decoder()
    linear = sum(m.in_features * m.out_features for m in decoder.modules() if isinstance(m, torch.nn.Linear))
    cfg = model.config
    layers, heads = getattr(cfg, "num_hidden_layers", 0) or 0, getattr(cfg, "num_attention_heads", 0) or 0
    head_dim = getattr(cfg, "head_dim", None) or (getattr(cfg, "hidden_size", 0) // heads if heads else 0)
    vocab, hidden = model.get_output_embeddings().weight.shape
    return ModelShape(int(linear), int(layers * heads * head_dim), int(vocab * hidden))


@dataclass(slots=True)
class PhaseCost:
    """What one phase spent (module docstring); counts are per process."""

    seconds: float = 0.0
    """Wall seconds inside the phase, a phase opened inside it excluded."""
    forward_tokens: int = 0
    """Token positions run through the decoder (rows x new tokens of each forward, padding included)."""
    forward_flops: int = 0
    """FLOPs of those forwards (:class:`ModelShape`)."""
    backward_tokens: int = 0
    """The positions of the forwards whose output needs a gradient: what a backward ran on."""
    backward_flops: int = 0
    """2x the forward FLOPs of those forwards."""
    sampled_tokens: int = 0
    """Tokens the policy sampled (each logical row's draws; teacher-forced feedback, stops and prompts excluded)."""


_current: PhaseCost | None = None
"""Where the call sites' counts go: the innermost phase open (:meth:`ComputeLedger.phase`); None = not counted."""


def count_forward(shape: ModelShape, rows: int, new: int, past: int, head_rows: int, grad: bool = False) -> None:
    """Count one forward in the open phase: ``rows`` x ``new`` tokens through the decoder on ``past`` cached
    positions, the head at ``head_rows`` positions; ``grad``: its output needs a gradient (a backward follows).
    A few integer products: the tiny model's decode forward takes ~2.5 ms."""
    phase = _current
    if phase is None:
        return
    tokens = rows * new
    flops = shape.forward_flops(rows, new, past, head_rows)
    phase.forward_tokens += tokens
    phase.forward_flops += flops
    if grad:
        phase.backward_tokens += tokens
        phase.backward_flops += 2 * flops


def count_sampled(tokens: int) -> None:
    """Count ``tokens`` sampled tokens in the open phase."""
    phase = _current
    if phase is not None:
        phase.sampled_tokens += tokens


class ComputeLedger:
    """One run's (or one command's) compute by phase: the trainer owns one, checkpoints carry its counts
    (:meth:`state_dict`), and run.json records :meth:`block` when the run ends."""

    def __init__(self, processes: int = 1) -> None:
        """``processes``: the data-parallel processes of the run; each counts its own share, and run.json holds rank
        0's ledger with this number (:func:`run_cost` scales by it)."""
        self.phases: dict[str, PhaseCost] = {}
        self.from_step = 0
        """The training step the counts start at: 0, or the step of a checkpoint written before runs counted their
        compute (a resumed or revived run then counts its own steps only)."""
        self.processes = processes
        self._open: list[tuple[PhaseCost, float]] = []  # (phase, when its current stretch began), innermost last

    def cost(self, name: str) -> PhaseCost:
        """The counts of phase ``name`` (zero if it never ran)."""
        return self.phases.get(name) or PhaseCost()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[PhaseCost]:
        """Count what runs inside in phase ``name``. Phases nest: the inner one gets the counts and the seconds of
        its stretch, the outer one the rest (a phase's seconds exclude the phases opened inside it)."""
        global _current
        cost = self.phases.setdefault(name, PhaseCost())
        now = time.perf_counter()
        if self._open:
            outer, began = self._open[-1]
            outer.seconds += now - began
        self._open.append((cost, now))
        previous, _current = _current, cost
        try:
            yield cost
        finally:
            _current = previous
            _, began = self._open.pop()
            now = time.perf_counter()
            cost.seconds += now - began
            if self._open:
                self._open[-1] = (self._open[-1][0], now)

    # ------------------------------------------------------------------ totals
    @property
    def sampled_tokens(self) -> int:
        """Tokens the policy sampled in training draws (phase ``sample``)."""
        return self.cost("sample").sampled_tokens

    @property
    def scored_tokens(self) -> int:
        """Token positions the update ran forward and backward (phase ``update``'s ``backward_tokens``)."""
        return self.cost("update").backward_tokens

    @property
    def train_flops(self) -> int:
        """The method's training cost: sample and update forwards, update backward (module docstring)."""
        return sum(self.cost(p).forward_flops + self.cost(p).backward_flops for p in TRAIN_PHASES)

    def block(self) -> dict[str, Any]:
        """run.json's ``compute`` (docs/usage.md, "Run directory"): every phase that ran, then the run's totals."""
        return {
            "phases": {name: asdict(cost) for name, cost in self.phases.items()},
            "sampled_tokens": self.sampled_tokens,
            "scored_tokens": self.scored_tokens,
            "train_flops": self.train_flops,
            "from_step": self.from_step,
            "processes": self.processes,
        }

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The counts a checkpoint carries (trainer_state.json ``compute``), so a resumed run's tokens and FLOPs
        equal an uninterrupted run's (its seconds are its own: they differ)."""
        return {"phases": {name: asdict(cost) for name, cost in self.phases.items()}, "from_step": self.from_step}

    def load_state_dict(self, state: dict[str, Any], where: str = "trainer_state.json") -> None:
        """Continue from :meth:`state_dict`'s counts (a ConfigError naming ``where`` when they are damaged)."""
        check_block(state, where, totals=False)
        self.phases = {name: PhaseCost(**{k: values[k] for k in _FIELDS}) for name, values in state["phases"].items()}
        self.from_step = int(state["from_step"])


_FIELDS = tuple(f.name for f in fields(PhaseCost))
_TOTALS = ("sampled_tokens", "scored_tokens", "train_flops", "from_step", "processes")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_block(block: Any, where: str, totals: bool = True) -> dict[str, Any]:
    """``block`` if it is a compute block (:meth:`ComputeLedger.block`; with ``totals=False`` a checkpoint's
    :meth:`ComputeLedger.state_dict`): every phase an object of non-negative counts and seconds, every total a
    non-negative integer; else a one-line ConfigError naming ``where`` and the value. Keys it does not know are
    allowed (a later sesa may record more)."""
    if not isinstance(block, dict) or not isinstance(block.get("phases"), dict):
        raise ConfigError(f"{where}: 'compute' is not an object with 'phases'")
    for name, cost in block["phases"].items():
        if not isinstance(cost, dict):
            raise ConfigError(f"{where}: compute phase {name!r} is not an object")
        for key in _FIELDS:
            value = cost.get(key)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
            if not (ok if key == "seconds" else _count(value)):
                raise ConfigError(f"{where}: compute phase {name!r}: {key!r} is {value!r}, not a non-negative number")
    for key in _TOTALS if totals else ("from_step",):
        if not _count(block.get(key)):
            raise ConfigError(f"{where}: compute {key!r} is {block.get(key)!r}, not a non-negative integer")
    return block


def run_cost(info: dict[str, Any]) -> dict[str, float] | None:
    """A run's cost from its run.json ``info`` (as :func:`sesa_cli.runs.read_run_info` returns it, which checked the
    block), for reports that show each group's cost relative to its baseline; None for a run written before runs
    recorded their compute (no ``compute`` key).

    Keys: ``train_flops`` (sample forward + update forward and backward: what the method spent to learn),
    ``sampled_tokens`` (tokens the policy sampled in training draws), ``scored_tokens`` (positions the update ran
    forward and backward), ``train_seconds`` (wall seconds of sampling and update), and for every phase recorded
    ``<phase>_flops`` (forward + backward) and ``<phase>_seconds``; ``from_step`` (0 = the counts cover the run from
    its start; else the step of a pre-compute checkpoint it resumed or revived from, whose earlier steps are not
    counted). Counts are scaled by the run's data-parallel ``processes`` (rank 0's counts times the processes, each
    of which runs an equal share of the batch: exact for one process); seconds are wall time, not scaled. A revived
    run's counts include its parent's up to the checkpoint it continued, as its metrics do."""
    block = info.get("compute")
    if block is None:
        return None
    block = check_block(block, "run.json")
    scale = block["processes"] or 1
    phases = block["phases"]
    out: dict[str, float] = {
        "train_flops": float(block["train_flops"] * scale),
        "sampled_tokens": float(block["sampled_tokens"] * scale),
        "scored_tokens": float(block["scored_tokens"] * scale),
        "train_seconds": float(sum(phases[p]["seconds"] for p in TRAIN_PHASES if p in phases)),
        "from_step": float(block["from_step"]),
    }
    for name, cost in phases.items():
        out[f"{name}_flops"] = float((cost["forward_flops"] + cost["backward_flops"]) * scale)
        out[f"{name}_seconds"] = float(cost["seconds"])
    return out
