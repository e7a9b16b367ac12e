"""``algo.terms.found``: pull the plain-prompt policy toward every solution the off-policy rows found (docs/samplers.md,
"The path task: the found-solutions term").

Per plain prompt of the batch, the mean over the distinct solutions that off-policy rows (those scored in a context
other than the one that drew them: the sequential sampler's chain items and stage-II solutions) were drawn with, with
success, of -log pi(y | x): remembered across steps and kept in checkpoints, one completion each. Its gradient is
that of the cross-entropy to the uniform distribution over the found set: it lifts the found solutions the
plain-prompt policy holds least and pulls mass off everything outside the set, where GRPO's push on each row follows
how often the sampler drew it (self-imitation of the rewarded answers, Oh et al. 2018, each distinct answer once). It
reads rewards only, never a task's hidden answers; with parallel sampling no row is off-policy and the term is 0
unless ``rows=all``. Logged as ``loss/found_nll`` and ``loss/found_solutions`` (the solutions it covers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sesa_cli.config import ConfigError
from sesa_cli.metric_keys import MetricKey
from sesa_cli.rollout.rollouts import Rollout
from sesa_cli.terms.base import Term, TermContext, TermRows, TermSettings, register_term

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class FoundSettings(TermSettings):
    """``algo.terms.found``: ``coef``, the weight of the term (0.2 on the path task with ``model=tiny``,
    conf/task_model/train/path_tiny.yaml), and ``rows``."""

    rows: str = "off_policy"
    """Which rows' successful solutions the term remembers: ``off_policy`` (the chain's; with parallel sampling
    none) or ``all`` (every row: the term on a parallel sampler's own draws, the ablation that tells the term's share
    of a sequential result from the sampler's)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rows not in ("off_policy", "all"):
            raise ConfigError(f"rows={self.rows!r} is not valid; choose one of: off_policy, all")


class FoundSolutions:
    """The term's memory: per plain prompt, one completion of every distinct solution a remembered row was drawn
    with, with success (``Score.success``), keyed by its solution key; the first one drawn is kept. Nothing of the
    task's hidden answers is read: a solution is in it only once some sampled row was rewarded for it."""

    def __init__(self) -> None:
        self.by_prompt: dict[tuple[int, ...], dict[str, tuple[list[int], list[bool] | None]]] = {}

    def add(self, rows: Sequence[Rollout], gather: Callable[[list[Any]], list[Any]]) -> None:
        """Remember the successful rows' solutions; ``gather`` (every data-parallel replica's, in rank order) makes
        every replica hold the whole batch's, so each computes the same term."""
        mine = [
            (tuple(r.prompt_ids), r.score.key, list(r.completion.ids), r.completion.mask)
            for r in rows
            if r.score.success and r.score.key is not None
        ]
        for prompt, key, ids, mask in gather(mine):
            self.by_prompt.setdefault(prompt, {}).setdefault(key, (ids, mask))

    def rows(
        self, prompts: Iterable[tuple[int, ...]]
    ) -> tuple[list[list[int]], list[list[int]], list[list[bool] | None]]:
        """(contexts, completions, masks) of every found solution of ``prompts`` (each prompt once)."""
        contexts: list[list[int]] = []
        completions: list[list[int]] = []
        masks: list[list[bool] | None] = []
        for prompt in dict.fromkeys(prompts):
            for ids, mask in self.by_prompt.get(prompt, {}).values():
                contexts.append(list(prompt))
                completions.append(ids)
                masks.append(mask)
        return contexts, completions, masks

    def state_dict(self) -> list[list[Any]]:
        """JSON-ready: [prompt ids, key, completion ids, mask] per found solution."""
        return [[list(p), k, ids, mask] for p, found in self.by_prompt.items() for k, (ids, mask) in found.items()]

    def load_state_dict(self, state: Sequence[Sequence[Any]]) -> None:
        self.by_prompt = {}
        for prompt, key, ids, mask in state:
            self.by_prompt.setdefault(tuple(prompt), {})[key] = (list(ids), mask)


@register_term("found")
class Found(Term):
    """Pulls the plain-prompt policy toward every solution the off-policy rows were drawn with, with success,
    remembered across steps: the mean over the found solutions of the batch's plain prompts (every replica's) of
    -log pi(y | x), each completion's log-probs summed over its masked tokens; every mini-batch scores them all;
    ``loss/found_nll``, ``loss/found_solutions``."""

    Settings = FoundSettings
    metrics = (
        MetricKey(
            "loss/found_nll",
            "algo.terms.found: mean -log pi(y | x) over the distinct solutions off-policy rows were drawn with, with "
            "success, for the batch's plain prompts (one remembered completion each).",
            better="",
        ),
        MetricKey(
            "loss/found_solutions",
            "algo.terms.found: how many found solutions (of the batch's plain prompts) the found_nll term covers.",
            better="",
        ),
    )

    def __init__(self, settings: FoundSettings, context: TermContext) -> None:
        super().__init__(settings, context)
        self.every = settings.rows == "all"
        self.memory = FoundSolutions()

    def observe(self, rows: Sequence[Rollout], off_policy: Sequence[bool]) -> None:
        self.memory.add([r for r, off in zip(rows, off_policy, strict=True) if off or self.every], self.context.gather)

    def rows(self, rows: Sequence[Rollout]) -> TermRows | None:
        prompts = self.context.gather([tuple(r.prompt_ids) for r in rows if r.score.key is not None])
        contexts, completions, masks = self.memory.rows(prompts)
        if not contexts:
            return None
        return TermRows(contexts, completions, masks, stats={"found_solutions": float(len(contexts))})

    def loss(self, logps: Tensor, response_mask: Tensor) -> tuple[Tensor, dict[str, float]]:
        nll = -(logps * response_mask).sum(1).mean()
        return nll, {"found_nll": float(nll.detach())}

    def state_dict(self) -> list[list[Any]]:
        return self.memory.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.memory.load_state_dict(state)
