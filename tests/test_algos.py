"""sesa_cli.algos against values worked out by hand on small tensors.

Every expected number below is written out from the arithmetic in the comment next to it, not recomputed with the
formula under test.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from sesa_cli.advantages import ADVANTAGES, Advantage
from sesa_cli.algos import (
    AGGREGATIONS,
    LR_SCHEDULES,
    compute_advantages,
    compute_loss,
    kl_penalty,
    lr_scale,
    no_on_policy_groups,
    register,
    scale_off_policy_negatives,
)
from sesa_cli.config import AlgoConfig, ConfigError
from sesa_cli.losses import POLICY_LOSSES, build_loss
from sesa_cli.registry import named_settings

ALGO_CONF_DIR = Path(__file__).resolve().parents[1] / "conf" / "algo"
E_01 = 1.1051709180756477  # exp(0.1)


def grad(tensor: torch.Tensor) -> torch.Tensor:
    assert tensor.grad is not None
    return tensor.grad


def close(actual: object, expected: object, atol: float = 1e-6) -> None:
    torch.testing.assert_close(
        torch.as_tensor(actual), torch.as_tensor(expected), atol=atol, rtol=0, check_dtype=False
    )


# ---------------------------------------------------------------------------------------------------- advantages
REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 0.0, 0.0]])
# group 0: mean 0.5, deviations ±0.5, unbiased var = 4 * 0.25 / 3 = 1/3, std = 0.5773503
# group 1: mean 1, deviations [2, 0, -1, -1], unbiased var = 6 / 3 = 2, std = 1.4142136
ADVANTAGE_CASES = {
    # (r - mean) / std: ±0.5 / 0.5773503 = ±0.8660254; [2, 0, -1, -1] / 1.4142136
    "grpo": [[0.8660254, -0.8660254, -0.8660254, 0.8660254], [1.4142136, 0.0, -0.7071068, -0.7071068]],
    # r - mean
    "dr_grpo": [[0.5, -0.5, -0.5, 0.5], [2.0, 0.0, -1.0, -1.0]],
    # r_i - mean of the other three: 1 - 1/3, 0 - 2/3, ... ; 3 - 1/3, 1 - 3/3, 0 - 4/3, 0 - 4/3
    "rloo": [[0.6666667, -0.6666667, -0.6666667, 0.6666667], [2.6666667, 0.0, -1.3333333, -1.3333333]],
}


@pytest.mark.parametrize(("name", "expected"), ADVANTAGE_CASES.items())
def test_advantages_by_hand(name: str, expected: list[list[float]]) -> None:
    advantages = compute_advantages(REWARDS, AlgoConfig(advantage=name, adv_eps=0.0))
    assert advantages.shape == (2, 4)
    close(advantages, expected)


def test_grpo_adds_eps_and_zero_std_group_gets_zero() -> None:
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 1.0]])
    advantages = compute_advantages(rewards, AlgoConfig(advantage="grpo", adv_eps=0.5))
    # group 0: std 0 -> 0 / 0.5; group 1: ±0.5 / (0.5773503 + 0.5) = ±0.4641016
    close(advantages, [[0.0, 0.0, 0.0, 0.0], [0.4641016, -0.4641016, -0.4641016, 0.4641016]])


def test_advantages_accept_integer_rewards_and_need_two_rollouts() -> None:
    close(compute_advantages(torch.tensor([[2, 0]]), AlgoConfig(advantage="dr_grpo")), [[1.0, -1.0]])
    with pytest.raises(ValueError, match="at least 2"):
        compute_advantages(torch.tensor([[1.0]]), AlgoConfig(advantage="rloo"))


# On-policy baseline (algo.off_policy=on_policy_baseline). Group 0 as in REWARDS with rows 0 and 1 on-policy,
# group 1 with only row 0 on-policy (a sequential chain: only the first item is drawn from the plain prompt).
ON_POLICY = torch.tensor([[True, True, False, False], [True, False, False, False]])
ON_POLICY_CASES = {
    # group 0: baseline = mean(1, 0) = 0.5 = the group mean, so unchanged; group 1: baseline = r_0 = 3, std stays
    # the whole group's 1.4142136: [0, -2, -3, -3] / 1.4142136
    "grpo": [[0.8660254, -0.8660254, -0.8660254, 0.8660254], [0.0, -1.4142136, -2.1213203, -2.1213203]],
    "dr_grpo": [[0.5, -0.5, -0.5, 0.5], [0.0, -2.0, -3.0, -3.0]],
    # rloo, baseline of i = mean of the on-policy rows other than i. Group 0: row 0 -> r_1 = 0, row 1 -> r_0 = 1,
    # rows 2, 3 -> mean(1, 0) = 0.5: [1, -1, -0.5, 0.5]. Group 1: row 0 has no other on-policy row and keeps the
    # mean of the others (1/3): 3 - 1/3; rows 1-3 -> r_0 = 3: [-2, -3, -3].
    "rloo": [[1.0, -1.0, -0.5, 0.5], [2.6666667, -2.0, -3.0, -3.0]],
}


@pytest.mark.parametrize(("name", "expected"), ON_POLICY_CASES.items())
def test_on_policy_baseline_by_hand(name: str, expected: list[list[float]]) -> None:
    cfg = AlgoConfig(advantage=name, adv_eps=0.0)
    close(compute_advantages(REWARDS, cfg, on_policy=ON_POLICY), expected)


@pytest.mark.parametrize("name", sorted(ADVANTAGE_CASES))
def test_on_policy_baseline_falls_back_and_is_exact_when_all_or_none_on_policy(name: str) -> None:
    rewards = torch.tensor([[0.3, 0.1, 0.7, 0.0], [1.0, 0.2, 0.0, 0.9]])  # means not exact in binary
    cfg = AlgoConfig(advantage=name)
    own = compute_advantages(rewards, cfg)
    for mask in (torch.ones(2, 4, dtype=torch.bool), torch.zeros(2, 4, dtype=torch.bool)):
        assert torch.equal(compute_advantages(rewards, cfg, on_policy=mask), own)  # bit-identical, not just close
    mixed = torch.tensor([[True] * 4, [False] * 4])
    assert torch.equal(compute_advantages(rewards, cfg, on_policy=mixed), own)
    assert no_on_policy_groups(mixed).tolist() == [False, True]
    with pytest.raises(ValueError, match="on_policy"):
        compute_advantages(rewards, cfg, on_policy=torch.ones(2, 3, dtype=torch.bool))


def test_scale_off_policy_negatives_touches_only_off_policy_negatives() -> None:
    advantages = torch.tensor([1.0, -1.0, -0.5, 0.5, -2.0, 0.0])
    off_policy = torch.tensor([False, False, True, True, True, True])
    factors = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    # row 1: negative but on-policy; row 3: off-policy but positive; row 5: zero. Rows 2 and 4 scale.
    close(scale_off_policy_negatives(advantages, off_policy, factors), [1.0, -1.0, -0.15, 0.5, -1.0, 0.0])
    close(scale_off_policy_negatives(advantages, off_policy, torch.zeros(6)), [1.0, -1.0, 0.0, 0.5, 0.0, 0.0])
    with pytest.raises(ValueError, match="batch"):
        scale_off_policy_negatives(advantages, off_policy[:3], factors)


# ------------------------------------------------------------------------------------------------------ ppo_clip
# Three sequences with masks of lengths 3, 2, 1; the ratio r = exp(logps - old_logps) of each token is set by hand.
# clip_low = 0.2, clip_high = 0.28 (DAPO), so r is clipped to [0.8, 1.28]. Per-token loss -min(r*A, clip(r)*A):
#   seq 0, A = +1:  r=1.5 -> -min(1.5, 1.28) = -1.28 (clipped); r=0.5 -> -min(0.5, 0.8) = -0.5; r=1 -> -1.0
#   seq 1, A = -2:  r=0.5 -> -min(-1.0, -1.6) = 1.6 (clipped); r=1.5 -> -min(-3.0, -2.56) = 3.0; padding
#   seq 2, A = 0.5: r=1.1 -> -min(0.55, 0.55) = -0.55; padding, padding
# Sums per sequence: -2.78, 4.6, -0.55; all tokens: 1.27 over 6 tokens.
RATIOS = [[1.5, 0.5, 1.0], [0.5, 1.5, 1.0], [1.1, 1.0, 1.0]]
ADV = torch.tensor([1.0, -2.0, 0.5])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]])
PPO = AlgoConfig(clip_low=0.2, clip_high=0.28)


def ppo_batch() -> tuple[torch.Tensor, torch.Tensor]:
    logps = torch.tensor([[-0.5, -1.0, -1.5], [-0.7, -0.2, -0.3], [-1.2, -0.9, -0.4]], requires_grad=True)
    old_logps = logps.detach() - torch.tensor(RATIOS).log()
    old_logps[MASK == 0] = -100.0  # garbage in padding: a ratio of e^99 there must not leak into the loss
    return logps, old_logps


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [
        ("token_mean", 1.27 / 6),  # 0.2116667
        ("seq_mean_token_mean", (-2.78 / 3 + 4.6 / 2 - 0.55 / 1) / 3),  # (-0.9266667 + 2.3 - 0.55) / 3 = 0.2744444
        ("seq_sum_norm", 1.27 / (3 * 4)),  # batch 3, norm_constant 4: 0.1058333
    ],
)
def test_ppo_clip_by_hand(aggregation: str, expected: float) -> None:
    logps, old_logps = ppo_batch()
    cfg = AlgoConfig(clip_low=0.2, clip_high=0.28, aggregation=aggregation)
    loss, metrics = compute_loss(logps, old_logps, ADV, MASK, cfg, norm_constant=4)
    close(loss, expected)
    close(metrics["pg"], expected)
    close(metrics["clip_frac"], 2 / 6)
    close(metrics["ratio_mean"], (1.5 + 0.5 + 1.0 + 0.5 + 1.5 + 1.1) / 6)
    loss.backward()
    assert grad(logps) is not None
    assert torch.isfinite(grad(logps)).all()
    assert (grad(logps)[MASK == 0] == 0).all()


def test_ppo_clip_gradient_zero_where_clipped() -> None:
    logps, old_logps = ppo_batch()
    loss, _ = compute_loss(logps, old_logps, ADV, MASK, PPO)
    loss.backward()
    # d(-A r)/d logp = -A r over 6 tokens; 0 at the two clipped tokens and in padding.
    expected = [[0.0, -0.5 / 6, -1.0 / 6], [0.0, 3.0 / 6, 0.0], [-0.55 / 6, 0.0, 0.0]]
    close(grad(logps), expected)


def test_ppo_clip_gradient_at_ratio_one_is_minus_advantage_over_tokens() -> None:
    logps = torch.tensor([[-0.3, -1.1, -2.0], [-0.4, -0.9, -0.1], [-1.5, -0.2, -0.6]], requires_grad=True)
    loss, metrics = compute_loss(logps, logps.detach(), ADV, MASK, PPO)
    loss.backward()
    # -A * mask / sum(mask) with sum(mask) = 6
    expected = [[-1 / 6, -1 / 6, -1 / 6], [2 / 6, 2 / 6, 0.0], [-0.5 / 6, 0.0, 0.0]]
    close(grad(logps), expected)
    close(metrics["approx_kl"], 0.0)
    close(metrics["ratio_mean"], 1.0)
    close(metrics["clip_frac"], 0.0)


def test_seq_weights_of_one_change_nothing() -> None:
    logps_a, old_logps = ppo_batch()
    logps_b, _ = ppo_batch()
    loss_a, _ = compute_loss(logps_a, old_logps, ADV, MASK, PPO)
    loss_b, metrics = compute_loss(logps_b, old_logps, ADV, MASK, PPO, seq_weights=torch.ones(3))
    loss_a.backward()
    loss_b.backward()
    assert loss_a.item() == loss_b.item()
    assert torch.equal(grad(logps_a), grad(logps_b))
    assert "is_weight_mean" not in metrics  # the update's statistic, over the whole batch's solution rows


def test_seq_weights_scale_each_sequence() -> None:
    logps, old_logps = ppo_batch()
    weights = torch.tensor([2.0, 0.5, 1.0], requires_grad=True)
    loss, _ = compute_loss(logps, old_logps, ADV, MASK, PPO, seq_weights=weights)
    close(loss, (2 * -2.78 + 0.5 * 4.6 + 1 * -0.55) / 6)  # -3.81 / 6 = -0.635
    loss.backward()
    assert weights.grad is None  # a constant: no gradient flows into the importance weight


# ---------------------------------------------------------------------------------------------------------- KL
def test_kl_penalty_by_hand() -> None:
    logps = torch.tensor([-1.0, -2.0, -0.5])
    ref_logps = torch.tensor([-2.0, -1.0, -0.5])
    close(kl_penalty(logps, ref_logps, "k1"), [1.0, -1.0, 0.0])
    close(kl_penalty(logps, ref_logps, "k2"), [0.5, 0.5, 0.0])
    # exp(ref - logp) - (ref - logp) - 1: e^-1 + 1 - 1 = 0.3678794; e^1 - 1 - 1 = 0.7182818; 0
    close(kl_penalty(logps, ref_logps, "k3"), [0.3678794, 0.7182818, 0.0])


def test_k3_is_never_negative() -> None:
    gen = torch.Generator().manual_seed(0)
    logps, ref_logps = torch.randn(2, 64, 32, generator=gen) * 5
    assert (kl_penalty(logps, ref_logps, "k3") >= 0).all()
    with pytest.raises(ConfigError, match="k1, k2, k3"):
        kl_penalty(logps, ref_logps, "k4")


def test_total_loss_adds_kl_and_subtracts_entropy() -> None:
    logps = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref_logps = torch.tensor([[-2.0, -1.0]])
    entropies = torch.tensor([[0.5, 1.5]], requires_grad=True)
    cfg = AlgoConfig(kl_coef=0.1, entropy_coef=0.01)
    loss, metrics = compute_loss(
        logps, logps.detach(), torch.tensor([1.0]), torch.ones(1, 2), cfg, ref_logps=ref_logps, entropies=entropies
    )
    # pg: ratio 1, A = 1 -> -1 per token, mean -1; k3 mean (0.3678794 + 0.7182818) / 2 = 0.5430806; entropy mean 1
    close(metrics["pg"], -1.0)
    close(metrics["kl"], 0.5430806)
    close(metrics["entropy"], 1.0)
    close(loss, -1.0 + 0.1 * 0.5430806 - 0.01 * 1.0)  # -0.9556919
    loss.backward()
    close(grad(entropies), [[-0.005, -0.005]])  # -0.01 / 2 tokens: the bonus pushes entropy up


def test_coefficients_without_their_inputs_raise() -> None:
    logps = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="ref_logps"):
        compute_loss(logps, logps, torch.ones(1), torch.ones(1, 2), AlgoConfig(kl_coef=0.1))
    with pytest.raises(ValueError, match="entropies"):
        compute_loss(logps, logps, torch.ones(1), torch.ones(1, 2), AlgoConfig(entropy_coef=0.1))


# --------------------------------------------------------------------------------------------- clip_cov, kl_cov
# Two sequences of three valid tokens, A = +1 and -1 (batch mean 0), logps with batch mean -2:
#   logp - mean = [[1.5, 0, -1], [1, -0.5, -1]]
#   cov = (A - 0) * (logp - mean) = [[1.5, 0, -1], [-1, 0.5, 1]]
# A ratio of 0.2 over 6 valid tokens acts on max(1, int(1.2)) = 1 token.
COV_LOGPS = [[-0.5, -2.0, -3.0], [-1.0, -2.5, -3.0]]
COV_ADV = torch.tensor([1.0, -1.0])
COV_MASK = torch.ones(2, 3)


@pytest.mark.parametrize(
    ("lb", "ub", "selected", "expected_loss"),
    [
        # only cov 1.5 is in [1.2, 5]; the loss loses that token's -A = -1: (-1 * 2 + 1 * 3) / 6
        (1.2, 5.0, (0, 0), 1 / 6),
        # only cov 0.5 is in [0.4, 0.6]; the loss loses that token's -A = +1: (-1 * 3 + 1 * 2) / 6
        (0.4, 0.6, (1, 1), -1 / 6),
    ],
)
def test_clip_cov_detaches_the_expected_token(
    lb: float, ub: float, selected: tuple[int, int], expected_loss: float
) -> None:
    logps = torch.tensor(COV_LOGPS, requires_grad=True)
    cfg = AlgoConfig(loss={"name": "clip_cov", "ratio": 0.2, "cov_min": lb, "cov_max": ub})
    loss, metrics = compute_loss(logps, logps.detach(), COV_ADV, COV_MASK, cfg)
    loss.backward()
    # ratio 1: per-token loss -A, gradient -A / 6, except the detached token (loss 0, gradient 0)
    expected_grad = torch.tensor([[-1 / 6] * 3, [1 / 6] * 3])
    expected_grad[selected] = 0.0
    close(grad(logps), expected_grad)
    close(loss, expected_loss)
    close(metrics["clip_cov_frac"], 1 / 6)


def test_clip_cov_random_pick_is_local_and_deterministic() -> None:
    # Default window [1, 5] holds two tokens, cov 1.5 at (0, 0) and cov 1.0 at (1, 2); one is picked at random.
    cfg = AlgoConfig(loss={"name": "clip_cov", "ratio": 0.2})
    rng_state = torch.random.get_rng_state()
    picks = []
    for generator in (None, None, torch.Generator().manual_seed(1)):
        logps = torch.tensor(COV_LOGPS, requires_grad=True)
        loss, _ = compute_loss(logps, logps.detach(), COV_ADV, COV_MASK, cfg, generator=generator)
        loss.backward()
        zero = torch.nonzero(grad(logps) == 0).tolist()
        assert len(zero) == 1
        picks.append(tuple(zero[0]))
    assert torch.equal(torch.random.get_rng_state(), rng_state)  # the global RNG is untouched
    assert picks[0] == picks[1]  # same batch, same pick
    assert set(picks) <= {(0, 0), (1, 2)}


def test_clip_cov_leaves_ppo_clipped_tokens_alone() -> None:
    # Same batch, but the ratio of (0, 0) is 1.5 > 1.28 with A = +1: PPO clips it, so it is no Clip-Cov candidate
    # and the window [1.2, 5] is empty.
    logps = torch.tensor(COV_LOGPS, requires_grad=True)
    old_logps = logps.detach().clone()
    old_logps[0, 0] -= math.log(1.5)
    cfg = AlgoConfig(loss={"name": "clip_cov", "ratio": 0.2, "cov_min": 1.2}, clip_high=0.28)
    _, metrics = compute_loss(logps, old_logps, COV_ADV, COV_MASK, cfg)
    close(metrics["clip_cov_frac"], 0.0)
    close(metrics["clip_frac"], 1 / 6)


@pytest.mark.parametrize(
    ("ratio", "penalised"),
    [
        (0.2, {(0, 0)}),  # top-1 cov: 1.5
        (0.4, {(0, 0), (1, 2)}),  # max(1, int(2.4)) = 2: covs 1.5 and 1.0
    ],
)
def test_kl_cov_penalises_the_top_covariance_tokens(ratio: float, penalised: set[tuple[int, int]]) -> None:
    logps = torch.tensor(COV_LOGPS, requires_grad=True)
    old_logps = logps.detach() - 0.1  # every ratio e^0.1, |logp - old_logp| = 0.1
    cfg = AlgoConfig(loss={"name": "kl_cov", "ratio": ratio, "penalty": 1.0})
    loss, metrics = compute_loss(logps, old_logps, COV_ADV, COV_MASK, cfg)
    loss.backward()
    # -A e^0.1 sums to 0 over the batch; each penalised token adds 1.0 * 0.1; 6 tokens
    close(loss, 0.1 * len(penalised) / 6)
    close(metrics["kl_cov_frac"], len(penalised) / 6)
    close(metrics["clip_frac"], 0.0)
    # gradient -A e^0.1 / 6 = ∓0.1841952, plus 1.0 * sign(0.1) / 6 on penalised tokens
    expected_grad = torch.tensor([[-E_01 / 6] * 3, [E_01 / 6] * 3])
    for token in penalised:
        expected_grad[token] += 1 / 6
    close(grad(logps), expected_grad)


def test_kl_cov_penalty_is_inert_at_ratio_one() -> None:
    logps = torch.tensor(COV_LOGPS, requires_grad=True)
    loss, _ = compute_loss(logps, logps.detach(), COV_ADV, COV_MASK, AlgoConfig(loss={"name": "kl_cov", "ratio": 0.2}))
    loss.backward()
    close(grad(logps), [[-1 / 6] * 3, [1 / 6] * 3])


# ------------------------------------------------------------------------------------------- empty rows, registry
@pytest.mark.parametrize("loss_name", sorted(POLICY_LOSSES))
@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS))
def test_all_zero_mask_rows_stay_finite(loss_name: str, aggregation: str) -> None:
    cfg = AlgoConfig(loss=loss_name, aggregation=aggregation, kl_coef=0.1, entropy_coef=0.01)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]])
    for batch_mask in (mask, torch.zeros_like(mask)):
        logps = torch.tensor([[-0.5, -1.0, -torch.inf], [-torch.inf, 3.0, -1e4], [-1.2, 0.0, 0.0]])
        logps.requires_grad_(True)
        entropies = torch.tensor([[0.3, 0.2, torch.nan], [torch.nan, 1.0, 1.0], [0.1, 0.0, 0.0]], requires_grad=True)
        old_logps = torch.full((3, 3), -100.0)
        loss, metrics = compute_loss(
            logps,
            old_logps,
            torch.tensor([1.0, -1.0, 0.5]),
            batch_mask,
            cfg,
            ref_logps=torch.full((3, 3), -1.0),
            entropies=entropies,
            norm_constant=3,
        )
        loss.backward()
        assert torch.isfinite(loss)
        assert all(math.isfinite(value) for value in metrics.values()), metrics
        assert torch.isfinite(grad(logps)).all()
        assert torch.isfinite(grad(entropies)).all()
        if not batch_mask.any():
            assert loss.item() == 0.0


def test_seq_mean_token_mean_skips_empty_rows() -> None:
    values = torch.tensor([[1.0, 3.0], [5.0, 7.0], [9.0, 11.0]])
    mask = torch.tensor([[1, 1], [0, 0], [1, 0]])
    # sequences with tokens: mean(1, 3) = 2 and mean(9) = 9 -> (2 + 9) / 2
    close(AGGREGATIONS["seq_mean_token_mean"](values, mask), 5.5)
    close(AGGREGATIONS["token_mean"](values, mask), (1 + 3 + 9) / 3)
    close(AGGREGATIONS["seq_sum_norm"](values, mask, norm_constant=2), (1 + 3 + 9) / (3 * 2))


@pytest.mark.parametrize(
    ("registry", "field", "valid"),
    [
        (ADVANTAGES, "advantage", "darling, dr_grpo, grpo, grpo_passk, maxrl, passk, pkpo, rloo, w_reinforce"),
        (POLICY_LOSSES, "loss", "clip_cov, forking_tokens, kl_cov, ppo_clip"),
        (AGGREGATIONS, "aggregation", "seq_mean_token_mean, seq_sum_norm, token_mean"),
    ],
)
def test_unknown_names_list_the_valid_ones(registry: dict, field: str, valid: str) -> None:
    with pytest.raises(ConfigError, match=f"unknown algo.{field} 'nope'; valid: {valid}"):
        registry.lookup("nope")
    cfg = AlgoConfig()
    setattr(cfg, field, {"name": "nope"} if field in ("advantage", "loss") else "nope")
    if registry is ADVANTAGES:
        with pytest.raises(ConfigError, match=valid):
            compute_advantages(REWARDS, cfg)
    else:
        with pytest.raises(ConfigError, match=valid):
            compute_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), torch.ones(1, 2), cfg)


def test_an_unknown_setting_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"algo\.advantage\.kk is not a setting; valid: k"):
        compute_advantages(REWARDS, AlgoConfig(advantage={"name": "passk", "kk": 4}))
    with pytest.raises(ConfigError, match=r"algo\.loss\.k is not a setting; valid: none \(it has no settings\)"):
        build_loss(AlgoConfig(loss={"name": "ppo_clip", "k": 4}))
    with pytest.raises(ConfigError, match=r"algo\.loss\.rho=0\.0 must be in \(0, 1\]"):
        build_loss(AlgoConfig(loss={"name": "forking_tokens", "rho": 0}))


@pytest.mark.parametrize("registry", [ADVANTAGES, POLICY_LOSSES, AGGREGATIONS, LR_SCHEDULES])
def test_registering_a_name_twice_raises(registry: dict) -> None:
    name = next(iter(registry))
    before = dict(registry)
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(name)(lambda *args, **kwargs: None)
    assert registry == before


def test_each_loss_declares_whether_it_vanishes_at_zero_advantage() -> None:
    vanishing = {name for name, cls in POLICY_LOSSES.items() if cls.zero_at_zero_advantage}
    assert vanishing == {"ppo_clip"}
    assert not POLICY_LOSSES["clip_cov"].zero_at_zero_advantage  # its token choice reads every row's covariance
    assert not POLICY_LOSSES["kl_cov"].zero_at_zero_advantage  # its penalty acts whatever the advantage
    assert {name for name, cls in POLICY_LOSSES.items() if cls.needs_entropies} == {"forking_tokens"}
    assert {name for name, cls in ADVANTAGES.items() if cls.penalty_apart} == {
        "darling",
        "grpo_passk",
        "passk",
        "pkpo",
    }


def test_the_deprecated_function_register_still_registers_a_class() -> None:
    # a plug-in written against the release before the plug-in classes: a function, its flags its properties
    with pytest.warns(DeprecationWarning, match="register_advantage"):
        decorator = register(ADVANTAGES, "legacy_half", penalty_apart=True)
    try:
        decorator(lambda rewards, cfg, on_policy=None, penalties=None: rewards / 2)
        assert issubclass(ADVANTAGES["legacy_half"], Advantage)
        assert ADVANTAGES["legacy_half"].penalty_apart
        out = compute_advantages(torch.tensor([[1.0, 0.0]]), AlgoConfig(advantage="legacy_half"),
                                 penalties=torch.tensor([[0.0, -0.5]]))  # fmt: skip
        close(out, [[0.5, 0.25]])  # (r - f) / 2: the penalty taken apart, as the flag says
    finally:
        ADVANTAGES.pop("legacy_half", None)


@pytest.mark.parametrize("name", sorted(n for n, cls in POLICY_LOSSES.items() if cls.zero_at_zero_advantage))
def test_a_loss_declared_zero_at_zero_advantage_is_so_whatever_those_rows_hold(name: str) -> None:
    # Rows 0 and 2 have advantage 0; moving their log-probs anywhere changes neither their own term (exactly 0)
    # nor any term of row 1, which is what lets the trainer skip their forward pass.
    loss = build_loss(AlgoConfig(loss=name))
    old = torch.tensor([[-1.0, -2.0], [-0.5, -1.5], [-2.0, -0.1]])
    advantages = torch.tensor([0.0, 1.3, 0.0])[:, None].expand(3, 2)
    mask = torch.ones(3, 2, dtype=torch.bool)
    base, _ = loss(old + 0.1, old, advantages, mask)
    moved_logps = (old + 0.1).clone()
    moved_logps[[0, 2]] += torch.tensor([[3.0, -7.0], [-0.4, 9.0]])
    moved, _ = loss(moved_logps, old, advantages, mask)
    assert torch.equal(moved[[0, 2]], torch.zeros(2, 2))
    assert torch.equal(moved[1], base[1])


def test_lr_schedules_by_hand() -> None:
    # 10 steps, 2 of warm-up: (step + 1) / 2, then the schedule over the 8 steps left (done = (step - 2) / 8)
    assert [lr_scale(s, 10, 2, "constant") for s in (0, 1, 2, 9)] == [0.5, 1.0, 1.0, 1.0]
    assert [lr_scale(s, 10, 2, "linear") for s in (2, 6, 10)] == [1.0, 0.5, 0.0]
    assert lr_scale(6, 10, 2, "cosine") == pytest.approx(0.5)  # ½ (1 + cos(π/2))
    with pytest.raises(ConfigError, match=r"unknown optim\.lr_schedule 'step'; valid: constant, cosine, linear"):
        lr_scale(5, 10, 0, "step")


# ---------------------------------------------------------------------------------------------------- conf/algo
ALGO_YAMLS = sorted(ALGO_CONF_DIR.glob("*.yaml"))


def test_every_documented_algo_option_exists() -> None:
    names = {path.stem for path in ALGO_YAMLS}
    assert names >= {"grpo", "dr_grpo", "dapo", "rloo", "entropy_bonus", "clip_cov", "kl_cov"}


@pytest.mark.parametrize("path", ALGO_YAMLS, ids=lambda path: path.stem)
def test_algo_yaml_merges_onto_schema(path: Path) -> None:
    assert path.read_text().startswith("# "), "each option starts with a comment citing its paper"
    raw = OmegaConf.load(path)
    if path.read_text().startswith("# @package _global_"):  # an option that sets another section too (dapo)
        assert set(raw) <= {"algo", "sampler"}
        raw = raw.algo
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(AlgoConfig), raw))
    assert isinstance(cfg, AlgoConfig)
    assert cfg.name == path.stem
    named_settings(ADVANTAGES, cfg.advantage, "algo.advantage")  # a registered estimator, valid settings
    named_settings(POLICY_LOSSES, cfg.loss, "algo.loss")
    assert cfg.aggregation in AGGREGATIONS
    # Only the four naming keys plus what differs from the schema's defaults.
    defaults = AlgoConfig()
    extra = set(raw) - {"name", "advantage", "loss", "aggregation"}
    assert {key for key in extra if raw[key] == getattr(defaults, key)} == set()
