"""The published exploration methods, each against its paper's formula on a group whose numbers are worked out by hand
here (not by calling the code under test twice), then each trained two steps from the CLI and on every agent task."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch

from sesa_cli.advantages import Outcomes
from sesa_cli.algos import compute_advantages, compute_loss
from sesa_cli.collapse import input_dependence
from sesa_cli.config import AlgoConfig, ConfigError
from sesa_cli.losses import build_loss
from sesa_cli.losses.forking import high_entropy_mask
from sesa_cli.rollout.filters.reward_variance import top_p_groups
from sesa_cli.rollout.rollouts import Completion, Hinted, Plain, Rollout
from sesa_cli.tasks.base import Score
from sesa_cli.terms import TERMS, TermContext
from sesa_cli.terms.unlikeliness import UnlikelinessSettings
from tests.conftest import COUNTDOWN, FROZENLAKE, SOKOBAN, run_cli


def _rollout(group: int, reward: float, key: str | None, logps=(-1.0,), prompt=(1, 2)) -> Rollout:
    comp = Completion([5] * len(logps), list(logps), [0.0] * len(logps), True)
    return Rollout(group, None, list(prompt), list(prompt), comp, key or "?", Score(reward, reward >= 1, key))


_CONTEXT = TermContext(task=None, encode=lambda s: [], gather=lambda xs: xs)  # type: ignore[arg-type]


def _term(name: str, scale: float):
    """The term at ``scale``: its first setting (``coef`` of a loss term, the bonus term's own scale)."""
    return TERMS[name](TERMS[name].Settings(scale), _CONTEXT)


def _adv(name: str, rewards, adv_eps: float = 1e-6, on_policy=None, **settings) -> torch.Tensor:
    """The advantages of estimator ``name`` with ``settings`` on ``rewards`` (a tensor or Outcomes)."""
    return compute_advantages(rewards, AlgoConfig(advantage={"name": name, **settings}, adv_eps=adv_eps), on_policy)


# ------------------------------------------------------------------------------------- Pass@k (arXiv 2508.10751)
def test_passk_is_the_papers_closed_form_on_a_binary_group() -> None:
    # N = 6 rollouts, 2 correct (N_neg = 4), k = 3: R = 1 - C(4,3)/C(6,3) = 1 - 4/20 = 0.8, sigma = sqrt(0.8 * 0.2)
    # = 0.4; A_pos = (1 - 0.8) / 0.4 = 0.5; A_neg = (1 - 0.8 - C(3,2)/C(5,2)) / 0.4 = (0.2 - 0.3) / 0.4 = -0.25
    out = _adv("passk", torch.tensor([[1.0, 0, 0, 1, 0, 0]]), adv_eps=0.0, k=3)
    assert out.tolist()[0] == pytest.approx([0.5, -0.25, -0.25, 0.5, -0.25, -0.25], abs=1e-12)


def test_passk_edges_no_signal_where_every_subset_scores_alike_and_k_1_is_grpo_with_population_std() -> None:
    # N_neg = 2 < k = 3: every 3-subset holds a correct rollout, pass@3 = 1 everywhere: no contrast
    assert _adv("passk", torch.tensor([[1.0, 1, 0, 0]]), k=3).abs().max() < 1e-9
    assert _adv("passk", torch.tensor([[0.0, 0, 0, 0]]), k=3).abs().max() < 1e-9  # none correct
    # k = 1: (r - 1/4) / sqrt(3/16): 3/4 / (sqrt(3)/4) = sqrt(3), -1/4 / (sqrt(3)/4) = -1/sqrt(3)
    out = _adv("passk", torch.tensor([[1.0, 0, 0, 0]]), adv_eps=0.0, k=1)
    assert out.tolist()[0] == pytest.approx([math.sqrt(3)] + [-1 / math.sqrt(3)] * 3, rel=1e-6)  # float32 out
    with pytest.raises(ValueError, match=r"algo\.advantage\.k=5"):
        _adv("passk", torch.tensor([[1.0, 0, 0, 0]]), k=5)
    with pytest.raises(ValueError, match="on-policy"):
        _adv("passk", torch.ones(1, 4), on_policy=torch.ones(1, 4, dtype=torch.bool), k=3)
    with pytest.raises(ConfigError, match="on_policy_baseline"):
        compute_advantages(torch.ones(1, 4), AlgoConfig(advantage="passk", off_policy="on_policy_baseline"))


def test_passk_on_graded_rewards_is_the_subset_maximum_counted_over_every_subset() -> None:
    # the generalisation the module documents (max@k), checked by enumerating the C(5, 2) = 10 subsets
    rewards, k = [0.1, 0.5, 0.0, 1.0, 0.5], 2
    subsets = list(itertools.combinations(range(5), k))
    best = [max(rewards[i] for i in s) for s in subsets]
    mean = sum(best) / len(best)
    std = math.sqrt(sum((b - mean) ** 2 for b in best) / len(best))
    expected = [(sum(b for s, b in zip(subsets, best, strict=True) if i in s) / 4 - mean) / std for i in range(5)]
    out = _adv("passk", torch.tensor([rewards]), adv_eps=0.0, k=k)
    assert out.tolist()[0] == pytest.approx(expected, rel=1e-6)  # in the rewards' float32


def test_an_invalid_reply_among_valid_failures_gets_a_negative_advantage_under_passk() -> None:
    # The hand-worked group of a lost seed (FrozenLake 4x4, k = 2, its step 2): 8 rollouts, one invalid reply
    # (reward = format penalty -0.1) among valid non-wins (0). Under max@2 every 2-subset scores 0 (a valid 0 is
    # always its best member) and the penalty never acted; with the penalty per sample, R(S) = max(r - f) + mean(f):
    # the invalid row's subsets score -0.05, the others -0.1/7/2 on average. By hand: E[R] = -0.1/8 = -0.0125;
    # E[R | invalid in S] = -0.05; var = (sigma_f^2 / 2)(6/7), sigma_f^2 = 0.01/8 - 0.0125^2 = 0.00109375, so
    # sd = sqrt(0.00046875) = 0.0216506; A_invalid = (-0.05 + 0.0125) / 0.0216506 = -1.7320508 (= -sqrt(3)),
    # A_valid = (-0.1/14 + 0.0125) / 0.0216506 = 0.2474358 (= sqrt(3)/7: the eight sum to 0).
    rewards = torch.tensor([[-0.1, 0, 0, 0, 0, 0, 0, 0]])
    penalties = torch.tensor([[-0.1, 0, 0, 0, 0, 0, 0, 0]])
    cfg = AlgoConfig(advantage={"name": "passk", "k": 2}, adv_eps=0.0)
    assert _adv("passk", rewards, k=2).abs().max() < 1e-9  # the penalty inside max@2: hidden
    out = compute_advantages(rewards, cfg, penalties=penalties)
    assert out.tolist()[0] == pytest.approx([-math.sqrt(3)] + [math.sqrt(3) / 7] * 7, rel=1e-6)
    assert out[0, 0] < 0
    # GRPO reads the rewards as given: (-0.1 + 0.0125) / unbiased std, the squared deviations summing to 0.00875
    grpo = compute_advantages(rewards, AlgoConfig(advantage="grpo", adv_eps=0.0), penalties=penalties)
    assert grpo[0, 0] == pytest.approx(-0.0875 / math.sqrt(0.00875 / 7), rel=1e-5)
    verl = compute_advantages(rewards, AlgoConfig(advantage="grpo_passk"), penalties=penalties)
    assert verl[0, 0] < 0  # no best-of-group gap; GRPO's advantage of the penalty
    assert verl[0, 1:].min() > 0


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_passk_with_penalties_is_the_subset_reward_counted_over_every_subset(k: int) -> None:
    # R(S) = max_{i in S}(r_i) + mean_{i in S} f_i over the C(6, k) subsets, r the rewards without the penalties
    r = [0.1, 1.0, 0.0, 0.1, 1.0, 0.0]
    f = [0.0, 0.0, -0.1, 0.0, 0.0, -0.3]
    subsets = list(itertools.combinations(range(6), k))
    value = [max(r[i] for i in s) + sum(f[i] for i in s) / k for s in subsets]
    mean = sum(value) / len(value)
    std = math.sqrt(sum((v - mean) ** 2 for v in value) / len(value))
    holding = [[v for s, v in zip(subsets, value, strict=True) if i in s] for i in range(6)]
    expected = [(sum(h) / len(h) - mean) / std for h in holding]
    total = torch.tensor([[a + b for a, b in zip(r, f, strict=True)]], dtype=torch.float64)
    out = compute_advantages(
        total,
        AlgoConfig(advantage={"name": "passk", "k": k}, adv_eps=0.0),
        penalties=torch.tensor([f], dtype=torch.float64),
    )
    assert out.tolist()[0] == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_grpo_passk_gives_only_the_best_rollout_the_gap_to_the_second() -> None:
    # verl: the best (1.0) gets (1.0 - 0.5) / unbiased std; std of [0, 1, 0.5, 0.2]: mean 0.425, squared deviations
    # 0.180625 + 0.330625 + 0.005625 + 0.050625 = 0.5675, / 3, sqrt
    out = _adv("grpo_passk", torch.tensor([[0.0, 1.0, 0.5, 0.2]]), adv_eps=0.0)
    assert out.tolist()[0] == pytest.approx([0.0, 0.5 / math.sqrt(0.5675 / 3), 0.0, 0.0], rel=1e-6)  # float32
    tie = _adv("grpo_passk", torch.tensor([[1.0, 0.0, 1.0, 0.0]]))
    assert tie.abs().max() == 0  # two best: the gap is 0


# ------------------------------------------------------------------------------------------ PKPO (2505.15201)
def test_pkpo_credits_what_a_rollout_adds_to_the_best_of_each_k_subset() -> None:
    # n = 4, k = 2, rewards [1, 0, 0, 1]: the 3 pairs holding a correct rollout: with the other correct one it adds
    # max{1, 1} - max{1} = 0, with either wrong one 1 - 0 = 1; mean 2/3, times k = 4/3 (the paper's s^(loo-1) x n).
    # A wrong rollout never changes a pair's best: 0.
    out = _adv("pkpo", torch.tensor([[1.0, 0, 0, 1]]), k=2)
    assert out.tolist()[0] == pytest.approx([4 / 3, 0, 0, 4 / 3], rel=1e-6)
    # graded, with a format penalty: r = [1, 0.1, 0, -0.1], f = [0, 0, 0, -0.1], so r - f = [1, 0.1, 0, 0], k = 2.
    # Row 1 (0.1) in its 3 pairs adds: with row 0, 1 - 1 = 0; with row 2 or row 3, 0.1 - 0 = 0.1: mean 0.2/3, x2.
    # Row 0 (1) adds 1 - 0.1 = 0.9 with row 1 and 1 - 0 = 1 with rows 2, 3: mean 2.9/3, x2 = 1.933333. Rows 2, 3
    # add 0. The penalties: f_i - mean of the others' f: rows 0-2 get 0 + 0.1/3, row 3 -0.1 - 0.
    rewards = Outcomes(torch.tensor([[1.0, 0.1, 0.0, -0.1]]), penalties=torch.tensor([[0.0, 0.0, 0.0, -0.1]]))
    out = _adv("pkpo", rewards, k=2)
    expected = [5.8 / 3 + 0.1 / 3, 0.4 / 3 + 0.1 / 3, 0.1 / 3, -0.1]
    assert out.tolist()[0] == pytest.approx(expected, rel=1e-6)
    # k = 1: no baseline (the subset without the rollout is empty): the reward itself, REINFORCE
    assert _adv("pkpo", torch.tensor([[1.0, 0, 0.5, 0]]), k=1).tolist()[0] == pytest.approx([1, 0, 0.5, 0])
    # k = n: only the best rollout gets its lead over the second best, times n: 4 x (1 - 0.5) for [1, 0, 0.5, 0]
    assert _adv("pkpo", torch.tensor([[1.0, 0, 0.5, 0]]), k=4).tolist()[0] == pytest.approx([2, 0, 0, 0])


# ----------------------------------------------------------------------------------------- MaxRL (2602.02710)
def test_maxrl_divides_the_centred_reward_by_the_group_mean() -> None:
    # one success in 4: mean 1/4, A = (1 - 1/4) / (1/4) = 3 = N/K - 1; failures (0 - 1/4) / (1/4) = -1.
    # two in 4: (1 - 1/2) / (1/2) = 1 and -1. GRPO would give both groups the same +-0.866 / 1.5 magnitudes by std.
    out = _adv("maxrl", torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 0, 0]]), adv_eps=0.0)
    assert out.flatten().tolist() == pytest.approx([3, -1, -1, -1, 1, 1, -1, -1])
    # no success, or no failure: every reward equal, no signal (adv_eps keeps 0 / 0 at 0)
    assert _adv("maxrl", torch.tensor([[0.0, 0, 0, 0], [1.0, 1, 1, 1]])).abs().max() == 0
    # a group's lowest reward stands for a failure: [1, 0, 0, -0.1] (an invalid reply at -0.1): mean 0.225, floor
    # -0.1, divisor 0.325: (1 - 0.225) / 0.325 = 2.384615, (0 - 0.225) / 0.325 = -0.692308, (-0.1 - 0.225) / 0.325 = -1
    out = _adv("maxrl", torch.tensor([[1.0, 0, 0, -0.1]]), adv_eps=0.0)
    assert out.tolist()[0] == pytest.approx([0.775 / 0.325, -0.225 / 0.325, -0.225 / 0.325, -1.0], rel=1e-6)


# ---------------------------------------------------------------------------------- W-REINFORCE (2506.01347)
def test_w_reinforce_pushes_failures_down_whole_and_successes_up_by_lambda() -> None:
    # the verifier's +-1 with the positive side weighted by lambda: success lambda, failure -1, no baseline (an
    # all-wrong group is pushed down whole); the graded reward is not read (0.1 is a well-formed wrong answer)
    outcomes = Outcomes(torch.tensor([[1.0, 0.1, 0.0, 1.0], [0.0, 0.0, 0.0, -0.1]]),
                        success=torch.tensor([[True, False, False, True], [False] * 4]))  # fmt: skip
    assert _adv("w_reinforce", outcomes).flatten().tolist() == pytest.approx([0.1, -1, -1, 0.1, -1, -1, -1, -1])
    assert _adv("w_reinforce", outcomes, positive_weight=0.0).tolist()[0] == [0.0, -1.0, -1.0, 0.0]  # NSR alone
    with pytest.raises(ConfigError, match=r"positive_weight=2\.0 must be in \[0, 1\]"):
        _adv("w_reinforce", outcomes, positive_weight=2.0)
    with pytest.raises(ValueError, match="success"):
        _adv("w_reinforce", torch.ones(1, 4))


# ------------------------------------------------------------------------------------- DARLING (2509.02534)
def test_darling_multiplies_each_reward_by_how_distinct_its_answer_is_then_takes_grpo() -> None:
    # keys [a, a, b, None], rewards [1, 1, 1, 0]: the share of the 3 others with another answer is 2/3, 2/3, 1, and
    # 1 for the invalid reply (no answer repeats it). r' = [2/3, 2/3, 1, 0], mean 7/12, deviations [1, 1, 5, -7]/12,
    # squares (1 + 1 + 25 + 49)/144 = 19/36, unbiased variance 19/108, std 0.4194352:
    # A = 1/12 / std = 0.1986799, 5/12 / std = 0.9933993, -7/12 / std = -1.3907590
    outcomes = Outcomes(torch.tensor([[1.0, 1, 1, 0]]), keys=[["a", "a", "b", None]])
    out = _adv("darling", outcomes, adv_eps=0.0)
    assert out.tolist()[0] == pytest.approx([0.1986799, 0.1986799, 0.9933993, -1.3907590], rel=1e-5)
    # the format penalty stays per sample: r = [1, -0.1, -0.1, 1], f = [0, -0.1, -0.1, 0], keys [a, None, None, a]:
    # (r - f) * div + f = [1 * 1/3, 0 - 0.1, 0 - 0.1, 1/3]: two repeats of one answer and two invalid replies.
    # mean 0.1166667, deviations +-0.2166667, squares 4 x 0.0469444 / 3, unbiased std 0.2501851: A = +-0.8660254
    outcomes = Outcomes(torch.tensor([[1.0, -0.1, -0.1, 1]]), penalties=torch.tensor([[0.0, -0.1, -0.1, 0]]),
                        keys=[["a", None, None, "a"]])  # fmt: skip
    out = _adv("darling", outcomes, adv_eps=0.0)
    assert out.tolist()[0] == pytest.approx([0.8660254, -0.8660254, -0.8660254, 0.8660254], rel=1e-5)
    # every answer the same: div 0, r' = 0 for all: no signal; all distinct: GRPO exactly
    same = Outcomes(torch.tensor([[1.0, 1, 0, 0]]), keys=[["a", "a", "a", "a"]])
    assert _adv("darling", same).abs().max() == 0
    apart = Outcomes(torch.tensor([[1.0, 1, 0, 0]]), keys=[["a", "b", "c", "d"]])
    assert torch.equal(_adv("darling", apart), _adv("grpo", torch.tensor([[1.0, 1, 0, 0]])))


# ----------------------------------------------------------------------- forking tokens (arXiv 2506.01939, TRL)
def test_forking_tokens_keeps_the_gradient_of_the_top_rho_entropy_tokens_only() -> None:
    # 10 valid tokens of entropies 0..9 (and 2 padded): the 0.8 quantile is 7.2, so rho = 0.2 keeps 8 and 9
    entropies = torch.tensor([[0.0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 100, 100]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    kept = high_entropy_mask(entropies, mask, 0.2)
    assert kept.nonzero().tolist() == [[1, 2], [1, 3]]
    logps = torch.full((2, 6), -1.0, requires_grad=True)
    adv = torch.tensor([[1.0] * 6, [-1.0] * 6])
    forking = build_loss(AlgoConfig(loss={"name": "forking_tokens", "rho": 0.2}))
    pg, metrics = forking(logps, logps.detach(), adv, mask, entropies=entropies)
    full, _ = build_loss(AlgoConfig())(logps, logps.detach(), adv, mask)
    assert torch.equal(pg[kept], full[kept])
    assert pg[~kept].abs().max() == 0
    assert float(metrics["forking_frac"]) == pytest.approx(0.2)
    # rho = 1 is every token: ppo_clip exactly, through the whole objective
    every = AlgoConfig(loss={"name": "forking_tokens", "rho": 1.0})
    a, _ = compute_loss(logps, logps.detach(), adv[:, 0], mask, every, entropies=entropies)
    b, _ = compute_loss(logps, logps.detach(), adv[:, 0], mask, AlgoConfig())
    assert torch.equal(a, b)


# ------------------------------------------------------------- outcome-based exploration (arXiv 2509.06941)
def test_outcome_ucb_bonus_shrinks_with_the_times_an_answer_was_seen_and_survives_a_checkpoint() -> None:
    term = _term("outcome_ucb", 0.5)
    first = [_rollout(0, 0, "a"), _rollout(0, 0, "a"), _rollout(0, 1, "b"), _rollout(0, 0, None)]
    assert term.rewards(first) == [0.5, 0.5, 0.5, 0.0]  # nothing seen before: c / sqrt(1)
    term.observe(first, [False] * 4)
    second = [_rollout(0, 0, "a"), _rollout(0, 1, "b"), _rollout(0, 0, "c"), _rollout(1, 0, "a", prompt=(3,))]
    expected = [0.5 / math.sqrt(3), 0.5 / math.sqrt(2), 0.5, 0.5]  # a seen twice, b once, c never; another prompt
    assert term.rewards(second) == pytest.approx(expected, abs=1e-12)
    revived = _term("outcome_ucb", 0.5)
    revived.load_state_dict(json.loads(json.dumps(term.state_dict())))
    assert revived.rewards(second) == term.rewards(second)


def test_outcome_batch_penalises_answers_repeated_within_their_group() -> None:
    rows = [_rollout(0, 1, "a"), _rollout(0, 1, "a"), _rollout(0, 1, "a"), _rollout(0, 0, "b")]
    rows += [_rollout(1, 0, "a"), _rollout(1, 0, None), _rollout(1, 0, None), _rollout(1, 0, "c")]
    # group 0: each "a" has 2 others alike of G = 4: -c * 2/4; group 1: no repeats (invalid replies are no answer)
    assert _term("outcome_batch", 0.4).rewards(rows) == pytest.approx([-0.2, -0.2, -0.2, 0, 0, 0, 0, 0])


# ------------------------------------------------------------------------ unlikeliness (arXiv 2506.02355)
def test_unlikeliness_scales_each_reward_by_its_likelihood_rank() -> None:
    # mean token log-probs -1, -3 (two tokens -2, -4), -0.5, -2; least likely first: row 1 (rank 0), row 3 (1),
    # row 0 (2), row 2 (3). r' = r (1 - 0.25 rank / 4): row 0 1 - 0.125, row 1 1, row 2 reward 0, row 3 1 - 0.0625
    rows = [_rollout(0, 1, "a", (-1.0,)), _rollout(0, 1, "b", (-2.0, -4.0)), _rollout(0, 0, "c", (-0.5,)),
            _rollout(0, 1, "d", (-2.0,))]  # fmt: skip
    assert _term("unlikeliness", 0.25).rewards(rows) == pytest.approx([-0.125, 0.0, 0.0, -0.0625])


def test_unlikeliness_on_negative_rewards_scales_them_or_keeps_them_as_set() -> None:
    # a group of failures at -1 and one success at +10, least likely first: rows 1, 3, 0, 2 (ranks 0-3 of G = 4).
    # negatives=scale (the authors' code): a failure's reward -1 becomes -(1 - 0.25 rank / 4), so the likeliest
    # failure (row 0, rank 2) gains 0.125 over the least likely (row 1): the term pays sharpening.
    # negatives=keep: the failures stay at -1; only the success (row 2, rank 3) is ranked down by 10 * 0.1875.
    rows = [_rollout(0, -1, None, (-1.0,)), _rollout(0, -1, None, (-3.0,)), _rollout(0, 10, "a", (-0.5,)),
            _rollout(0, -1, None, (-2.0,))]  # fmt: skip
    assert _term("unlikeliness", 0.25).rewards(rows) == pytest.approx([0.125, 0.0, -1.875, 0.0625])
    keep = TERMS["unlikeliness"](UnlikelinessSettings(beta=0.25, negatives="keep"), _CONTEXT)
    assert keep.rewards(rows) == pytest.approx([0.0, 0.0, -1.875, 0.0])
    with pytest.raises(ConfigError, match="negatives='drop' is not valid"):
        UnlikelinessSettings(beta=0.25, negatives="drop")


# ------------------------------------------------------------------------------- RAGEN-2: filter, diagnostic
def test_reward_variance_filter_keeps_the_top_p_share_of_the_spread() -> None:
    # unbiased stds: [0,1,0,1] sqrt(1/3) = 0.577, [0,0,0,1] 0.5, the others 0 (dropped: include_zero false); the
    # target 0.9 * 1.077 - 0.01 = 0.959 needs both; 0.5 * 1.077 - 0.01 = 0.529 is reached by the first alone
    groups = [[0.0, 0, 0, 0], [0.0, 1, 0, 1], [0.0, 0, 0, 1], [1.0, 1, 1, 1]]
    assert top_p_groups(groups, 0.9, False, 0.01) == [False, True, True, False]
    assert top_p_groups(groups, 0.5, False, 0.01) == [False, True, False, False]
    assert top_p_groups(groups, 1.0, True, 0.01) == [True] * 4
    assert top_p_groups([[0.0, 0.0], [1.0, 1.0]], 0.9, False, 0.01) == [True, True]  # none kept: train on all


def test_answer_mutual_information_tells_template_collapse_from_input_driven_answers() -> None:
    driven = input_dependence(["x", "x", "y", "y"], ["a", "a", "b", "b"])  # each prompt its own answer
    assert driven["answer_mi"] == pytest.approx(math.log(2))
    assert driven["answer_cond_entropy"] == 0
    collapsed = input_dependence(["x", "x", "y", "y"], ["a", "b", "a", "b"])  # varied, but the same for both
    assert collapsed["answer_mi"] == pytest.approx(0, abs=1e-12)
    assert collapsed["answer_cond_entropy"] == pytest.approx(math.log(2))
    assert collapsed["answer_mi_max"] == pytest.approx(math.log(2))
    assert input_dependence(["x", "x"], ["a", "b"]) == {}  # one prompt: undefined


# ----------------------------------------------------------------------------------------- LTE (2510.26109)
def test_lte_hints_a_none_pass_group_with_its_distinct_wrong_answers(path_setup) -> None:
    from dataclasses import replace

    from sesa_cli.rollout.samplers import LTESampler

    cfg, task, policy = path_setup
    sampler = LTESampler(replace(cfg.sampler, group_size=6, parallel_rows=3), task, policy)
    generator = torch.Generator().manual_seed(0)
    instances = [task.instance("train", i) for i in range(4)]
    between = policy.encode(task.between) if task.between else []
    stop = policy.encode(task.stop) if task.stop else []
    hinted = 0
    for _ in range(3):
        for group in sampler.sample(instances, generator):
            first, rest = group[:3], group[3:]
            assert len(rest) == 3
            assert all(isinstance(r.origin, Plain) for r in first)
            wrong: dict[str, Rollout] = {}
            for r in first:
                if r.score.key is not None and not r.score.success:
                    wrong.setdefault(r.score.key, r)
            if any(r.score.success for r in first) or not wrong:
                assert all(isinstance(r.origin, Plain) and r.context_ids == r.prompt_ids for r in rest)
                continue
            context = list(first[0].prompt_ids)
            for r in wrong.values():
                context += r.completion.ids + ([] if r.completion.stopped else stop) + between
            for r in rest:
                assert isinstance(r.origin, Hinted)
                assert r.context_ids == context
                assert r.origin.conditioned_on == tuple(w.text for w in wrong.values())
            hinted += 1
    assert hinted > 0  # the tiny base fails often enough for some group to be hinted


# ----------------------------------------------------------------------------- each one from the command line
QUICK = ["train.steps=2", "train.batch_size=2", "sampler.group_size=4", "eval.samples=4", "eval.instances=2",
         "train.checkpoint_every=2", "train.sample_every=0"]  # fmt: skip
# The papers' methods on i.i.d. sampling (the path task's default sampler is SESA's), LTE with its own sampler.
METHODS = {
    "passk": (["sampler=parallel", "algo=passk", "algo.advantage.k=2"], None),
    "pkpo": (["sampler=parallel", "algo=pkpo", "algo.advantage.k=2"], None),
    "maxrl": (["sampler=parallel", "algo=maxrl"], None),
    "w_reinforce": (["sampler=parallel", "algo=w_reinforce"], None),
    "darling": (["sampler=parallel", "algo=darling"], None),
    "grpo_passk": (["sampler=parallel", "algo=grpo_passk"], None),
    "forking_tokens": (["sampler=parallel", "algo=forking_tokens"], "loss/forking_frac"),
    "outcome_bonus": (["sampler=parallel", "algo=outcome_bonus"], None),
    "unlikeliness": (["sampler=parallel", "algo=unlikeliness"], None),
    "snr_filter": (["sampler=parallel", "algo=snr_filter"], "train/kept_groups"),
    "clip_cov": (["sampler=parallel", "algo=clip_cov"], "loss/clip_cov_frac"),
    "kl_cov": (["sampler=parallel", "algo=kl_cov"], "loss/kl_cov_frac"),
    "lte": (["sampler=lte", "algo.off_policy=weight_negatives"], "loss/off_policy_frac"),
}


def _assert_trained(run: Path, metric: str | None) -> None:
    """Both steps ran; a step whose batch carries no policy-gradient signal takes no optimizer step (Learner.update)
    and logs no loss; every other step computed the method's finite loss, and some step did. Which step has a
    signal depends on the draws, so on the CPU's kernels: the first step of a run may be all failures alike."""
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "rollout/reward_mean" in r]
    assert len(steps) == 2
    trained = [r for r in steps if r["optim/no_signal"] == 0]
    assert trained, "no step of the run had a non-zero advantage"
    assert all(math.isfinite(r["loss/total"]) for r in trained)
    assert not any("loss/total" in r for r in steps if r["optim/no_signal"] == 1)
    if metric:
        assert all(metric in r for r in (trained if metric.startswith("loss/") else steps))  # loss/*: the update's


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_method_trains_two_steps_from_the_cli(name: str, tiny_overrides, tmp_path: Path, monkeypatch) -> None:
    extra, metric = METHODS[name]
    run = tmp_path / "run"
    assert run_cli(["train", *tiny_overrides, *QUICK, *extra, f"hydra.run.dir={run}"], monkeypatch) == 0
    _assert_trained(run, metric)
    state = json.loads(next(run.glob("checkpoints/step_*/trainer_state.json")).read_text())
    if name == "outcome_bonus":  # the answers counted in the two steps ride in the checkpoint: 2 x 2 x 4 rollouts
        assert sum(n for _, _, n in state["terms"]["outcome_ucb"]) <= 16
        assert state["terms"]["outcome_ucb"]


@pytest.mark.parametrize("task", ["frozenlake", "countdown", "sokoban"])
@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_method_trains_on_the_agent_tasks_of_the_head_to_head(
    name: str, task: str, cache_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """Claims IX-XII run the methods on FrozenLake (4x4 and 5x5: one task), Countdown and Sokoban: each trains there
    too, its multi-turn episodes (FrozenLake, Sokoban) and its answers graded by value (Countdown) included."""
    extra, metric = METHODS[name]
    base = {"frozenlake": FROZENLAKE, "countdown": COUNTDOWN, "sokoban": SOKOBAN}[task]
    run = tmp_path / "run"
    # the agent recipes' sampler.parallel_rows=4 (of 8) is the chain samplers' alone: i.i.d. sampling ignores it, and
    # LTE's hinted rows need a group of more than 4
    rows = ["sampler.parallel_rows=2"] if "sampler=lte" in extra else []
    # at temperature 1.5 some replies are invalid, so a group's rewards differ (the format penalty) and a step has a
    # policy-gradient signal to train on; at the base's own temperature a 2 x 4 batch is often all failures alike
    hot = ["sampler.temperature=1.5"]
    argv = ["train", *base, f"model.cache_dir={cache_dir}", *QUICK, *rows, *hot, *extra, f"hydra.run.dir={run}"]
    assert run_cli(argv, monkeypatch) == 0
    _assert_trained(run, metric)


def test_help_lists_every_method(capsys, monkeypatch) -> None:
    assert run_cli(["train", "--help", "algo"], monkeypatch) == 0
    algo = capsys.readouterr().out
    for name in ("algo.advantage=passk", "algo.advantage=grpo_passk", "algo.loss=forking_tokens", "algo.advantage.k=4",
                 "algo.loss.rho=0.2", "algo.terms.outcome_ucb.bonus", "algo.terms.outcome_batch.penalty",
                 "algo.terms.unlikeliness.beta", "algo.advantage=w_reinforce", "algo.advantage.positive_weight=0.1",
                 "algo.advantage=darling", "algo.advantage=maxrl", "algo.advantage=pkpo"):  # fmt: skip
        assert name in algo, name
    assert run_cli(["train", "--help", "sampler"], monkeypatch) == 0
    sampler = capsys.readouterr().out
    assert "sampler.filters.reward_variance" in sampler
    assert "lte" in sampler
    assert run_cli(["train", "--help"], monkeypatch) == 0
    short = capsys.readouterr().out
    for option in ("passk", "grpo_passk", "forking_tokens", "outcome_bonus", "unlikeliness", "snr_filter", "lte",
                   "w_reinforce", "darling", "maxrl", "pkpo"):  # fmt: skip
        assert option in short, option


def test_lte_reads_the_off_policy_keys_that_a_parallel_run_refuses(tmp_path: Path) -> None:
    from sesa_cli.commands.validate import validate_argv

    out = f"hydra.run.dir={tmp_path / 'out'}"
    assert validate_argv("train", ["task=path", "sampler=lte", "algo.off_policy=paper", out]) is None
    refused = validate_argv("train", ["task=path", "sampler=parallel", "algo.off_policy=paper", out])
    assert refused is not None
    assert "only applies to sampler=sequential" in refused
