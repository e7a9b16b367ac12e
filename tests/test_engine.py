"""The rollout engine: cache continuation is exact, rows stop on their own stop token, sampling filters."""

from __future__ import annotations

import torch

from sesa_cli.rollout.engine import Engine, SamplingParams, filter_logits
from sesa_cli.rollout.special import suppressed_ids


def _full_logps(model, ids: list[int]) -> torch.Tensor:
    """A fresh forward's log-probs with the ids the model never samples masked (as the engine masks them)."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits.float()
    logits[..., suppressed_ids(model)] = float("-inf")
    return torch.log_softmax(logits, -1)[0]


def test_continued_cache_logps_match_a_fresh_forward(path_setup):
    _, task, policy = path_setup
    eng = Engine(policy.model, policy.tokenizer.pad_token_id)
    bos = policy.tokenizer.bos_token_id
    stop = policy.encode(task.stop)
    prompts = [[bos, *policy.encode("P:")], [bos, *policy.encode("S:")], [bos, *policy.encode("Pkesu:kesu/")]]
    gen = torch.Generator().manual_seed(0)
    session = eng.start(prompts)
    rounds = []
    for k in range(3):
        if k:
            session.extend([policy.encode("|")[:0], [], policy.encode("|")])  # ragged teacher forcing
        rounds.append((k, [list(t) for t in session.tokens], session.sample(12, stop, SamplingParams(), gen)))
    worst = 0.0
    for row in range(3):
        full = session.tokens[row]
        lp = _full_logps(policy.model, full)
        for _, contexts, comps in rounds:
            start = len(contexts[row])
            assert full[start : start + len(comps[row].ids)] == comps[row].ids
            for j, (tok, logp) in enumerate(zip(comps[row].ids, comps[row].logps, strict=True)):
                worst = max(worst, abs(lp[start + j - 1, tok].item() - logp))
    assert worst < 1e-4


def test_each_row_stops_at_its_own_stop_token(path_setup):
    _, _, policy = path_setup
    eng = Engine(policy.model, policy.tokenizer.pad_token_id)
    bos = policy.tokenizer.bos_token_id
    slash, bar = policy.encode("/")[0], policy.encode("|")[0]
    gen = torch.Generator().manual_seed(1)
    comps = eng.start([[bos, *policy.encode("P:")]] * 2).sample(30, [[slash], [bar]], SamplingParams(), gen)
    for comp, stop in zip(comps, (slash, bar), strict=True):
        if comp.stopped:
            assert comp.ids[-1] == stop
            assert stop not in comp.ids[:-1]
        else:
            assert len(comp.ids) == 30
    assert comps[0].stopped
    assert comps[0].ids.count(slash) == 1


def test_length_limits_are_per_row(path_setup):
    _, _, policy = path_setup
    eng = Engine(policy.model, policy.tokenizer.pad_token_id)
    bos = policy.tokenizer.bos_token_id
    comps = eng.start([[bos]] * 3).sample([1, 4, 0], [], SamplingParams(), torch.Generator().manual_seed(0))
    assert [len(c.ids) for c in comps] == [1, 4, 0]


def test_temperature_zero_is_greedy_decoding_like_generate(path_setup):
    _, _, policy = path_setup
    eng = Engine(policy.model, policy.tokenizer.pad_token_id)
    prompt = [policy.tokenizer.bos_token_id, *policy.encode("P:")]
    # different generator seeds: greedy decoding must not depend on them
    a, b = (
        eng.start([prompt]).sample(10, [], SamplingParams(0.0), torch.Generator().manual_seed(s))[0] for s in (0, 1)
    )
    assert a.ids == b.ids
    with torch.no_grad():
        ref = policy.model.generate(
            torch.tensor([prompt]), max_new_tokens=10, do_sample=False, pad_token_id=policy.tokenizer.pad_token_id
        )
    assert a.ids == ref[0, len(prompt) :].tolist()


def test_filter_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, 2, 1.0)[0, 2:]).all()
    kept = ~torch.isinf(filter_logits(logits, 0, 0.8))
    assert kept.tolist() == [[True, True, False, False]]
    assert (~torch.isinf(filter_logits(logits, 0, 0.1))).sum() == 1
