"""algo.terms.found: the supervised term toward every distinct solution the sampler has drawn with success.

The memory (sesa_cli.terms.found.FoundSolutions) is checked on hand-built rollouts; the term's effect on a hand-set
softmax policy and on the tiny path model (one update of the trainer) is checked against what it is meant to do:
lift the found solutions the policy holds least, never anything outside the found set.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
import torch

from sesa_cli.config import ConfigError
from sesa_cli.rollout.rollouts import Completion, Rollout
from sesa_cli.rollout.scoring import build_batch, completion_logps
from sesa_cli.runs import RunDir
from sesa_cli.tasks.base import Score
from sesa_cli.terms import term_settings
from sesa_cli.terms.found import Found, FoundSolutions
from sesa_cli.trainer import Trainer


def _rollout(
    prompt: list[int], ids: list[int], key: str | None, success: bool, context: list[int] | None = None
) -> Rollout:
    """A rollout of ``prompt`` drawn in ``context`` (default: the prompt itself, an on-policy row)."""
    comp = Completion(ids, [0.0] * len(ids), [0.0] * len(ids), True)
    return Rollout(0, None, prompt, context or prompt, comp, "", Score(float(success), success, key))


def _own(items):
    return items


def test_the_memory_keeps_the_first_completion_of_each_successful_solution_per_prompt():
    found = FoundSolutions()
    found.add(
        [
            _rollout([1, 2], [5, 6], "a", True),
            _rollout([1, 2], [5, 7], "a", True),  # the same solution again: the first completion stays
            _rollout([1, 2], [8], "b", False),  # not rewarded
            _rollout([1, 2], [9], None, True),  # no solution key
            _rollout([3], [4], "a", True),  # another prompt's solution "a"
        ],
        _own,
    )
    assert found.rows([(1, 2)]) == ([[1, 2]], [[5, 6]], [None])
    contexts, completions, _ = found.rows([(3,), (1, 2), (3,)])  # each prompt once, in the order asked
    assert (contexts, completions) == ([[3], [1, 2]], [[4], [5, 6]])
    assert found.rows([(7,)]) == ([], [], [])
    again = FoundSolutions()
    again.load_state_dict(json.loads(json.dumps(found.state_dict())))
    assert again.by_prompt == found.by_prompt


def test_replicas_remember_the_whole_batch():
    """Under data parallelism every replica adds what every replica drew (gather), so each computes the same term."""
    shard_a = [_rollout([1], [2], "a", True)]
    shard_b = [_rollout([1], [3], "b", True)]
    replicas = [FoundSolutions(), FoundSolutions()]
    for replica in replicas:
        replica.add(
            shard_a if replica is replicas[0] else shard_b, lambda _mine: [*_gathered(shard_a), *_gathered(shard_b)]
        )
    assert replicas[0].by_prompt == replicas[1].by_prompt
    assert set(replicas[0].by_prompt[(1,)]) == {"a", "b"}


def _gathered(rows):
    return [(tuple(r.prompt_ids), r.score.key, list(r.completion.ids), r.completion.mask) for r in rows]


def _one_step(p: list[float], found: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(p after one gradient step on the mean of -log p over ``found``, the logits' gradient) of a softmax policy."""
    logits = torch.log(torch.tensor(p)).requires_grad_()
    loss = -torch.log_softmax(logits, 0)[found].mean()
    loss.backward()
    assert logits.grad is not None
    with torch.no_grad():
        return torch.softmax(logits - 0.5 * logits.grad, 0), logits.grad


def test_the_term_lifts_the_found_solution_held_least_and_takes_mass_off_the_dominant_one():
    """p = (0.7, 0.1, 0.05, 0.15), solutions 0-2 found: one step moves mass off the dominant solution onto the found
    ones it held least, the least-held one gaining most; the unfound one (3) gains less than those (its logit
    falls; the softmax renormalises). With a dominant solution above 1/|found| the found set's total can fall at
    first: the term trades dominance for evenness, GRPO's push on the rewarded rows brings the total up."""
    p = torch.tensor([0.7, 0.1, 0.05, 0.15])
    after, grad = _one_step(p.tolist(), [0, 1, 2])
    gain = after / p
    assert float(after[0]) < 0.7
    assert float(gain[2]) > float(gain[1]) > float(gain[3])
    assert float(grad[3]) > 0


def test_the_term_moves_mass_from_outside_the_found_set_into_it():
    """p = (0.2, 0.1, 0.05, 0.65), solutions 0-2 found (none above 1/3): every found one gains, the unfound one
    loses, and the least-held found one gains most."""
    p = torch.tensor([0.2, 0.1, 0.05, 0.65])
    after, _ = _one_step(p.tolist(), [0, 1, 2])
    gain = after / p
    assert float(gain[2]) > float(gain[1]) > float(gain[0]) > 1.0 > float(gain[3])


def test_a_trainer_update_adds_the_term_and_raises_every_found_path(path_setup, tmp_path):
    """The tiny path base, two paths found (drawn with success by off-policy rows of a hand-built batch; a third
    target drawn on-policy is not remembered), one update with the term alone (every advantage zero): both found
    paths gain log-prob under the plain prompt (one Adam step, whose first
    step is sign-like: at lr 1e-6 it is a first-order move, far above float drift); loss/found_nll and
    loss/found_solutions are logged; the memory survives a checkpoint."""
    cfg, task, policy = path_setup
    cfg = replace(cfg, algo=replace(cfg.algo, terms={"found": 1.0}), optim=replace(cfg.optim, lr=1e-6, warmup_steps=0))
    trainer = Trainer(cfg, task, copy.deepcopy(policy), RunDir(tmp_path / "run"))
    prompt = trainer.sampler.encode_prompt(task.prompt(None))
    targets = sorted(task.targets)[:3]
    ids = [trainer.policy.encode(t + task.stop) for t in targets]
    batch = build_batch([prompt] * 2, ids[:2], int(trainer.policy.tokenizer.pad_token_id))
    solve = trainer.policy.encode_prompt(task.solve_prompt(None, targets[0].split("/")[0]))

    def held() -> torch.Tensor:
        with torch.no_grad():
            logps, _ = completion_logps(trainer.model, batch, cfg.sampler.temperature)
        return (logps * batch.response_mask).sum(1)

    before = held()
    rows = [_rollout(prompt, i, t, True, solve) for i, t in zip(ids[:2], targets[:2], strict=True)]
    rows += [_rollout(prompt, ids[2], targets[2], True), _rollout(prompt, ids[1], None, False, solve)]
    inputs = trainer.learner.inputs([rows])
    inputs.advantages = torch.zeros_like(inputs.advantages)
    stats = trainer.learner.update(inputs)
    (found,) = trainer.learner.terms
    assert isinstance(found, Found)
    assert set(found.memory.by_prompt[tuple(prompt)]) == set(targets[:2])
    gained = held() - before
    assert stats["loss/found_solutions"] == 2
    assert stats["loss/found_nll"] > 0
    assert bool((gained > 1e-5).all()), gained
    trainer.step = 1
    ckpt = trainer.save_checkpoint()
    resumed = Trainer(cfg, task, copy.deepcopy(policy), RunDir(tmp_path / "run2"))
    resumed.load_checkpoint(ckpt)
    (again,) = resumed.learner.terms
    assert isinstance(again, Found)
    assert again.memory.by_prompt == found.memory.by_prompt
    assert json.dumps(again.state_dict()) == json.dumps(found.state_dict())  # bit for bit, in the same order


def test_the_terms_settings_are_checked():
    with pytest.raises(ConfigError, match=r"algo\.terms\.found\.coef=-0\.1 must be a finite number >= 0"):
        term_settings({"found": -0.1})
    with pytest.raises(
        ConfigError, match=r"algo\.terms\.found\.rows='some' is not valid; choose one of: off_policy, all"
    ):
        term_settings({"found": {"coef": 0.2, "rows": "some"}})
    with pytest.raises(ConfigError, match=r"algo\.terms\.found\.row is not a setting; valid: coef, rows"):
        term_settings({"found": {"row": "all"}})
    with pytest.raises(ConfigError, match=r"unknown algo\.terms 'fund'; valid: follow, found"):
        term_settings({"fund": 0.2})
    settings = term_settings({"found": {"coef": 1, "rows": "all"}, "follow": 0})  # coef 0: off
    assert list(settings) == ["found"]
    assert settings["found"].coef == 1.0
