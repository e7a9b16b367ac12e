"""bench/gpu.py (issue 54): its physical limits by hand, and its whole run at tiny sizes on the CPU (``--smoke``), so
the GPU bench cannot rot between the sessions that have a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import gpu


def test_the_limits_by_hand():
    """A 2-layer model, 64 wide, 4 heads of 16 (2 key/value heads), MLP 128, vocab 256, tied embeddings, float32:
    the decoder's linear weights are 2 x (64*64 + 2*(32*64) + 64*64 + 3*64*128) = 73,728, the head's 16,384, every
    weight 2*64 (norms) + 2*64 + 64 (final norm) + 16,384 (tied embedding) + 73,728 = 90,432 floats. At 4 rows, a
    16-token prompt and 4 new tokens (mean context 16 + 2.5): prefill 4 x (2*73,728*16 + 2*128*16*16 + 2*16,384)
    FLOPs; a decode step reads 90,432*4 bytes of weights and 4 x 18.5 x 512 bytes of cache (keys and values x 2
    layers x 2 heads x 16 wide x 4 bytes a token), bound by bytes."""
    model = gpu.random_model(gpu.SMOKE_SHAPES["SmolLM2-135M"], "cpu", torch.float32, 32)
    assert gpu.matmul_params(model) == (73_728, 16_384)
    assert sum(p.numel() for p in model.parameters()) == 90_432
    got = gpu.limits(model, rows=4, prompt=16, new=4)
    prefill = 4 * (2 * 73_728 * 16 + 2 * 128 * 16 * 16 + 2 * 16_384)
    assert got["prefill_floor_s"] == prefill / gpu.BF16_FLOP_S
    step_bytes = 90_432 * 4 + 4 * 18.5 * 512
    step_flops = 4 * (2 * (73_728 + 16_384) + 4 * 128 * 18.5)
    assert step_bytes / gpu.HBM_BYTES_S > step_flops / gpu.BF16_FLOP_S
    assert got["decode_bound"] == "bytes"
    assert abs(got["decode_floor_tok_s"] - 4 / (step_bytes / gpu.HBM_BYTES_S)) < 1e-6 * got["decode_floor_tok_s"]


@pytest.mark.e2e
def test_the_smoke_run_goes_through_every_part_and_leaves_the_page_alone(tmp_path):
    """``--smoke``: the engine against generate on both shapes, a parallel and a sequential train step, the default
    run end to end, the table; ``--page`` is not written from a CPU's figures."""
    page = tmp_path / "measurements.md"
    page.write_text("<!-- bench:gpu -->\nnot yet measured\n<!-- /bench:gpu -->\n")
    before = page.read_text()
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu.py"), "--smoke", "--out", str(out), "--page", str(page)],
        check=False, cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    engine = json.loads((out / "gpu-engine.json").read_text())["result"]
    assert [(r["shape"], r["rows"]) for r in engine] == [(s, n) for s in gpu.SHAPES for n in (2, 4)]
    for r in engine:
        assert "error" not in r
        assert r["engine_decode_tok_s"] > 0
        assert r["generate_decode_tok_s"] > 0
        assert r["engine_prefill_s"] > 0
    train = json.loads((out / "gpu-train.json").read_text())["result"]
    assert [r["sampler"] for r in train] == ["parallel", "sequential"]
    for r in train:
        assert "error" not in r, r
        assert 0 < r["sample_s"] + r["update_s"] <= r["step_s"]
    default = json.loads((out / "gpu-default.json").read_text())["result"]
    assert default["exit"] == 0, default
    assert 0.0 <= default["final_eval_success"] <= 1.0
    table = (out / "gpu.md").read_text()
    assert "| SmolLM2-135M | 4 |" in table
    assert "sequential / parallel" in table
    assert page.read_text() == before
