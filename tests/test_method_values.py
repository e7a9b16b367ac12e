"""The advantages and losses as plug-in classes compute what their functions computed before (main at 52d6396), bit
for bit, on fixed inputs: a cheap guard of the refactor's promise that draws and updates are unchanged (the full
check trains every recipe: bench/same_draws.py).

tests/methods_at_52d6396.json holds the old functions' outputs as exact float hex, recorded once by running
``algos.compute_advantages`` and ``algos.compute_loss`` of that commit (AlgoConfig(passk_k=..., clip_cov_ratio=...))
on the inputs the file holds; here the same configurations in today's spelling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sesa_cli.algos import compute_advantages, compute_loss
from sesa_cli.config import AlgoConfig

BEFORE = json.loads((Path(__file__).with_name("methods_at_52d6396.json")).read_text())
INPUTS = BEFORE["inputs"]


def _tensor(values: list, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.tensor([float.fromhex(v) for v in values], dtype=torch.float32).view(shape)


def _hexes(t: torch.Tensor) -> list[str]:
    return [float(x).hex() for x in t.flatten().tolist()]


REWARDS, PENALTIES = _tensor(INPUTS["rewards"], (3, 6)), _tensor(INPUTS["penalties"], (3, 6))
ON_POLICY = torch.tensor(INPUTS["on_policy"]).view(3, 6)
ADVANTAGES = {"grpo": {"name": "grpo"}, "dr_grpo": {"name": "dr_grpo"}, "rloo": {"name": "rloo"},
              "grpo_passk": {"name": "grpo_passk"}, **{f"passk_k{k}": {"name": "passk", "k": k} for k in range(1, 7)}}  # fmt: skip
LOSSES = {
    "ppo_clip": AlgoConfig(loss="ppo_clip", clip_high=0.28),
    "clip_cov": AlgoConfig(loss={"name": "clip_cov", "ratio": 0.3, "cov_min": -5.0, "cov_max": 5.0}),
    "kl_cov": AlgoConfig(loss={"name": "kl_cov", "ratio": 0.2, "penalty": 0.7}),
    "forking_tokens": AlgoConfig(loss={"name": "forking_tokens", "rho": 0.4}),
}


@pytest.mark.parametrize("name", sorted(BEFORE["advantages"]))
def test_each_advantage_is_its_old_function_bit_for_bit(name: str) -> None:
    base = name.removesuffix("_on_policy")
    algo = AlgoConfig(advantage=ADVANTAGES[base])
    on_policy = ON_POLICY if name.endswith("_on_policy") else None
    out = compute_advantages(REWARDS, algo, on_policy=on_policy, penalties=PENALTIES)
    assert _hexes(out) == BEFORE["advantages"][name]


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_each_loss_is_its_old_function_bit_for_bit(name: str) -> None:
    logps = _tensor(INPUTS["logps"], (4, 7)).requires_grad_()
    old, ent = _tensor(INPUTS["old"], (4, 7)), _tensor(INPUTS["ent"], (4, 7))
    mask = torch.tensor(INPUTS["mask"]).view(4, 7)
    loss, metrics = compute_loss(logps, old, _tensor(INPUTS["adv"], (4,)), mask, LOSSES[name], entropies=ent,
                                 norm_constant=7)  # fmt: skip
    loss.backward()
    assert logps.grad is not None
    want = BEFORE["losses"][name]
    assert float(loss.detach()).hex() == want["loss"]
    assert _hexes(logps.grad) == want["grad"]
    assert {k: float(v).hex() for k, v in sorted(metrics.items())} == want["metrics"]
