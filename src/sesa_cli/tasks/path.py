"""Path Exploration: the paper's synthetic task (SESA, arXiv 2510.15502, section 3), rebuilt with a made-up world.

A fixed hierarchy region -> city -> district (names invented from syllables, seeded by ``world_seed``). The policy
names one root-to-leaf path ``region/city/district``; the reward is 1 iff that path is one of U hidden target
leaves (chosen by ``target_seed``). The warm start teaches the hierarchy (lists of distinct valid paths, lists of
regions, region -> path pairs), never the targets, so a base sample hits a target about U / leaves of the time.

Compact layout (``stop`` = "|"):  prompt ``P:`` ; answer ``kanu/tebo/rila|`` ; a sequential group is one line
``P:kanu/tebo/rila|mosa/pel/vido|...`` ; sketches are the first hop ``S:kanu|mosa|...`` and a sketch is expanded from
the hinted prompt ``Pkanu:`` into a whole path ``kanu/tebo/rila|``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sesa_cli.config import ConfigError, TaskConfig, at_least, raise_if
from sesa_cli.tasks.base import Score, Task, register_task

_ONSETS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_LAYOUT = "/|:PS"
"""The compact layout's characters: separators, the stop, the prompt marks."""


@dataclass
class PathTaskConfig(TaskConfig):
    """The SESA paper's synthetic Path Exploration task (its section 3), rebuilt with made-up names.

    With the defaults 8 x 8 x 8 = 512 leaves and 20 targets, a uniform valid path hits a target 20/512 = 3.9% of
    the time: the "few percent" of the paper's weak base models.
    """

    regions: int = 8
    """Number of top-level regions."""
    cities: int = 8
    """Cities per region."""
    districts: int = 8
    """Districts per city."""
    num_targets: int = 20
    """U, the number of hidden target leaves."""
    world_seed: int = 0
    """Seed of the hierarchy's names (fixed: the warm start learns this world)."""
    target_seed: int = 0
    """Seed that picks the target leaves (conf: ``${seed}``); never seen by the warm start."""
    list_max: int = 12
    """Length of every list of distinct paths in the warm-start corpus (>= sampler.group_size, so the base never
    learns to end a list before a chain of G solutions does)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if min(self.regions, self.cities, self.districts) < 1:
            raise ConfigError("task.regions, task.cities and task.districts must be >= 1")
        raise_if(at_least(self, "task", 1, "list_max"))
        leaves = self.regions * self.cities * self.districts
        if not 1 <= self.num_targets <= leaves:
            raise ConfigError(f"task.num_targets={self.num_targets} must be between 1 and the {leaves} leaves")


def _names(rng: random.Random, count: int) -> list[str]:
    """``count`` distinct pronounceable names of 2-3 syllables."""
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        name = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.choice((2, 2, 3))))
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


@register_task("path", PathTaskConfig)
class PathTask(Task):
    stop = "|"
    between = ""
    eval_instances = 1  # one prompt, as in the paper: every instance is the same question
    cfg: PathTaskConfig

    # ---------------------------------------------------------------- the world
    @cached_property
    def tree(self) -> dict[str, dict[str, list[str]]]:
        """region -> city -> districts; sibling names are distinct, names repeat across branches."""
        rng = random.Random(f"path-world-{self.cfg.world_seed}")
        return {
            region: {city: _names(rng, self.cfg.districts) for city in _names(rng, self.cfg.cities)}
            for region in _names(rng, self.cfg.regions)
        }

    @cached_property
    def leaves(self) -> list[str]:
        return [f"{r}/{c}/{d}" for r, cities in self.tree.items() for c, ds in cities.items() for d in ds]

    @cached_property
    def targets(self) -> frozenset[str]:
        rng = random.Random(f"path-targets-{self.cfg.world_seed}-{self.cfg.target_seed}")
        return frozenset(rng.sample(self.leaves, self.cfg.num_targets))

    def alphabet(self) -> str:
        return _ONSETS + _VOWELS + _LAYOUT

    def vocabulary(self, corpus: Sequence[str]) -> list[str]:
        """Every name of the world, the layout's characters (no letters) and each region's hinted prompt
        (``Pkanu:``, the solve prompt of a sketch: its path then starts with the token that follows it, a bigram
        the base learns at once, where copying the region from an earlier token was learned late). The world is
        closed, so every text the task writes is spelled by them, and an answer in one way only (a name has two or
        three syllables, so none is two others run together; no answer holds a hinted prompt): the exact policy of
        a path is that of its one spelling."""
        names = {
            name
            for region, cities in self.tree.items()
            for name in (region, *cities, *(d for ds in cities.values() for d in ds))
        }
        hints = [self.hinted_prompt(region) for region in self.tree]
        return sorted(set(_LAYOUT)) + sorted(names) + hints

    def warm_start_key(self) -> dict[str, Any]:
        c = self.cfg
        return {
            "name": self.name,
            "shape": [c.regions, c.cities, c.districts],
            "world": c.world_seed,
            "list_max": c.list_max,
            "v": 3,
        }

    # ---------------------------------------------------------------- instances
    def instance(self, split: str, index: int) -> Any:
        # One prompt, as in the paper: "name a path". Every instance is the same question.
        return None

    def prompt(self, inst: Any) -> str:
        return "P:"

    def target_keys(self, inst: Any) -> frozenset[str]:
        return self.targets

    def solution_space(self, inst: Any) -> list[str]:
        """Every leaf as an answer, ``region/city/district|`` (512 with the defaults)."""
        return [leaf + self.stop for leaf in self.leaves]

    def parse(self, completion: str) -> str | None:
        """The named path if the completion is a leaf of the world and then the stop, nothing else (the answers
        ``solution_space`` lists, whose exact probabilities ``policy/*`` sums: no answer the exact metrics leave out
        can be correct); else None. Never raises."""
        if not isinstance(completion, str):
            return None
        text, found, tail = completion.partition(self.stop)
        if not found or tail:
            return None
        parts = text.split("/")
        if len(parts) != 3:
            return None
        region, city, district = parts
        if district in self.tree.get(region, {}).get(city, ()):
            return text
        return None

    def score(self, inst: Any, completion: str) -> Score:
        key = self.parse(completion)
        hit = key is not None and key in self.targets
        return Score(reward=1.0 if hit else 0.0, success=hit, key=key)

    # ---------------------------------------------------------------- sketches: the first hop
    def sketch_head(self, inst: Any) -> str:
        return "S:"

    def solve_prompt(self, inst: Any, sketch: str) -> str:
        return self.hinted_prompt("".join(ch for ch in self.sketch_content(sketch) if ch in _ONSETS + _VOWELS))

    def hinted_prompt(self, region: str) -> str:
        """The prompt that asks for a path in ``region``: ``Pkanu:`` (with the word vocabulary one token for a
        region of the world, so the path's first hop follows it as a bigram; see ``vocabulary``)."""
        return f"P{region}:"

    def sketch_followed(self) -> bool:
        return True  # at the base, 8x8x8 world: 95-97% of stage-II paths start with the sketched region

    def sketch_max_tokens(self) -> int:
        return max(len(region) for region in self.tree) + len(self.stop)

    def sketch_key(self, inst: Any, sketch: str) -> str | None:
        """The region a sketch names, if it is one of the world's."""
        region = self.sketch_content(sketch).strip()
        return region if region in self.tree else None

    def sketch_response(self, inst: Any, sketch: str) -> str | None:
        """The sketched region and its separator: a path's first hop."""
        region = self.sketch_key(inst, sketch)
        return None if region is None else region + "/"

    def follows_sketch(self, inst: Any, sketch: str, completion: str, score: Score) -> bool:
        """The solution's first hop is the sketched region (it starts with ``sketch_response``)."""
        response = self.sketch_response(inst, sketch)
        return response is not None and isinstance(completion, str) and completion.startswith(response)

    # ---------------------------------------------------------------- warm start
    def warm_start_corpus(self, rng: random.Random, n: int) -> list[str]:
        """Three kinds of lines, all uniform over the world (the targets are never favoured):

        * 40%: lists of ``list_max`` distinct valid paths ``P:a|b|c|...`` (a single answer is a list's first item);
        * 20%: lists of every region in a random order ``S:r1|r2|...`` (sequential sketches);
        * 40%: sketch -> solution pairs ``Pr:r/c/d|``.

        Lists end the way the sampler's chains do: a chain of G items is cut by the sampler, never ended
        by the model, so no list ends before ``list_max`` (>= G) items, or before the regions run out; with lists of
        1..list_max items the base learned to end a list early with BOS (the separator of packed lines), which
        sampling must then mask. The pairs are 40% of the lines (about a tenth of the tokens): with 15%, stage II
        followed its sketch in a third of the solutions at the base; with 40%, in over 95% (8x8x8 world, seeds 0-1).
        """
        regions = list(self.tree)
        paths = min(self.cfg.list_max, len(self.leaves))
        out: list[str] = []
        for _ in range(n):
            u = rng.random()
            if u < 0.4:
                out.append("P:" + "".join(p + self.stop for p in rng.sample(self.leaves, paths)))
            elif u < 0.6:
                out.append("S:" + "".join(r + self.stop for r in rng.sample(regions, len(regions))))
            else:
                leaf = rng.choice(self.leaves)
                out.append(self.solve_prompt(None, leaf.split("/")[0]) + leaf + self.stop)
        return out
