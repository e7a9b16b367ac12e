"""Resume is exact: a run stopped at step 4 and revived for 4 more ends bit-identical to the uninterrupted run.

With a KL term too: the reference of a revived run is the base its lineage started from, recorded in
run.json, not the checkpoint it resumes from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import run_cli

SMALL = ["train.batch_size=2", "sampler.group_size=4", "eval.samples=8", "train.sample_every=0"]


def _rows(run: Path) -> list[dict]:
    """metrics.jsonl rows without timings (wall-clock) and without a revived run's copy of its parent's history."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows if not r.get("revive/parent")]


@pytest.mark.parametrize(
    ("sampler", "kl_coef", "extra"),
    [
        ("parallel", 0.05, []),
        ("sequential", 0.05, []),
        ("sequential", 0.0, []),
        ("parallel", 0.05, ["model.lora=true", "model.lora_rank=4"]),
    ],  # LoRA: the reference is the adapter-free base
    ids=["parallel-kl", "sequential-kl", "sequential", "parallel-kl-lora"],
)
def test_stopped_and_revived_equals_uninterrupted(tmp_path, monkeypatch, tiny_overrides, sampler, kl_coef, extra):
    whole, revived = tmp_path / "whole", tmp_path / "revived"
    settings = [*tiny_overrides, *SMALL, f"sampler={sampler}", f"algo.kl_coef={kl_coef}", "seed=5", *extra]
    argv = [
        "train",
        *settings,
        "train.steps=8",
        "train.checkpoint_every=4",
        "train.eval_every=4",
        f"hydra.run.dir={whole}",
    ]
    assert run_cli(argv, monkeypatch) == 0
    argv = ["revive", f"ckpt={whole}", "step=4", "more_steps=4", f"hydra.run.dir={revived}"]
    assert run_cli(argv, monkeypatch) == 0

    # The same reference, recorded once by the run that started the lineage and carried over by the revive.
    record = json.loads((whole / "run.json").read_text())["kl_reference"]
    assert json.loads((revived / "run.json").read_text())["kl_reference"] == record
    assert len(record["sha256"]) == 64

    whole_rows = _rows(whole)
    tail = whole_rows[next(i for i, r in enumerate(whole_rows) if r["step"] == 4 and "eval/success" in r) :]
    assert [r["step"] for r in tail] == [4, 5, 6, 7, 8, 8]  # eval at 4, steps 5-8, the final evaluation
    if kl_coef:
        assert all(r["loss/kl"] > 0 for r in tail if "loss/kl" in r)  # a KL rebuilt from the checkpoint starts at 0
    assert _rows(revived) == tail

    final = "checkpoints/step_000008"
    weights = "adapter_model.safetensors" if extra else "model.safetensors"
    a, b = load_file(whole / final / weights), load_file(revived / final / weights)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # the loss terms' own state (the path recipe's found term: its memory of solutions) resumed bit for bit
    terms_a, terms_b = (
        json.loads((run / final / "trainer_state.json").read_text())["terms"] for run in (whole, revived)
    )
    assert terms_a == terms_b
    if any(r.get("loss/found_solutions") for r in whole_rows):
        assert terms_a["found"]
    opt_a = torch.load(whole / final / "optimizer.pt", weights_only=True)["state"]
    opt_b = torch.load(revived / final / "optimizer.pt", weights_only=True)["state"]
    assert all(torch.equal(opt_a[i]["exp_avg_sq"], opt_b[i]["exp_avg_sq"]) for i in opt_a)

    # The compute on record: the revived run carries its checkpoint's counts, so what training spent (sampling and
    # update: tokens and FLOPs) is the uninterrupted run's; its own evaluation of the start is one evaluation more.
    compute_a, compute_b = (json.loads((run / "run.json").read_text())["compute"] for run in (whole, revived))
    for key in ("sampled_tokens", "scored_tokens", "train_flops", "from_step"):
        assert compute_a[key] == compute_b[key], key
    for phase in ("sample", "update"):
        a_phase, b_phase = compute_a["phases"][phase], compute_b["phases"][phase]
        assert {k: v for k, v in a_phase.items() if k != "seconds"} == {
            k: v for k, v in b_phase.items() if k != "seconds"
        }
    assert compute_a["train_flops"] > 0
    assert compute_b["phases"]["eval"]["forward_flops"] > compute_a["phases"]["eval"]["forward_flops"]
