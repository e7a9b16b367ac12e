"""The exact plain-prompt policy of a deterministic agent task: every episode the policy can play, with its probability.

Where an environment is deterministic and one turn's valid replies can be listed
(:meth:`sesa_cli.tasks.agent.AgentTask.turn_responses`: non-slippery FrozenLake and Sokoban in the compact style; the
rule of a valid reply is sesa_cli.tasks.layouts's, and the list is every reply it accepts),
the probability that one plain-prompt episode plays the action sequence a is

    π(a | x) = Σ over the response sequences r_1..r_T whose play executes a of  Π_t π(r_t | x, r_1, o_1, ..., r_{t-1},
               o_{t-1})

where o_t is the environment's feedback to r_t (teacher-forced, as the rollout runner feeds it) and r_t runs over
every spelling of a response in tokens (``Policy.spellings``: the tiny model can write ``DR|`` as ``DR`` ``|`` or as
``D`` ``R`` ``|``, and the later turns see whichever it wrote). :func:`episode_tree`
walks that tree token by token with one KV cache per live branch (sesa_cli.rollout.engine.Session): at every node the
model's next-token distribution (at the sampling temperature, the never-sampled ids masked exactly as the engine masks
them) is split over the tokens that continue a well-formed response; a completed response is played on the episode's
environment and its feedback fed; an episode that ends contributes its probability to its solution key
(``Score.key``: what the episode did, the states it went through, ``task.solution_key``; action sequences that
differ by moves that change nothing share a key, and their probabilities add up). The rest of the mass is accounted for, never dropped silently:

* ``other``: mass on text outside the listed responses (a malformed or over-long reply, text after its actions, a
  reply cut at max_new_tokens): an invalid reply, which ends its episode unsolved, so this mass is failure and
  never hides a win;
* ``pruned``: branches whose probability fell below ``min_prob``, and the least probable ones beyond
  ``max_branches`` live at once (not expanded further). A near-uniform policy (the warm-started base: 20 responses
  a turn, 5 turns) spreads its mass over millions of episodes, so most of it is pruned there, and the cap bounds
  the cost (rows x context in the KV cache); a trained policy concentrates and prunes little.

So Σ_a π(a | x) + other + pruned = 1 (up to float rounding). top_p/top_k truncation is not applied (the defaults
disable it), as in sesa_cli.exact.ExactPolicy. The module imports torch; the exact policy metrics import it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from sesa_cli.models.special import banned_mask, masked_logps
from sesa_cli.rollout.engine import Engine
from sesa_cli.tasks.agent import AgentTask


@dataclass
class EpisodeTree:
    """The outcome of :func:`episode_tree` on one instance."""

    probs: dict[str, float] = field(default_factory=dict)
    """Solution key (``Score.key``: the episode's route) -> probability that one plain-prompt episode, all of whose
    responses are listed ones, executes it (summed over the response texts that do)."""
    success: dict[str, bool] = field(default_factory=dict)
    """Solution key -> whether that episode solves the instance."""
    other: float = 0.0
    """Mass on responses outside ``AgentTask.turn_responses`` (not enumerated)."""
    pruned: float = 0.0
    """Mass of the branches cut below ``min_prob``."""
    nodes: int = 0
    """Forward passes' rows: the tree's size, for cost reports."""


@dataclass
class _Branch:
    logp: float
    responses: tuple[str, ...]
    """The completed responses of this episode so far."""
    prefix: tuple[int, ...]
    """Token ids of the current response so far."""


class _Trie:
    """The token-id sequences of one turn's listed responses (every spelling of each, ``Policy.spellings``): which
    tokens continue a prefix, and which end one."""

    def __init__(self, sequences: dict[tuple[int, ...], str]) -> None:
        self.complete = sequences
        self.children: dict[tuple[int, ...], list[int]] = {}
        for seq in sequences:
            for j in range(len(seq)):
                kids = self.children.setdefault(seq[:j], [])
                if seq[j] not in kids:
                    kids.append(seq[j])


def episode_tree(
    task: AgentTask,
    policy: Any,
    engine: Engine,
    prompt_ids: Sequence[int],
    inst: Any,
    temperature: float,
    min_prob: float = 1e-4,
    max_branches: int = 256,
    responses: Sequence[str] | None = None,
) -> EpisodeTree:
    """Every episode of ``inst`` under the plain prompt ``prompt_ids``, to probability ``min_prob`` and with at most
    ``max_branches`` branches live at once (0 = no cap).

    ``policy`` encodes text (``policy.encode``, as the rollout runner encodes feedback) and spells the listed
    responses (``policy.spellings``: a response the model can spell in several ways is reached by each); ``engine``
    runs the model;
    ``responses`` overrides the listed responses (default ``task.turn_responses()``, which must not be None); a
    listed response with no spelling of at most ``task.cfg.max_new_tokens`` tokens is left out (the engine cuts it
    before its stop: its mass is ``other``). Raises ValueError when the task cannot list its responses.
    """
    listed = task.turn_responses() if responses is None else list(responses)
    if listed is None:
        raise ValueError(f"task {task.name!r}: its responses cannot be listed (see AgentTask.turn_responses)")
    sequences: dict[tuple[int, ...], str] = {}
    for text in listed:
        for spelling in policy.spellings(text):
            ids = tuple(spelling)
            if not ids or len(ids) > task.cfg.max_new_tokens:
                continue  # a spelling the engine would cut before its stop: its mass is "other"
            sequences[ids] = text
    trie = _Trie(sequences)
    out = EpisodeTree()
    session = engine.start([list(prompt_ids)])
    branches = [_Branch(0.0, (), ())]
    banned: torch.Tensor | None = None
    log_min = math.log(min_prob) if min_prob > 0 else -math.inf
    while branches:
        assert session.last_logits is not None
        logits = session.last_logits
        if banned is None:
            banned = banned_mask(engine.model, logits.shape[-1], logits.device)
        scaled = logits if temperature == 0 else logits / temperature
        logps = masked_logps(scaled, banned)[0].double().cpu()  # (rows, vocab)
        out.nodes += len(branches)
        parents: list[int] = []
        feeds: list[list[int]] = []
        children: list[_Branch] = []
        for i, branch in enumerate(branches):
            kept = 0.0
            for tok in trie.children.get(branch.prefix, []):
                lp = branch.logp + float(logps[i, tok])
                kept += math.exp(lp)
                if lp < log_min:
                    out.pruned += math.exp(lp)
                    continue
                prefix = (*branch.prefix, tok)
                if prefix not in trie.complete:
                    parents.append(i)
                    feeds.append([tok])
                    children.append(_Branch(lp, branch.responses, prefix))
                    continue
                played = (*branch.responses, trie.complete[prefix])
                env = task.make_env(inst)
                turn = None
                for text in played:
                    turn = env.step(text)
                assert turn is not None
                if turn.done:
                    score = env.score()
                    key = score.key or ""
                    out.probs[key] = out.probs.get(key, 0.0) + math.exp(lp)
                    out.success[key] = score.success
                    continue
                parents.append(i)
                feeds.append([tok, *policy.encode(turn.feedback)])
                children.append(_Branch(lp, played, ()))
            out.other += max(0.0, math.exp(branch.logp) - kept)
        if not children:
            break
        if max_branches and len(children) > max_branches:
            order = sorted(range(len(children)), key=lambda c: -children[c].logp)
            out.pruned += sum(math.exp(children[c].logp) for c in order[max_branches:])
            keep = sorted(order[:max_branches])
            parents, feeds, children = (
                [parents[c] for c in keep],
                [feeds[c] for c in keep],
                [children[c] for c in keep],
            )
        session.select(parents)
        session.extend(feeds)
        branches = children
    return out
