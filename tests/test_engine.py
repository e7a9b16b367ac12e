"""The rollout engine: cache continuation is exact, rows stop on their own stop token, sampling filters."""

from __future__ import annotations

import pytest
import torch

from sesa_cli.exact import ExactPolicy
from sesa_cli.models.special import suppressed_ids
from sesa_cli.rollout import engine
from sesa_cli.rollout.engine import Engine, SamplingParams, filter_logits
from sesa_cli.rollout.samplers import ParallelSampler


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


def _chain_prompts(policy):
    bos = policy.tokenizer.bos_token_id
    return [[bos, *policy.encode("P:")], [bos, *policy.encode("S:")], [bos, *policy.encode("Pkesu:kesu/")]]


def test_chains_never_wait_and_draw_what_each_row_draws_alone(path_setup, monkeypatch):
    """Issue 20: a row starts its next chain item the moment its current one stops. With one generator per row the
    draws are the row's own, so each row's chain equals the chain it draws alone (where no schedule can differ), and
    the session runs one forward per token of its longest chain, not the sum over positions of the longest item."""
    _, task, policy = path_setup
    eng = Engine(policy.model, policy.tokenizer.pad_token_id)
    stop = policy.encode(task.stop)

    def between(row, item):  # after a cut item its stop (the path task's between text is empty)
        return [] if item.stopped else stop

    prompts = _chain_prompts(policy)
    session = eng.start(prompts)
    forwards = []
    inner = session._forward
    monkeypatch.setattr(session, "_forward", lambda ids, mask: forwards.append(tuple(ids.shape)) or inner(ids, mask))
    gens = [torch.Generator().manual_seed(10 + i) for i in range(len(prompts))]
    # a budget one token longer than a sketch (a region and its stop): a sketch fits, a whole path (three names) is cut
    budget = len(policy.encode(next(iter(task.tree)) + task.stop)) + 1
    together = session.sample_chains(4, budget, stop, SamplingParams(), gens, between=between)
    lengths = [sum(len(item.ids) for _, item in chain) for chain in together]
    assert len(forwards) == max(lengths)  # every forward samples a token for every row still drawing
    assert min(lengths) < max(lengths)  # (the rows' chains do differ in length, so waiting would cost more)
    assert any(not item.stopped for chain in together for _, item in chain)  # (and some items were cut)
    for i, prompt in enumerate(prompts):
        alone = eng.start([prompt]).sample_chains(
            4, budget, stop, SamplingParams(), [torch.Generator().manual_seed(10 + i)], between=between
        )[0]
        assert [(ctx, item.ids, item.stopped) for ctx, item in alone] == [
            (ctx, item.ids, item.stopped) for ctx, item in together[i]
        ]
        for (_, a), (_, b) in zip(alone, together[i], strict=True):
            assert max((abs(x - y) for x, y in zip(a.logps, b.logps, strict=True)), default=0.0) < 1e-5
            assert max((abs(x - y) for x, y in zip(a.entropies, b.entropies, strict=True)), default=0.0) < 1e-5
    # each item's context is the row's tokens when it began: the prompt, then every earlier item and its separator
    for i, chain in enumerate(together):
        context = list(prompts[i])
        for ctx, item in chain:
            assert ctx == context
            context = [*context, *item.ids, *between(i, item)]


def test_a_shared_prompt_is_prefilled_once_and_copied(path_setup, monkeypatch):
    _, task, policy = path_setup
    eng = Engine(policy.model, policy.tokenizer.pad_token_id)
    p, q, r = _chain_prompts(policy)
    widths = []
    inner = eng.backend.forward
    monkeypatch.setattr(
        eng.backend, "forward", lambda state, ids, *a: widths.append(tuple(ids.shape)) or inner(state, ids, *a)
    )
    shared = eng.start([p, p, q, p, r, q])
    assert widths == [(3, max(map(len, (p, q, r))))]  # one prefill of the three distinct prompts
    assert shared.tokens == [p, p, q, p, r, q]
    assert shared.pos.tolist() == [len(t) for t in shared.tokens]
    alone = [eng.start([x]) for x in (p, p, q, p, r, q)]
    for row, single in enumerate(alone):
        assert torch.allclose(shared.last_logits[row], single.last_logits[0], atol=1e-5)
    stop = policy.encode(task.stop)
    gens = [torch.Generator().manual_seed(i) for i in range(6)]
    drawn = shared.sample(12, stop, SamplingParams(), gens)
    for row, single in enumerate(alone):
        own = single.sample(12, stop, SamplingParams(), [torch.Generator().manual_seed(row)])[0]
        assert own.ids == drawn[row].ids
        # float32 sums over a batch of 6 rows against 1: the same draws, log-probs equal to rounding
        assert max((abs(x - y) for x, y in zip(own.logps, drawn[row].logps, strict=True)), default=0.0) < 1e-4


@pytest.mark.numerics
def test_rows_with_the_same_tokens_share_a_cache_row_and_change_no_number(frozenlake_setup, monkeypatch):
    """Rows fed the same tokens so far run as one physical row: episodes drawn from 4 prompts x 16 (two of them the
    same instance), their greedy answers (every sample of a prompt alike: fewer distinct rows than MIN_ROWS) and an
    episode tree (a select with repeats every turn) give what they give with sharing off (MIN_ROWS above every batch:
    one physical row per logical row, as the engine ran before sharing), in fewer forward rows.

    The same tokens, stops and scores, and the same numbers up to float rounding: a forward pass of fewer rows may
    block its matrix products otherwise (issue 49: -2.200807571 against -2.200808048 on another CPU's kernels, 5e-7),
    so log-probs and entropies are compared to 1e-5 and the tree's probabilities (products of ~20 token
    probabilities) to a relative 1e-4. A token could differ only where a draw fell within ~1e-6 of a boundary of
    the sampling distribution: about 1e-6 per token, some 2,000 tokens here."""
    cfg, task, policy = frozenlake_setup
    instances = [task.instance("val", i) for i in (0, 1, 2, 0)]
    sampled = ParallelSampler(cfg.sampler, task, policy)
    greedy = ParallelSampler(cfg.sampler, task, policy, greedy=True)
    rows: list[int] = []
    for sampler in (sampled, greedy):
        inner = sampler.engine.backend.forward
        monkeypatch.setattr(
            sampler.engine.backend,
            "forward",
            lambda state, ids, *a, inner=inner: rows.append(ids.shape[0]) or inner(state, ids, *a),
        )

    def outcome() -> tuple[list, list, list]:
        drawn = [
            (r.completion.ids, r.completion.logps, r.completion.entropies, r.completion.stopped, r.score)
            for sampler in (sampled, greedy)
            for group in sampler.draw(instances, 16, torch.Generator().manual_seed(0))
            for r in group
        ]
        snapshot = ExactPolicy(sampled, instances[:2]).snapshot()
        return drawn, [inst.probs.tolist() for inst in snapshot.instances], [inst.keys for inst in snapshot.instances]

    shared = outcome()
    shared_rows, rows[:] = sum(rows), []
    monkeypatch.setattr(engine, "MIN_ROWS", 10**9)
    alone = outcome()
    assert len(alone[0]) == len(shared[0])
    for (ids, logps, ents, stopped, score), (ids2, logps2, ents2, stopped2, score2) in zip(
        alone[0], shared[0], strict=True
    ):
        assert (ids, stopped, score) == (ids2, stopped2, score2)
        assert logps == pytest.approx(logps2, abs=1e-5)
        assert ents == pytest.approx(ents2, abs=1e-5)
    assert alone[2] == shared[2]  # the same episodes walked
    for probs, probs2 in zip(alone[1], shared[1], strict=True):
        assert probs == pytest.approx(probs2, rel=1e-4, abs=1e-12)
    assert shared_rows < 0.8 * sum(rows)


def test_the_llama_backend_draws_what_the_models_own_forward_draws(frozenlake_setup, monkeypatch):
    """``auto`` runs model=tiny through :class:`LlamaBackend` (the Llama forward op for op, without the module
    plumbing): episodes drawn from shared and distinct prompts, greedy answers, an episode tree (select with repeats)
    and the chains of a sequential sampler give bit for bit what the model's own forward gives them."""
    from sesa_cli.rollout.backends import HFBackend, LlamaBackend, make_backend
    from sesa_cli.rollout.samplers import SequentialSampler

    cfg, task, policy = frozenlake_setup
    assert isinstance(make_backend(policy.model), LlamaBackend)
    instances = [task.instance("val", i) for i in (0, 1, 2, 0)]

    def outcome() -> tuple[list, list]:
        drawn = [
            (r.completion.ids, r.completion.logps, r.completion.entropies, r.completion.stopped)
            for sampler in (
                ParallelSampler(cfg.sampler, task, policy),
                ParallelSampler(cfg.sampler, task, policy, greedy=True),
                SequentialSampler(cfg.sampler, task, policy),
            )
            for group in sampler.draw(instances, 8, torch.Generator().manual_seed(0))
            for r in group
        ]
        snapshot = ExactPolicy(ParallelSampler(cfg.sampler, task, policy), instances[:2]).snapshot()
        probs = [inst.probs.tolist() for inst in snapshot.instances]
        return drawn, probs

    fast = outcome()
    monkeypatch.setattr(engine, "make_backend", lambda model, name="auto": HFBackend(model))
    assert outcome() == fast


def test_the_llama_backend_leaves_other_models_to_their_own_forward(frozenlake_setup):
    """LoRA-wrapped projections and grouped-query attention are not the plain Llama the backend computes: ``auto``
    gives them :class:`HFBackend`, and asking for ``llama`` by name is refused."""
    import copy

    import pytest
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from sesa_cli.rollout.backends import HFBackend, LlamaBackend, make_backend

    _, _, policy = frozenlake_setup
    lora = get_peft_model(copy.deepcopy(policy.model), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    gqa = LlamaForCausalLM(
        LlamaConfig(vocab_size=32, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2)
    )
    for model in (lora, lora.get_base_model(), gqa):
        assert not LlamaBackend.supports(model)
        assert isinstance(make_backend(model), HFBackend)
    with pytest.raises(ValueError, match="not a plain Llama"):
        make_backend(gqa, "llama")


@pytest.mark.numerics
def test_completion_logps_after_one_prompt_match_the_loss_scoring(path_setup):
    """``Engine.completion_logps`` (the prompt once, ragged completions continuing its cache) gives each completion's
    summed log-prob as the loss's scoring pass gives it (the whole sequence per row, banned ids masked alike), at
    another temperature too."""
    from sesa_cli.rollout.scoring import build_batch, completion_logps

    _, _, policy = path_setup
    eng = Engine(policy.model, policy.tokenizer.pad_token_id)
    prompt = [policy.tokenizer.bos_token_id, *policy.encode("P:")]
    completions = [policy.encode(t) for t in ("kesu/", "kesu/kesu|", "|", "kesu/kesu/kesu/kesu|")]
    for temperature in (1.0, 0.7):
        cached = eng.completion_logps(prompt, completions, temperature)
        batch = build_batch([prompt] * len(completions), completions, policy.tokenizer.pad_token_id)
        with torch.no_grad():
            full, _ = completion_logps(policy.model, batch, temperature)
        expected = (full.double() * batch.response_mask.double()).sum(1)
        assert cached.dtype == torch.float64
        assert torch.allclose(cached, expected, rtol=0, atol=1e-4)
        assert bool((cached < 0).all())
