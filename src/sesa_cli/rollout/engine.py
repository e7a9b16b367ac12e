"""The rollout engine: one incremental decoding loop for any causal ``transformers`` model.

A :class:`Session` holds a batch of rows and one KV cache. ``extend`` teacher-forces tokens onto every row (a prompt,
an observation, a separator) and ``sample`` draws a continuation per row until the row's own stop token or length
limit. Both append to the same cache, so sequential sampling continues the context of sample k-1 instead of
re-encoding the growing prompt.

The ids the model never samples (BOS, PAD, UNK: :mod:`sesa_cli.models.special`) get logit -inf before sampling;
the recorded log-probs and entropies are those of that masked distribution, as the scoring pass computes them.

Rows are right-padded inside each chunk: a row with fewer tokens in a chunk leaves masked "holes" in the cache
that later tokens skip (position ids count only real tokens). No row ever starts with padding, so no query is
fully masked. The log-prob and entropy of every sampled token come from the sampling pass itself.

Rows whose tokens are the same so far (the n samples of one prompt until they first differ; two instances with the same
prompt; the episodes of a policy that plays one path) share one row of the cache, a *physical* row: the model runs
once per distinct row (:class:`Session`). Sharing changes no number: a row's cache and logits are computed from its
own tokens in the same columns (holes included), and the forward of a row does not depend on which other rows are in
its batch, as long as it has at least :data:`MIN_ROWS` (tests/test_engine.py checks draws, log-probs and an
episode tree's probabilities bit for bit against the same calls unshared).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from sesa_cli import compute
from sesa_cli.models.special import banned_mask, masked_logps
from sesa_cli.rollout.backends import make_backend
from sesa_cli.rollout.rollouts import Completion


@dataclass
class SamplingParams:
    temperature: float = 1.0
    """> 0 samples; 0 = greedy decoding (argmax; logps/entropies are then those of the untempered distribution)."""
    top_p: float = 1.0
    top_k: int = 0


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask logits outside the top-k / nucleus (top-p) set with -inf. ``logits``: (batch, vocab)."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass strictly before it already reaches top_p (the top token always stays)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


MIN_ROWS = 4
"""Fewest rows a forward of a shared session runs. A row's numbers do not depend on the other rows of its batch
(each output of a matrix product sums its own row's products in a fixed order), except where the BLAS takes another
path for tiny products: MKL's sgemm computes 1-3 rows differently from 4 or more (measured on this project's CPU,
bit for bit). So a batch of at least this many rows is never run on fewer physical rows (duplicates fill it up), and a
smaller batch is not shared at all: its forwards run exactly the rows they ran before sharing existed."""


class Session:
    """A batch of growing sequences sharing one KV cache. Create with :meth:`Engine.start`.

    ``batch`` logical rows (what callers index: ``tokens``, ``last_logits``, the rows of ``extend`` and ``sample``)
    map onto physical rows of the cache: logical rows with the same tokens so far share one, and the forward runs
    each physical row once. Rows stay shared while they are fed the same tokens and part when they are not
    (:meth:`_feed`); :meth:`select` only remaps, and the cache is reordered at the next forward.
    """

    def __init__(self, engine: Engine, batch: int) -> None:
        self.engine = engine
        self.batch = batch
        self.state = engine.backend.new_state(batch)
        self.physical: list[int] = list(range(batch))  # logical row -> its physical row in the cache
        self.physical_pos = torch.zeros(batch, dtype=torch.long, device=engine.device)  # real tokens per physical row
        self.last_logits: torch.Tensor | None = None  # (batch, vocab): next-token logits of every logical row
        self.tokens: list[list[int]] = [[] for _ in range(batch)]  # every real token of each row, in order
        self.width = 0  # columns of the cache (holes included): the keys a chunk attends to besides its own

    @property
    def pos(self) -> torch.Tensor:
        """(batch,) real tokens of each logical row."""
        return self.physical_pos[torch.as_tensor(self.physical, dtype=torch.long, device=self.physical_pos.device)]

    # ------------------------------------------------------------------ forward
    def _forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Run a chunk (physical rows, L) through the model, appending to the cache; return the logits at each
        physical row's last real token of the chunk (physical rows, vocab), garbage for a row with no real token."""
        eng = self.engine
        position_ids = (self.physical_pos[:, None] + mask.cumsum(1) - 1).clamp(min=0)
        # inference mode, not no_grad: the same kernels without autograd's version counters and view tracking (a
        # sampling step 0.94x on the tiny model, the same draws; docs/measurements.md, "Inference mode"); what it
        # returns (logits, the cache) is only ever read, never trained through
        with torch.inference_mode(), eng.autocast():
            hidden = eng.backend.forward(self.state, ids, mask, position_ids)  # (rows, L, hidden)
            if ids.shape[1] == 1:
                picked = hidden[:, 0]
            else:
                last = (mask.cumsum(1) * mask).argmax(1)  # index of the last real token per row
                picked = hidden[torch.arange(ids.shape[0], device=ids.device), last]
            logits: torch.Tensor = eng.backend.logits(picked).float()
        self.physical_pos = self.physical_pos + mask.sum(1)
        rows, new = ids.shape
        compute.count_forward(eng.shape, rows, new, self.width, rows)
        self.width += new
        return logits

    def extend(self, rows: Sequence[Sequence[int]]) -> None:
        """Teacher-force ``rows[i]`` onto row i (lengths may differ, may be empty)."""
        assert len(rows) == self.batch
        if any(rows):
            self._feed([list(r) for r in rows])

    def sample(
        self,
        max_new_tokens: int | Sequence[int],
        stop_ids: Sequence[int] | Sequence[Sequence[int]],
        params: SamplingParams,
        generator: Generators = None,
        active: Sequence[bool] | None = None,
    ) -> list[Completion]:
        """Sample one continuation per row until its stop token or its length limit.

        ``max_new_tokens`` and ``stop_ids`` are shared or per row. Rows with ``active[i] == False`` sample nothing
        and return an empty completion. ``generator``: one for the batch, or one per row (:data:`Generators`).
        """
        chains = self.sample_chains(1, max_new_tokens, stop_ids, params, generator, active=active)
        return [chain[0][1] if chain else Completion([], [], [], False) for chain in chains]

    def sample_chains(
        self,
        items: int,
        max_new_tokens: int | Sequence[int],
        stop_ids: Sequence[int] | Sequence[Sequence[int]],
        params: SamplingParams,
        generator: Generators = None,
        between: Callable[[int, Completion], Sequence[int]] | None = None,
        active: Sequence[bool] | None = None,
    ) -> list[list[tuple[list[int], Completion]]]:
        """Sample ``items`` continuations per row one after another on the row's own cache (SESA's chains): item k
        of row i ends on its stop token or its length limit, then ``between(i, item)`` is teacher-forced onto row i
        alone and row i samples item k+1 at once, while the other rows go on with their own items (no row waits for
        the slowest row of the batch, so a chain costs its own length, not the sum over positions of the
        longest item). Returns, per row, ``items`` pairs (the row's tokens when the item began, the item).

        The tokens a row draws are those it would draw alone given the same generator state, but with one
        ``generator`` for the batch the stream is shared, so a different schedule hands each row different random
        numbers: the same distribution, not the same draws as a schedule where rows wait. With one generator per
        row the draws are the row's own (tests/test_engine.py checks them against each row run alone).
        """
        if self.last_logits is None:
            raise RuntimeError("extend() the session with a prompt before sampling")
        b, dev = self.batch, self.engine.device
        generator = on_device(generator, dev)
        limits = torch.as_tensor(
            [max_new_tokens] * b if isinstance(max_new_tokens, int) else list(max_new_tokens), device=dev
        )
        shared = not stop_ids or isinstance(stop_ids[0], int)
        per_row: list[list[int]] = (
            [list(stop_ids)] * b if shared else [list(s) for s in stop_ids]  # type: ignore[arg-type]
        )
        width = max(1, *(len(s) for s in per_row))
        stops = torch.tensor([[*s, *[-1] * (width - len(s))] for s in per_row], dtype=torch.long, device=dev)
        running = torch.as_tensor([True] * b if active is None else list(active), dtype=torch.bool, device=dev)
        running &= limits > 0
        chains: list[list[tuple[list[int], Completion]]] = [[] for _ in range(b)]
        contexts = [list(t) for t in self.tokens]  # each row's context of its current item
        out_ids: list[list[int]] = [[] for _ in range(b)]
        out_logps: list[list[float]] = [[] for _ in range(b)]
        out_ent: list[list[float]] = [[] for _ in range(b)]
        count = torch.zeros(b, dtype=torch.long, device=dev)
        logits = self.last_logits
        banned = banned_mask(self.engine.model, logits.shape[-1], dev)
        stop_fn = self.engine.stop_fn
        while bool(running.any()):
            greedy = params.temperature == 0
            scaled = logits if greedy else logits / params.temperature
            logp_all, entropy = masked_logps(scaled, banned)
            if greedy:
                tok = logp_all.argmax(-1)
            else:
                probs = torch.softmax(filter_logits(logp_all, params.top_k, params.top_p), dim=-1)
                tok = _draw(probs, generator)
            tok_logp = logp_all.gather(1, tok[:, None]).squeeze(1)
            count += running.long()
            # what the loop below reads, copied to the host in one transfer (one wait for the device a step, not six):
            # float64 holds every token id, float32 log-prob and entropy exactly
            stopping = (tok[:, None] == stops).any(1) & running
            at_limit = running & (count >= limits)
            host = torch.stack([x.double() for x in (tok, tok_logp, entropy, running, stopping, at_limit)]).tolist()
            tok_l = [int(t) for t in host[0]]
            logp_l, ent_l = host[1], host[2]
            run_l, is_stop, ended = ([v != 0 for v in row] for row in host[3:])
            compute.count_sampled(sum(run_l))
            feeds: list[list[int]] = [[] for _ in range(b)]
            done: list[int] = []  # rows whose chain is complete: they stop running
            fresh: list[int] = []  # rows that begin their next item: their token count starts again
            for i in range(b):
                if not run_l[i]:
                    continue
                out_ids[i].append(tok_l[i])
                out_logps[i].append(logp_l[i])
                out_ent[i].append(ent_l[i])
                if not is_stop[i] and stop_fn is not None and stop_fn(out_ids[i]):
                    is_stop[i] = True  # multi-token stop strings (e.g. "</answer>" in a BPE vocab)
                # Feed the sampled token (even on the last step) so the cache always holds the whole row: the
                # next extend/sample continues from a complete context.
                feeds[i] = [tok_l[i]]
                if not (is_stop[i] or ended[i]):
                    continue
                item = Completion(out_ids[i], out_logps[i], out_ent[i], is_stop[i])
                chains[i].append((contexts[i], item))
                out_ids[i], out_logps[i], out_ent[i] = [], [], []
                if len(chains[i]) == items:
                    done.append(i)
                    continue
                feeds[i] += list(between(i, item)) if between is not None else []
                contexts[i] = [*self.tokens[i], *feeds[i]]
                fresh.append(i)
            if done:
                running[torch.tensor(done, dtype=torch.long, device=dev)] = False
            if fresh:
                count[torch.tensor(fresh, dtype=torch.long, device=dev)] = 0
            logits = self._feed(feeds)
        return chains

    def _feed(self, rows: list[list[int]]) -> torch.Tensor:
        """Teacher-force ``rows[i]`` onto logical row i (a chunk with per-row lengths) and return the next-token
        logits of every logical row (a row fed nothing keeps its previous ones).

        Logical rows of one physical row fed the same tokens stay on one row; fed different tokens, they part (the
        cache row is copied). Every physical row gets the chunk's full width, as each logical row did unshared."""
        width = max(len(r) for r in rows)
        pad, dev = self.engine.pad_id, self.engine.device
        if self.batch < MIN_ROWS:  # unshared: one physical row per logical row (see MIN_ROWS)
            parents, feeds, rows_after = list(self.physical), rows, list(range(self.batch))
        else:
            distinct: dict[tuple[int, tuple[int, ...]], int] = {}
            rows_after = [
                distinct.setdefault((p, tuple(r)), len(distinct)) for p, r in zip(self.physical, rows, strict=True)
            ]
            parents = [p for p, _ in distinct]
            feeds = [list(r) for _, r in distinct]
            while len(parents) < MIN_ROWS:  # a duplicate no logical row reads keeps the product on MKL's main path
                parents.append(parents[0])
                feeds.append(feeds[0])
        if parents != list(range(int(self.physical_pos.shape[0]))):
            index = torch.as_tensor(parents, dtype=torch.long, device=dev)
            self.engine.backend.select(self.state, index)
            self.physical_pos = self.physical_pos[index]
        # one tensor from nested lists: a copy per row cost ~1.4 ms of a 64-row decode step (bench/rollout.py --profile)
        ids = torch.tensor([[*r, *[pad] * (width - len(r))] for r in feeds], dtype=torch.long, device=dev)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in feeds], dtype=torch.long, device=dev)
        for tokens, r in zip(self.tokens, rows, strict=True):
            tokens.extend(r)
        logits = self._forward(ids, mask)
        self.physical = rows_after
        fresh = logits[torch.as_tensor(rows_after, dtype=torch.long, device=dev)]
        if self.last_logits is None:
            self.last_logits = fresh
        else:
            has = torch.tensor([len(r) > 0 for r in rows], device=dev)
            self.last_logits = torch.where(has[:, None], fresh, self.last_logits)
        return self.last_logits

    def select(self, rows: Sequence[int]) -> None:
        """Keep (and repeat) the given rows, in that order: row j becomes a copy of old row ``rows[j]``, its KV cache
        included (shared prompts are prefilled once and copied, :meth:`Engine.start`). Only the map to the physical
        rows changes here; the next forward reorders the cache."""
        self.physical = [self.physical[i] for i in rows]
        if self.last_logits is not None:
            self.last_logits = self.last_logits[
                torch.as_tensor(list(rows), dtype=torch.long, device=self.engine.device)
            ]
        self.tokens = [list(self.tokens[i]) for i in rows]
        self.batch = len(rows)


Generators = torch.Generator | Sequence[torch.Generator] | None
"""The random source of a sampling call: one generator for the whole batch (the default; None = torch's global
one), or one per row, so that what a row draws does not depend on the other rows."""


def on_device(generator: Generators, device: torch.device) -> Generators:
    """The random source of a sampling call whose probabilities live on ``device``: ``generator`` itself where it lives
    there (so a CPU run draws exactly what it always drew); else, per given generator, a new one on ``device`` seeded
    with one draw of it. The callers' generators stay on the CPU, where checkpoints save them, and a GPU run is still
    reproducible from its seed: each call takes the next seed of the caller's stream."""
    if generator is None:
        return None  # torch's global generator of the device, seeded by torch.manual_seed

    def moved(g: torch.Generator) -> torch.Generator:
        if g.device == device:
            return g
        seed = int(torch.randint(0, 2**63 - 1, (1,), generator=g, device=g.device))
        return torch.Generator(device=device).manual_seed(seed)

    return moved(generator) if isinstance(generator, torch.Generator) else [moved(g) for g in generator]


def _draw(probs: torch.Tensor, generator: Generators) -> torch.Tensor:
    """One token id per row from ``probs`` (batch, vocab)."""
    if generator is None or isinstance(generator, torch.Generator):
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return torch.cat([torch.multinomial(p[None], 1, generator=g)[0] for p, g in zip(probs, generator, strict=True)])


class Engine:
    """Wraps a causal LM for incremental, cache-continuing batched sampling.

    ``backend`` names a generation backend (:mod:`sesa_cli.rollout.backends`): ``hf`` runs the model's own forward,
    ``llama`` the same operations without the module plumbing, ``auto`` the latter wherever it applies.
    ``stop_fn(ids)``, if given, is asked after every sampled token with the row's completion so far and ends the row
    when it returns True, in addition to the stop ids (see sesa_cli.rollout.stops)."""

    def __init__(
        self,
        model: PreTrainedModel,
        pad_id: int,
        dtype: str = "float32",
        stop_fn: Callable[[list[int]], bool] | None = None,
        backend: str = "auto",
    ) -> None:
        self.model = model
        self.backend = make_backend(model, backend)
        self.shape = compute.model_shape(model)  # what a forward costs (sesa_cli.compute: a run's compute on record)
        self.pad_id = pad_id
        self.device = next(model.parameters()).device
        self.dtype = dtype
        self.stop_fn = stop_fn

    def autocast(self) -> torch.autocast:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.dtype == "bfloat16")

    def completion_logps(
        self, prompt: Sequence[int], completions: Sequence[Sequence[int]], temperature: float
    ) -> torch.Tensor:
        """(rows,) float64 log pi(y | prompt) of each completion y, teacher-forced at ``temperature`` with the banned
        ids masked as at sampling (what :func:`sesa_cli.rollout.scoring.completion_logps` sums over a completion).
        The completions are fed one token a forward on one session, so the prompt runs once and completions that
        begin alike share their rows until they part (:class:`Session`): a forward pays each distinct prefix once
        (the path task's 512 spellings of 17 tokens are 3,149 distinct prefixes, not 8,722 tokens). No gradient."""
        rows = len(completions)
        total = torch.zeros(rows, dtype=torch.float64, device="cpu")  # numbers the caller reads: on the host
        live = [i for i in range(rows) if completions[i]]  # logical row j of the session scores completions[live[j]]
        if not live:
            return total
        session = self.start([list(prompt)] * len(live))
        assert session.last_logits is not None
        banned = banned_mask(self.model, session.last_logits.shape[-1], self.device)
        depth = 0
        while True:  # the session's forwards run without gradient (Session._forward)
            assert session.last_logits is not None
            logp_all, _ = masked_logps(session.last_logits / temperature, banned)
            tokens = torch.as_tensor([completions[i][depth] for i in live], device=self.device)
            total[live] += logp_all.gather(1, tokens[:, None])[:, 0].double().cpu()
            going = [j for j, i in enumerate(live) if len(completions[i]) > depth + 1]
            if not going:
                return total
            if len(going) < len(live):
                session.select(going)
                live = [live[j] for j in going]
            session.extend([[completions[i][depth]] for i in live])
            depth += 1

    def start(self, prompts: Sequence[Sequence[int]]) -> Session:
        """A new session whose rows begin with ``prompts`` (each non-empty, e.g. starting with BOS). Identical
        prompts (the G rows of a group, the m solutions of a sketch) are prefilled once and their cache copied."""
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        first: dict[tuple[int, ...], int] = {}
        rows = [first.setdefault(tuple(p), len(first)) for p in prompts]
        session = Session(self, len(first))
        session.extend([list(p) for p in first])
        if len(first) < len(prompts):
            session.select(rows)
        return session
