"""Resume is exact: a run stopped at step 4 and revived for 4 more ends bit-identical to the uninterrupted run.

With a KL term too: the reference of a revived run is the base its lineage started from, recorded in
run.json, not the checkpoint it resumes from.
"""

from __future__ import annotations

import json
import shutil
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


# ---------------------------------------------------------------------------------- issue 67: what a resume trusts
def _stopped_after(argv: list[str], step: int, monkeypatch) -> int:
    """Run ``sesa <argv>`` in-process and stop it with a real Ctrl-C (SIGINT to this process) once ``step`` is done:
    the trainer saves its checkpoint at that step and the command exits 130, as at a terminal."""
    import os
    import signal

    from sesa_cli import progress

    original = progress.TrainProgress.update

    def update(self, at, row):
        original(self, at, row)
        if at == step:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(progress.TrainProgress, "update", update)
    try:
        return run_cli(argv, monkeypatch)
    finally:
        monkeypatch.setattr(progress.TrainProgress, "update", original)


def _files(run: Path, but: tuple[str, ...] = ()) -> dict[str, bytes]:
    return {
        str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name not in but
    }


@pytest.fixture(scope="module")
def stopped_at_4(tmp_path_factory, tiny_overrides):
    """(the command's settings, an uninterrupted run of them, the same run stopped by Ctrl-C after step 4: checkpoints
    at steps 2 and 4)."""
    settings = [*tiny_overrides, *SMALL, "sampler=parallel", "train.steps=5", "train.checkpoint_every=2", "seed=5"]
    root = tmp_path_factory.mktemp("stopped")
    whole, stopped = root / "whole", root / "stopped"
    mp = pytest.MonkeyPatch()
    try:
        assert run_cli(["train", *settings, f"hydra.run.dir={whole}"], mp) == 0
        assert _stopped_after(["train", *settings, f"hydra.run.dir={stopped}"], 4, mp) == 130
    finally:
        mp.undo()
    assert sorted(p.name for p in (stopped / "checkpoints").iterdir()) == ["step_000002", "step_000004"]
    return settings, whole, stopped


def test_a_cut_last_row_at_the_checkpoints_step_is_restored_on_resume(stopped_at_4, tmp_path, monkeypatch, capsys):
    # issue 67 case 2: the last 40 bytes of metrics.jsonl cut (step 4's last row torn): the resumed run's rows are the
    # uninterrupted run's, step 4's row put back from the checkpoint's copy (it was dropped without a word)
    settings, whole, stopped = stopped_at_4
    run = tmp_path / "run"
    shutil.copytree(stopped, run)
    metrics = run / "metrics.jsonl"
    metrics.write_bytes(metrics.read_bytes()[:-40])
    assert [json.loads(line)["step"] for line in (stopped / "metrics.jsonl").read_text().splitlines()][-2:] == [3, 4]
    capsys.readouterr()
    assert run_cli(["train", *settings, f"hydra.run.dir={run}"], monkeypatch) == 0
    assert "1 row(s) of step 4 were cut; restored from the checkpoint's copy" in capsys.readouterr().out
    assert _rows(run) == _rows(whole)
    assert json.loads((run / "run.json").read_text())["resumed"] == [4]


def test_rows_lost_beyond_the_checkpoints_copy_refuse_the_resume(stopped_at_4, tmp_path, monkeypatch, capsys):
    # rows of steps before the checkpoint's are gone (not a cut last row): the copy cannot give them back, and a
    # resumed run's records would not read as one run; one line, nothing in the dir changed, the run stays interrupted
    from tests.test_damaged_inputs import check_one_line

    settings, _, stopped = stopped_at_4
    run = tmp_path / "run"
    shutil.copytree(stopped, run)
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(line for line in lines if json.loads(line)["step"] != 3))
    before = _files(run)
    capsys.readouterr()
    code = run_cli(["train", *settings, f"hydra.run.dir={run}"], monkeypatch)
    line = check_one_line(code, capsys.readouterr().err, f"{run}/metrics.jsonl holds ")
    assert (
        f"rows up to step 4 and its checkpoint recorded {len([x for x in lines if json.loads(x)['step'] <= 4])}"
        in line
    )
    assert f"choose a new directory, or revive the checkpoint into one: sesa revive ckpt={run}/checkpoints/" in line
    assert _files(run) == before  # refused before Hydra's job wrote into the dir: run.json says interrupted still
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["reason"], info["exit_code"]) == ("interrupted", "Ctrl-C", 130)


def test_a_damaged_last_checkpoint_names_the_intact_one_and_how_to_continue(stopped_at_4, tmp_path, monkeypatch,
                                                                          capsys):  # fmt: skip
    # issue 67 cases 5 and 9: one bit of the last checkpoint's weights flipped (the file still loads): the resume is
    # refused naming the file, run.json keeps how the run ended, the message names the previous checkpoint, intact,
    # and how to continue from it; doing what it says resumes from step 2 and ends as the uninterrupted run
    from tests.test_damaged_inputs import check_one_line, flip

    settings, whole, stopped = stopped_at_4
    run = tmp_path / "run"
    shutil.copytree(stopped, run)
    last, previous = run / "checkpoints" / "step_000004", run / "checkpoints" / "step_000002"
    flip("checkpoints/step_000004/model.safetensors")(run)
    before = _files(run)
    capsys.readouterr()
    code = run_cli(["train", *settings, f"hydra.run.dir={run}"], monkeypatch)
    line = check_one_line(code, capsys.readouterr().err, f"{last}/model.safetensors is damaged: its sha256 differs")
    assert line.endswith(
        f"; the run's previous checkpoint, step 2 ({previous}), is intact: to continue from it, move {last} out of "
        f"{run / 'checkpoints'} and rerun this command"
    )
    assert _files(run) == before  # run.json keeps how the run ended (it once went interrupted -> failed)
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["reason"]) == ("interrupted", "Ctrl-C")

    last.rename(tmp_path / "aside")
    assert run_cli(["train", *settings, f"hydra.run.dir={run}"], monkeypatch) == 0
    assert _rows(run) == _rows(whole)
    assert json.loads((run / "run.json").read_text())["resumed"] == [2]
