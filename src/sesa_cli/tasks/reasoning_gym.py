"""reasoning-gym as a task source: ``task=reasoning_gym task.dataset=NAME`` (any of its procedural datasets).

Instances come from the dataset's own generator (``reasoning_gym.create_dataset(NAME, size=, seed=, **options)``)
and are scored by its own ``score_answer`` (a reward in [0, 1]; success = 1). Chat style only, in RAGEN's format
(sesa_cli.tasks.ragen): the question as the state, the answer is the content of ``<answer>...</answer>``, which is
also where reasoning-gym's own prompts put it. The character-level tiny model has no vocabulary for open text, so
``model=tiny`` is refused; use an instruction-tuned model (``model=smollm2-135m``).

Splits: reasoning-gym draws entry ``i`` of a dataset with seed ``s`` from ``Random(s + i)``, so the training entries
use seeds ``s .. s+size-1`` and the validation entries ``s+size ..``: the two never share an entry. Model output is
untrusted: a parse failure or any exception in a dataset's scorer scores 0, never raises.
"""

from __future__ import annotations

import importlib.util
import random
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from sesa_cli.config import ConfigError, TaskConfig
from sesa_cli.tasks import ragen
from sesa_cli.tasks.base import Score, check_split, register_task
from sesa_cli.tasks.ragen import RagenTask

INSTRUCTION = "You are solving reasoning puzzles. " + ragen.ANSWER_ONLY


@dataclass
class ReasoningGymTaskConfig(TaskConfig):
    """A reasoning-gym dataset, generated and scored by reasoning-gym itself (``pip install 'sesa[reasoning-gym]'``)."""

    dataset: str = "basic_arithmetic"
    """reasoning-gym dataset name (``reasoning_gym.factory.DATASETS``), e.g. ``basic_arithmetic``, ``leg_counting``,
    ``word_sorting``."""
    size: int = 1000
    """Training entries; instance indices wrap around. Validation entries are as many, on disjoint seeds."""
    dataset_seed: int | None = None
    """Seed of the dataset's generator; null = the run's ``seed``."""
    options: dict[str, Any] = field(default_factory=dict)
    """The dataset's own config fields (passed to ``create_dataset``), e.g. ``+task.options.min_digits=2``
    (``+``: the dataset's keys are not in this schema, so each one is added)."""
    chat_max_words: int = 200
    """The length budget the prompt states (RAGEN's ``max_tokens``); not a generation limit."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.size < 1:
            raise ConfigError(f"task.size={self.size} must be >= 1")
        if self.style != "chat":
            raise ConfigError(
                "task=reasoning_gym is chat-only (open text has no tiny-model vocabulary): choose an instruction-tuned "
                "model, e.g. model=smollm2-135m"
            )


@register_task("reasoning_gym", ReasoningGymTaskConfig)
class ReasoningGymTask(RagenTask):
    cfg: ReasoningGymTaskConfig
    chat_instruction = INSTRUCTION

    def __init__(self, cfg: TaskConfig, seed: int = 0) -> None:
        super().__init__(cfg, seed)
        if importlib.util.find_spec("reasoning_gym") is None:
            raise ConfigError("task=reasoning_gym needs reasoning-gym: pip install 'sesa[reasoning-gym]'")
        from reasoning_gym.factory import DATASETS

        if self.cfg.dataset not in DATASETS:
            raise ConfigError(
                f"task.dataset={self.cfg.dataset!r} is not a reasoning-gym dataset ({len(DATASETS)} are)"
            )
        self.splits  # noqa: B018  (build both now: a bad task.options is a ConfigError before any model work)

    @cached_property
    def splits(self) -> dict[str, Any]:
        import reasoning_gym

        base = self.seed if self.cfg.dataset_seed is None else self.cfg.dataset_seed
        size = self.cfg.size
        try:
            splits: dict[str, Any] = {split: reasoning_gym.create_dataset(self.cfg.dataset, size=size, seed=base + offset,
                                                        **self.cfg.options)
                    for split, offset in (("train", 0), ("val", size))}  # fmt: skip
            return splits
        except Exception as exc:  # noqa: BLE001  (the dataset's own config checks: asserts, TypeErrors, ...)
            raise ConfigError(f"task.options for {self.cfg.dataset}: {exc or type(exc).__name__}") from None

    def alphabet(self) -> str:
        raise ConfigError("task=reasoning_gym has no compact alphabet: use an instruction-tuned model")

    def warm_start_corpus(self, rng: random.Random, n: int) -> list[str]:
        raise ConfigError("task=reasoning_gym has no warm-start corpus: use an instruction-tuned model")

    def instance(self, split: str, index: int) -> dict[str, Any]:
        check_split(split)
        entry: dict[str, Any] = self.splits[split][index % self.cfg.size]
        return entry

    def prompt(self, inst: dict[str, Any]) -> str:
        return self.chat_header() + ragen.turn_text(1, inst["question"], 1, self.cfg.chat_max_words)

    def answer(self, completion: str) -> str | None:
        """The content of ``<answer>...</answer>`` in RAGEN's format, stripped; None if malformed. Never raises."""
        parsed = ragen.think_answer(completion)
        return None if parsed is None else (parsed[1].strip() or None)

    def score(self, inst: dict[str, Any], completion: str) -> Score:
        """The dataset's ``score_answer``; key = the answer (whitespace collapsed), the gold answer's when correct."""
        text = self.answer(completion)
        if text is None:
            return Score(reward=0.0, success=False, key=None)
        dataset = self.splits["train"]
        try:
            reward = float(dataset.score_answer(text, inst))
        except Exception:  # noqa: BLE001  (a dataset's scorer on untrusted text: any failure is a wrong answer)
            reward = 0.0
        if not 0.0 <= reward <= 1.0:  # also NaN
            reward = 0.0
        ok = reward == 1.0
        key = " ".join(str(inst["answer"] if ok else text).split())
        return Score(reward=reward, success=ok, key=key)
