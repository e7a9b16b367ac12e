"""``algo.terms.follow``: keep stage II carrying out its sketches (two-stage sampling, ``sampler=sequential``).

Under the plain-prompt loss nothing trains the solve prompts, and the tiny model's base forgot them: on FrozenLake
tiny, stage II followed 0.99 of its sketches at the base and 0.3 after 25 steps (docs/samplers.md, "Samplers and
losses"). The term is a supervised one, -log pi(t | solve prompt) of every stage-II solution row
(:class:`~sesa_cli.rollout.rollouts.Expansion`), t the first token of the text that carries out its sketch: the
task's ``Task.sketch_response`` (the plan's first turn, the sketched region), or where the task does not fix that
text, the row's own first token when it followed its sketch. It is trained on every such row, not only on those that
followed, so a run whose stage II stopped following is pulled back (on followed rows only, one seed in six went to 0
and stayed there). Each mini-batch scores the rows of its own solution rows; logged as ``loss/follow_nll``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sesa_cli.metric_keys import MetricKey
from sesa_cli.rollout.rollouts import Expansion, Rollout, Sketch
from sesa_cli.terms.base import Term, TermRows, TermSettings, register_term

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class FollowSettings(TermSettings):
    """``algo.terms.follow``: ``coef``, the weight of the term (0.1 in the tiny agent recipes,
    conf/task_model/train/agent_tiny.yaml)."""


@register_term("follow")
class Follow(Term):
    """Keeps stage II carrying out its sketches (two-stage sampling): -log pi(t | solve prompt) of every stage-II
    solution row with a target token t (the first token of the text that carries out its sketch, :meth:`target`),
    averaged over a mini-batch's rows; ``loss/follow_nll``."""

    Settings = FollowSettings
    metrics = (
        MetricKey(
            "loss/follow_nll",
            "algo.terms.follow: mean -log pi(t | solve prompt) over the stage-II solution rows, t the first token of "
            "the text that carries out the row's sketch (the supervised term that keeps stage II following its "
            "sketches).",
            better="",
        ),
    )

    def target(self, row: Rollout, sketch: Sketch, first: dict[int, int | None]) -> int | None:
        """The follow target of a stage-II solution row: the first token of ``Task.sketch_response`` of its sketch
        (computed once per sketch, kept in ``first``), else its own first token when it followed its sketch."""
        if id(sketch) not in first:
            response = self.context.task.sketch_response(row.inst, sketch.text)
            ids = self.context.encode(response) if response is not None else []
            first[id(sketch)] = ids[0] if ids else None
        target = first[id(sketch)]
        followed = isinstance(row.origin, Expansion) and row.origin.followed
        if target is None and followed and row.completion.ids:  # the task does not fix the text: a follower's own
            target = row.completion.ids[0]
        return target

    def rows(self, rows: Sequence[Rollout]) -> TermRows | None:
        contexts: list[list[int]] = []
        targets: list[list[int]] = []
        owners: list[int] = []
        first: dict[int, int | None] = {}
        for i, row in enumerate(rows):
            if not isinstance(row.origin, Expansion):
                continue
            target = self.target(row, row.origin.sketch, first)
            if target is not None:
                contexts.append(row.context_ids)
                targets.append([target])
                owners.append(i)
        return TermRows(contexts, targets, owners=owners) if owners else None

    def loss(self, logps: Tensor, response_mask: Tensor) -> tuple[Tensor, dict[str, float]]:
        nll = -logps[:, 0].mean()
        return nll, {"follow_nll": float(nll.detach())}
