"""``model.padding_free``: the update's rows scored packed side by side without their padding give the padded
batch's log-probs, entropies and gradients, up to float rounding, on every model family the scorer serves."""

from __future__ import annotations

import copy
import random
from dataclasses import replace

import pytest
import torch

from sesa_cli.rollout import scoring
from sesa_cli.rollout.scoring import build_batch, completion_logps, pack_rows
from sesa_cli.runs import RunDir
from sesa_cli.trainer import Trainer


def _ragged_batch(vocab: int, shared: bool, seed: int = 0, masks: bool = False):
    """24 rows whose contexts and completions differ in length, as a batch's sketches and episodes do: with
    ``shared``, 3 prompts of 14-20 tokens each completed 8 times (a group's rows), else a context of 1-12 tokens
    per row; with ``masks``, some completion tokens are teacher-forced (outside the loss)."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(4, vocab) for _ in range(rng.randint(14, 20))] for _ in range(3)]
    contexts = [
        prompts[i // 8] if shared else [rng.randrange(4, vocab) for _ in range(rng.randint(1, 12))] for i in range(24)
    ]
    completions = [[rng.randrange(4, vocab) for _ in range(rng.randint(1, 30))] for _ in range(24)]
    own = [[rng.random() < 0.7 for _ in c] for c in completions] if masks else None
    return build_batch(contexts, completions, 0, own)


@pytest.mark.parametrize("shared", [False, True])
def test_packed_rows_see_exactly_what_their_padded_rows_see(shared):
    """Every token of every row sits once in the packed layout with its row's position, and attends to exactly the
    tokens its padded row attends to: its own earlier tokens (the context's held once for the rows sharing it)."""
    batch = _ragged_batch(50, shared)
    packed = pack_rows(batch, hidden_size=128)
    lengths = batch.attention_mask.sum(1).tolist()
    ids, positions = packed.input_ids.flatten(), packed.position_ids.flatten()
    width = packed.input_ids.shape[1]
    assert packed.input_ids.numel() < batch.input_ids.numel()  # less than the padded batch
    if shared:
        assert packed.input_ids.numel() < sum(lengths)  # fewer slots than tokens: contexts held once
    allowed = packed.attention_mask[:, 0]
    for i, n in enumerate(lengths):
        at = packed.index[i, :n]
        assert ids[at].tolist() == batch.input_ids[i, :n].tolist()
        assert positions[at].tolist() == list(range(n))
        assert len(set((at // width).tolist())) == 1  # a row never spans two bins
        b, cols = int(at[0]) // width, at % width
        for p in range(n):
            seen = set(allowed[b, int(cols[p])].nonzero().flatten().tolist())
            assert seen == set(cols[: p + 1].tolist()), (i, p)


def _qwen2(attention: str = "sdpa"):
    """A small random Qwen2 (grouped-query attention, biased q/k/v): a real model family's scoring path."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        attn_implementation=attention,
        vocab_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, max_position_embeddings=128,
    )  # fmt: skip
    return Qwen2ForCausalLM(cfg)


def _lora(model):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return get_peft_model(copy.deepcopy(model), config)


@pytest.mark.numerics
@pytest.mark.parametrize("which", ["tiny", "tiny_lora", "qwen2_gqa", "qwen2_eager"])
@pytest.mark.parametrize(("shared", "temperature"), [(False, 1.0), (True, 0.7)])
def test_packed_scoring_gives_the_padded_logps_entropies_and_gradients(path_setup, which, shared, temperature):
    _, _, policy = path_setup
    model = {"tiny": lambda: copy.deepcopy(policy.model), "tiny_lora": lambda: _lora(policy.model),
             "qwen2_gqa": _qwen2,
             "qwen2_eager": lambda: _qwen2("eager")}[which]()  # fmt: skip
    vocab = model.get_output_embeddings().weight.shape[0]
    batch = _ragged_batch(vocab, shared, masks=True)
    mask = batch.response_mask
    out = {}
    for padding_free in (False, True):
        model.zero_grad()
        logps, ents = completion_logps(model, batch, temperature, padding_free=padding_free)
        ((logps * mask).sum() - 0.1 * (ents * mask).sum()).backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        out[padding_free] = (logps.detach() * mask, ents.detach() * mask, grads)
    for padded, packed in zip(out[False], out[True], strict=True):
        assert packed.shape == padded.shape
        torch.testing.assert_close(packed, padded, rtol=1e-4, atol=1e-4 * float(padded.abs().max()))


@pytest.mark.parametrize("grad", [False, True])
def test_packed_scoring_runs_the_vocabulary_head_on_response_positions_only(path_setup, grad):
    """Padding-free, the head (the (positions, vocab) product and its softmax) sees the response positions and no
    other: not the padding, not the teacher-forced tokens (an agent episode's observations), which hold 0."""
    _, _, policy = path_setup
    model = copy.deepcopy(policy.model)
    batch = _ragged_batch(model.get_output_embeddings().weight.shape[0], shared=True, masks=True)
    mask = batch.response_mask
    assert 0 < mask.sum() < mask.numel() * 0.6  # the batch has padding and masked tokens to leave out
    seen: list[int] = []
    hook = model.get_output_embeddings().register_forward_hook(lambda _m, args, _o: seen.append(args[0].shape[0]))
    with torch.set_grad_enabled(grad):
        logps, ents = completion_logps(model, batch, padding_free=True)
        if grad:
            (logps * mask).sum().backward()
    hook.remove()
    assert sum(seen) == int(mask.sum())
    outside = mask == 0
    assert not logps[outside].any()
    assert not ents[outside].any()
    assert (logps[~outside] < 0).all()
    assert (ents[~outside] > 0).all()


@pytest.mark.parametrize("padding_free", [False, True])
def test_a_checkpointed_head_gives_the_kept_heads_gradients_bit_for_bit(path_setup, monkeypatch, padding_free):
    """Chunks whose logits pass ``CHECKPOINT_LOGITS`` are recomputed in backward (the head runs twice), smaller ones
    kept; either way the log-probs, entropies and gradients are the same bits."""
    _, _, policy = path_setup
    batch = _ragged_batch(policy.model.get_output_embeddings().weight.shape[0], shared=False, masks=True)
    out, calls, head, kept = {}, {}, scoring._chunk_logps, scoring.CHECKPOINT_LOGITS
    for limit in (kept, 0):  # the tiny vocab is kept; a limit of 0 checkpoints every chunk
        monkeypatch.setattr(scoring, "CHECKPOINT_LOGITS", limit)
        model = copy.deepcopy(policy.model)
        seen: list[int] = []
        monkeypatch.setattr(scoring, "_chunk_logps", lambda *a, seen=seen, head=head: seen.append(1) or head(*a))
        logps, ents = completion_logps(model, batch, chunk=8, padding_free=padding_free)
        ((logps * batch.response_mask).sum() - 0.1 * (ents * batch.response_mask).sum()).backward()
        out[limit] = [logps.detach(), ents.detach(), *(p.grad for p in model.parameters() if p.grad is not None)]
        calls[limit] = len(seen)
    assert calls[0] == 2 * calls[kept] > 0
    assert all(torch.equal(a, b) for a, b in zip(out[0], out[kept], strict=True))


def test_a_padding_free_update_takes_the_padded_updates_step(frozenlake_setup, tmp_path):
    """One update of the FrozenLake recipe (episodes with observations, two-token sketches, the follow term) on the
    same batch, as one mini-batch: the same loss and gradient norm, and weights that land where the padded update's
    land, up to float rounding. (Over several mini-batches the second starts from weights a rounding apart, which
    Adam's first steps widen to about lr where a gradient is near zero.)"""
    cfg, task, policy = frozenlake_setup
    trainers = {}
    for padding_free in (False, True):
        model, algo = replace(cfg.model, padding_free=padding_free), replace(cfg.algo, minibatches=1)
        c = replace(cfg, model=model, algo=algo, optim=replace(cfg.optim, lr=1e-5))
        trainers[padding_free] = Trainer(c, task, copy.deepcopy(policy), RunDir(tmp_path / f"run{padding_free}"))
    groups, _ = trainers[False]._draw_batch()
    inputs = trainers[False].learner.inputs(groups)
    lengths = [len(c) + len(y) for c, y in zip(inputs.contexts, inputs.completions, strict=True)]
    assert min(lengths) * 3 < max(lengths)  # ragged: packing has padding to remove
    before = torch.cat([p.detach().flatten() for p in policy.model.parameters()])
    stats = {pf: t.learner.update(copy.deepcopy(inputs)) for pf, t in trainers.items()}
    for key in ("loss/total", "loss/follow_nll", "optim/grad_norm"):
        assert stats[True][key] == pytest.approx(stats[False][key], rel=1e-4, abs=1e-6), key
    moved = {
        pf: torch.cat([p.detach().flatten() for p in t.model.parameters()]) - before for pf, t in trainers.items()
    }
    # Adam moves a weight by about lr whatever its gradient's size, so a weight whose gradient is rounding noise may
    # move either way: the two steps agree as vectors, not element by element
    assert float((moved[True] - moved[False]).norm() / moved[False].norm()) < 0.01


def test_a_flat_packing_holds_every_row_whole_in_one_row_with_restarting_positions():
    """Flash attention's layout: no mask (its width is every token of the batch), no shared contexts, one row, each
    sequence's positions from 0, which is all that tells the rows apart."""
    batch = _ragged_batch(50, shared=True)
    packed = pack_rows(batch, hidden_size=128, flat=True)
    lengths = batch.attention_mask.sum(1).tolist()
    assert packed.attention_mask is None
    assert tuple(packed.input_ids.shape) == (1, sum(lengths))
    starts = sorted(int(packed.index[i, 0]) for i in range(len(lengths)))
    assert packed.position_ids[0, starts].tolist() == [0] * len(lengths)
    for i, n in enumerate(lengths):
        at = packed.index[i, :n]
        assert at.tolist() == list(range(int(at[0]), int(at[0]) + n))  # whole and contiguous
        assert packed.input_ids[0, at].tolist() == batch.input_ids[i, :n].tolist()
        assert packed.position_ids[0, at].tolist() == list(range(n))


@pytest.mark.numerics
def test_an_attention_without_custom_masks_scores_the_flat_packing_to_the_padded_values(path_setup, monkeypatch):
    """A model whose attention takes no 4D mask (flash attention, which this CPU has not) gets the flat packing and
    no mask; run through SDPA, which reads the same packing from the restarting positions, it scores what the padded
    batch scores."""
    from sesa_cli.rollout import scoring

    _, _, policy = path_setup
    batch = _ragged_batch(policy.model.get_output_embeddings().weight.shape[0], shared=True, masks=True)
    with torch.no_grad():
        padded, _ = completion_logps(policy.model, batch, padding_free=False)
        monkeypatch.setattr(scoring, "_attention", lambda model: "flash_attention_2")
        flat, _ = completion_logps(policy.model, batch, padding_free=True)
    mask = batch.response_mask
    torch.testing.assert_close(flat * mask, padded * mask, rtol=1e-4, atol=1e-4)
