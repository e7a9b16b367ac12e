"""task=reasoning_gym: entries from reasoning-gym's own generators, scored by its own score_answer; model output is
untrusted (a wrong answer scores 0, a malformed one too, and nothing raises)."""

from __future__ import annotations

import pytest

from sesa_cli.tasks.base import make_task
from sesa_cli.tasks.reasoning_gym import ReasoningGymTaskConfig


def _task(dataset: str, **kw):
    return make_task(ReasoningGymTaskConfig(name="reasoning_gym", style="chat", dataset=dataset, size=5, **kw), seed=1)


def _reply(answer: str) -> str:
    return f"let me think</think><answer>{answer}</answer>"


@pytest.mark.parametrize("dataset", ["basic_arithmetic", "leg_counting", "word_sorting"])
def test_entries_are_generated_and_scored_by_reasoning_gym(dataset):
    task = _task(dataset)
    for index in range(3):
        inst = task.instance("train", index)
        assert inst["question"] in task.prompt(inst)
        assert task.prompt(inst).endswith("<think>")
        right = task.score(inst, _reply(str(inst["answer"])))
        assert (right.reward, right.success) == (1.0, True)
        wrong = task.score(inst, _reply("definitely not it 12345"))
        assert not wrong.success
        assert wrong.reward < 1.0  # some scorers give partial credit (basic_arithmetic: by how close the number is)
        for malformed in ("", "<answer>no think close", "</think><answer>unclosed", "\x00" * 50, None, 17):
            score = task.score(inst, malformed)  # type: ignore[arg-type]
            assert (score.reward, score.success, score.key) == (0.0, False, None)


def test_splits_never_share_an_entry_and_follow_the_seed():
    task = _task("basic_arithmetic")
    train = [task.instance("train", i)["question"] for i in range(5)]
    val = [task.instance("val", i)["question"] for i in range(5)]
    assert train == [_task("basic_arithmetic").instance("train", i)["question"] for i in range(5)]
    assert task.instance("train", 5)["question"] == train[0]  # indices wrap at task.size
    assert train != val


def test_bad_settings_are_config_errors():
    from sesa_cli.config import ConfigError

    with pytest.raises(ConfigError, match="is not a reasoning-gym dataset"):
        _task("no_such_dataset")
    with pytest.raises(ConfigError, match="chat-only"):
        ReasoningGymTaskConfig(name="reasoning_gym", style="compact")
