"""docs/results.md machinery (scripts/results.py, the claims in scripts/claims.yaml): the recipes' commands, resuming
sweeps, and the page from a fake sweep."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import fields, is_dataclass
from itertools import product
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sesa_cli.config import conf_dir
from sesa_cli.report import analyse
from tests.conftest import compose_train
from tests.fake_runs import write_revival, write_run, write_sized_head_to_head
from tests.scripts import results as R

SEEDS = (0, 1)
H2H_ALGOS = R.sweep_named("h2h").overrides[-1].partition("=")[2].split(",")
"""Claim VIII's algo presets, GRPO first."""


def _header_commands(recipe: str) -> list[str]:
    """The shell commands in a recipe's header comment, continuation lines joined, $C / $CKPTS expanded."""
    lines = []
    for line in (conf_dir() / "experiment" / f"{recipe}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").rstrip())
    text = "\n".join(lines).replace("\\\n", "")
    variables = {}
    commands = []
    for line in text.splitlines():
        for assignment in re.findall(r"(\w+)=(\S+?)(?:;|$)", line) if line.startswith("C=") else []:
            variables[assignment[0]] = re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], assignment[1])
        if "sesa " in line:
            line = re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], line)
            commands.append(re.sub(r"\s+", " ", line[line.index("sesa ") :]).strip())
    return commands


@pytest.mark.parametrize("sweep", R.SWEEPS, ids=lambda s: s.name)
def test_recipe_headers_give_the_sessions_commands(sweep: R.Sweep) -> None:
    """What `nox -s results` runs is what the recipe tells a user to type (its seeds, outputs/claims)."""
    wanted = R.recipe_command(sweep)
    matching = [
        c.split()
        for c in _header_commands(sweep.recipe)
        if f"hydra.sweep.dir=outputs/claims/{sweep.name}" in c.split()
    ]
    assert len(matching) == 1, _header_commands(sweep.recipe)
    assert matching[0][:3] == wanted[:3]  # sesa <command> -m
    assert sorted(matching[0]) == sorted(wanted)


@pytest.mark.parametrize("claim", R.CLAIMS, ids=lambda c: c.key)
def test_recipe_headers_give_the_claims_report_commands(claim: R.Claim) -> None:
    recipes = {R.sweep_named(name).recipe for name in claim.sweeps}
    assert any(R.report_command(claim) in _header_commands(recipe) for recipe in recipes)


def test_the_comparison_sweeps_every_variant_explicitly() -> None:
    for name in ("discovery", "revive_sequential"):
        argv = R.recipe_command(R.sweep_named(name))
        assert "algo.off_policy=paper,distinct_solutions" in argv
        assert "algo.terms.found.coef=0" in argv  # the variants without the term; the default sweeps have it
        assert "sampler.stage1=sketch" in argv
    for name in ("discovery_default", "revive_default", "revive_deep"):
        assert not any(a.startswith("algo.") for a in R.recipe_command(R.sweep_named(name)))  # the recipe's own loss
    assert "seed=0,1,2,3,4,5,6,7,8,9" in R.recipe_command(R.sweep_named("collapse"))
    assert "seed=0,1,2,3,4" in R.recipe_command(R.sweep_named("frozenlake"))


def _flat_config(config: Any, prefix: str = "") -> dict[str, Any]:
    """A composed config as ``dotted.key -> value``."""
    if is_dataclass(config):
        config = {f.name: getattr(config, f.name) for f in fields(config)}
    if not isinstance(config, dict):
        return {prefix[:-1]: config}
    return {k: v for name, value in config.items() for k, v in _flat_config(value, f"{prefix}{name}.").items()}


@pytest.mark.parametrize(
    ("key", "steps"),
    [
        ("VIII", 120),
        ("IX", 150),
        ("X", 150),
        ("XI", 150),
        ("XII", 300),
        ("XIII", 150),
        ("XIV", 150),
        ("XIX", 150),
        ("XX", 150),
        ("XXI", 120),
        ("XXII", 120),
    ],
)
def test_the_head_to_head_groups_differ_from_grpo_by_their_method_only(key: str, steps: int) -> None:
    """Claims VIII-XIV: every group's composed config differs from GRPO's (group [1]) in its method's keys only (the
    algo settings, the sampler and its filters; IX-XII's GRPO runs are claims IV, VII, VI and V's, which also keep
    checkpoints), never in the recipe's budget, optimizer, task or model."""
    claim = next(c for c in R.CLAIMS if c.key == key)
    groups, sweeps = [], []
    for name in claim.sweeps:
        fixed, swept = R._axes(R.sweep_named(name).overrides)
        for values in product(*swept.values()):
            groups.append([*fixed, *(f"{k}={v}" for k, v in zip(swept, values, strict=True))])
            sweeps.append(name)
    configs = [_flat_config(compose_train(overrides)) for overrides in groups]
    baseline = configs[0]
    assert (baseline["sampler.name"], baseline["algo.name"], baseline["train.steps"]) == ("parallel", "grpo", steps)
    method = ("algo.", "sampler.name", "sampler.filters.", "sampler.parallel_rows", "train.checkpoint_every")
    for name, overrides, config in zip(sweeps[1:], groups[1:], configs[1:], strict=True):
        differing = {k for k in baseline.keys() | config.keys() if baseline.get(k) != config.get(k)}
        assert differing, overrides
        # GRPO at another method's compute (claim XV's group, listed in IX) differs by its group size alone
        allowed = ("sampler.group_size", "train.checkpoint_every") if name.endswith("_equal_compute") else method
        assert all(k.startswith(allowed) for k in differing), (overrides, sorted(differing))
    assert len({tuple(sorted(map(str, c.items()))) for c in configs}) == len(configs)  # no two groups alike


# ----------------------------------------------------------------------------------------------- a fake sweep
def fake_claims(root: Path, seeds: tuple[int, ...] = SEEDS) -> None:
    """Complete runs of every sweep under ``root``, laid out and named as the session runs them (revive_sequential:
    one of its two losses, so a resumed session has something to run)."""
    for job, seed in enumerate(seeds):
        write_run(root / "collapse" / str(job), {"experiment": "collapse_revival", "seed": seed}, policy=True)
        found = {
            "experiment": "collapse_revival",
            "algo.terms.found.rows": "all",
            "train.checkpoint_every": 0,
            "seed": seed,
        }
        write_run(root / "parallel_found" / str(job), found, policy=True)
        default = {"experiment": "discovery", "sampler": "sequential", "sampler.stage1": "sketch", "seed": seed}
        write_run(root / "discovery_default" / str(job), default, policy=True)
    job = 0
    for variant in ("paper", "distinct_solutions"):
        for seed in seeds:
            overrides = {
                "experiment": "discovery",
                "sampler": "sequential",
                "algo.off_policy": variant,
                "algo.terms.found.coef": 0,
                "sampler.stage1": "sketch",
                "seed": seed,
            }
            write_run(root / "discovery" / str(job), overrides, policy=True)
            job += 1
    for job in range(len(seeds)):
        parent = root / "collapse" / str(job)
        write_revival(root / "revive_parallel" / str(job), parent, at=6, overrides={"sampler": "parallel"})
        write_revival(
            root / "revive_sequential" / str(job),
            parent,
            at=6,
            overrides={
                "sampler": "sequential",
                "algo.off_policy": "distinct_solutions",
                "algo.terms.found.coef": 0,
                "sampler.stage1": "sketch",
            },
        )
        default = {"sampler": "sequential", "sampler.stage1": "sketch"}
        write_revival(root / "revive_default" / str(job), parent, at=6, overrides=default)
        write_revival(root / "revive_deep" / str(job), parent, at=6, overrides={**default, "step": "last"})
    head_to_head = [("h2h", {"algo": algo}) for algo in H2H_ALGOS] + [
        ("h2h_sesa", {"sampler": "sequential"}),
        ("h2h_lte", {"sampler": "lte"}),
        (
            "h2h_lte_is",
            {"sampler": "lte", "algo.loss_context": "is", "algo.off_policy": "paper", "algo.terms.found.coef": 0},
        ),
    ]
    jobs: dict[str, int] = {}
    for sweep, method in head_to_head:
        for seed in seeds:
            job = jobs.setdefault(sweep, 0)
            overrides = {"experiment": "collapse_revival", "train.checkpoint_every": 0, **method, "seed": seed}
            write_run(root / sweep / str(job), overrides, policy=True)
            jobs[sweep] += 1
    for sweep, task in (
        ("frozenlake", "frozenlake"),
        ("sokoban", "sokoban"),
        ("countdown", "countdown"),
        ("frozenlake_5x5", "frozenlake"),
    ):
        job = 0
        for sampler in ("parallel", "sequential"):
            for seed in seeds:
                write_run(
                    root / sweep / str(job),
                    {"experiment": f"{sweep}_tiny", "sampler": sampler, "seed": seed},
                    task=task,
                    coverage=False,
                )
                job += 1
    for job, (sampler, seed) in enumerate((s, seed) for s in ("parallel", "sequential") for seed in (0, 1, 2)):
        real = {"experiment": "smollm2_larger", "sampler": sampler, "seed": seed}
        write_run(root / "smollm2_larger" / str(job), real, task="math", coverage=False)
    # claims VIII-XII and XIX-XXIV: the head-to-head, tuning, check and equal-compute sweeps, each job as its sweep's axes give it
    session = R.Session(root, seeds)
    for sweep in R.SWEEPS:
        fixed = dict(pair.split("=", 1) for pair in R._axes(sweep.overrides)[0])
        if sweep.name.startswith(("tune_path_", "check_path_", "path_")):
            for job, swept in enumerate(session.jobs(sweep)):
                write_run(root / sweep.name / str(job), {**fixed, **swept}, policy=True)
        elif (
            sweep.name.startswith(("h2h_", "tune_", "check_")) or sweep.name.endswith("_equal_compute")
        ) and sweep.recipe != "collapse_revival":
            task = {"countdown_tiny": "countdown", "sokoban_tiny": "sokoban"}.get(sweep.recipe, "frozenlake")
            for job, swept in enumerate(session.jobs(sweep)):
                write_run(root / sweep.name / str(job), {**fixed, **swept}, task=task, coverage=False)


def test_page_from_a_fake_sweep(tmp_path: Path) -> None:
    root, docs = tmp_path / "claims", tmp_path / "docs"
    fake_claims(root)
    session = R.Session(root, SEEDS)
    page = R.render(session, docs)
    text = page.read_text()
    for claim in R.CLAIMS:
        assert f"## {claim.key}. {claim.title}" in text
    # claim II: parallel vs the three sequential variants; the difference in target mass is -0.102 at every seed
    # (sequential 0.3 + 0.3 + 0.2 + 0.05, parallel 0.9 + 0.001 + 0.001 + 0.05, the same seed offset): paired, a point
    section = text[text.index("## II.") : text.index("## III.")]
    assert "| [1] parallel " in section
    assert "| [2] parallel found.rows=all " in section
    assert section.count("| [") == 5 + 4  # headline rows, difference rows
    assert " off_policy=paper found.coef=0 | +2.23 [2.21, 2.24] | -0.102 [-0.102, -0.102] |" in section
    # claim III: parallel, one of the two losses, the default and the default from the last checkpoint; IV: the
    # agent task's headline
    section = text[text.index("## III.") : text.index("## IV.")]
    assert "Difference to [1] parallel" in section
    assert section.count("| [") == 4 + 3
    assert "step=last" in section
    assert "| group | n | runs lost | eval/success |" in text[text.index("## IV.") :]
    # IV, V and VI in the paper's form: the fabricated eval/success is (0.1 + slope * step + 0.01 * seed) / 2, slope 0.03
    # (parallel) or 0.05 (sequential), 10 steps: both start at 0.0525 (seeds 0, 1), gain 0.15 and 0.25, and
    # 0.25 / 0.15 - 1 = +67%
    for key, end in (("IV", "## V."), ("V", "## VI."), ("VI", None)):
        section = text[text.index(f"## {key}.") : text.index(end) if end else None]
        assert (
            "| [1] parallel | 0.0525 [0.0500, 0.0550] | 0.203 [0.200, 0.205] | +0.150 [0.150, 0.150] | baseline |"
            in section
        )
        assert (
            "| [2] sequential | 0.0525 [0.0500, 0.0550] | 0.302 [0.300, 0.305] | +0.250 [0.250, 0.250] | +67% |"
            in section
        )
    assert "The paper's form" not in text[: text.index("## IV.")]
    # VIII: every method one group, GRPO the baseline, each other group compared with it
    section = text[text.index("## VIII.") : text.index("## IX.")]
    groups = len(H2H_ALGOS) + 3 + 2  # the methods' sweep, SESA, LTE twice, GRPO at 16 and 32 a prompt
    assert section.count("| [") == groups + groups - 1  # no cost recorded: no table at equal compute
    assert "Difference to [1] parallel grpo " in section
    for n, algo in enumerate(H2H_ALGOS[1:], start=2):
        assert f"| [{n}] parallel {algo} " in section
    assert "The paper's form" not in section
    for key, plots in (
        ("I", ("heatmap", "policy")),
        ("II", ("heatmap", "policy")),
        ("IV", ("sampling",)),
        ("VIII", ("tradeoff", "policy")),
    ):
        for name in plots:
            assert (docs / "results" / key / f"{name}.png").is_file()
            assert f"](results/{key}/{name}.png)" in text
    # the page names its commands: the recipe's sweep and report commands
    assert "OMP_NUM_THREADS=1 sesa train -m experiment=discovery" in text
    assert R.report_command(R.CLAIMS[1]) in text
    # it names the run root and the reports relative to the repository, or to a root outside it, never as the
    # machine's own directories
    assert str(tmp_path) not in text
    assert "runs under `<root>` (a --root outside the repository)" in text
    assert "Full report: `<root>/reports/IV/report.html`." in text
    # equal tuning: every setting of claim XIX with its pick and the winner, then the picks on XX's seeds
    section = text[text.index("## XIX.") : text.index("## XX.")]
    assert "Equal tuning. The rule the settings were chosen by" in section
    assert R.WINNER in section
    assert "agree." in text[text.index("## XX.") : text.index("## XXI.")]
    assert R.WINNER in text[text.index("## XXI.") : text.index("## XXII.")]
    assert R.WINNER in text[text.index("## XXIII.") : text.index("## XXIV.")]
    assert "agree." in text[text.index("## XXIV.") :]
    assert "agree." in text[text.index("## XXII.") :]


def test_a_claim_is_rewritten_alone_and_the_other_sections_kept(tmp_path: Path) -> None:
    root, docs = tmp_path / "claims", tmp_path / "docs"
    fake_claims(root)
    session = R.Session(root, SEEDS)
    before = R.page_sections(R.render(session, docs).read_text())
    assert list(before) == [c.key for c in R.CLAIMS]
    for key, lines in before.items():  # every section says where its numbers come from
        runs = {"IV": 3 * len(SEEDS), "V": 2 * len(SEEDS), "VI": 2 * len(SEEDS), "VII": 2 * len(SEEDS)}.get(key)
        assert any(line.startswith(f"Seeds 0, 1: {runs or ''}") for line in lines), key
    shutil.rmtree(root / "frozenlake")  # claim IV's runs are gone: rewriting claim I keeps IV's section as it was
    after = R.page_sections(R.render(session, docs, [R.CLAIMS[0]]).read_text())
    assert after["IV"] == before["IV"]
    assert after["V"] == before["V"]
    shutil.rmtree(root / "frozenlake_g16_equal_compute")  # and its other sweep's: IV has no run left
    assert "Not run yet." in R.page_sections(R.render(session, docs, [R.CLAIMS[3]]).read_text())["IV"]


def test_the_page_names_paths_in_the_repository_relative_to_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "outputs" / "claims"
    assert R.shown(root, root) == "outputs/claims"
    assert R.shown(root / "reports" / "I" / "report.html", root) == "outputs/claims/reports/I/report.html"
    outside = tmp_path.parent / "elsewhere"
    assert R.shown(outside / "reports" / "I", outside) == "<root>/reports/I"


def test_missing_runs_are_said_not_invented(tmp_path: Path) -> None:
    root = tmp_path / "claims"
    write_run(root / "collapse" / "0", {"experiment": "collapse_revival", "seed": 0}, policy=True)
    text = R.render(R.Session(root, SEEDS), tmp_path / "docs").read_text()
    assert "Task path · 1 runs in 1 group · seeds 0." in text
    assert text.count("Not run yet.") == 23  # claims III-XXV; II shows the parallel runs it has
    assert "- **Incomplete:** 1 of the 2 jobs of sweep `collapse` have finished." in text
    assert "- **Incomplete:** 0 of the 4 jobs of sweep `discovery` have finished." in text


# ------------------------------------------------------------------------------------------------- resuming
def test_resume_runs_only_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "claims"
    fake_claims(root)
    calls: list[list[str]] = []
    monkeypatch.setattr(R, "_run", lambda argv, log, name: calls.append(argv))
    session = R.Session(root, SEEDS)
    for sweep in R.SWEEPS:
        R.run_sweep(session, sweep, root / "session.log")
    # complete sweeps are not rerun; revive_sequential has 1 of its 2 losses for both checkpoints: the other runs
    # as one multirun over the two checkpoints
    assert [argv[1] for argv in calls] == ["revive"]
    ckpts = f"ckpt={root / 'collapse' / '0'},{root / 'collapse' / '1'}"
    assert ckpts in calls[0]
    assert "algo.off_policy=paper" in calls[0]
    assert "algo.terms.found.coef=0" in calls[0]
    assert "sampler.stage1=sketch" in calls[0]
    assert [a for a in calls[0] if a.startswith("hydra.sweep.dir")] == [
        f"hydra.sweep.dir={root}/revive_sequential.retry1"
    ]
    calls.clear()
    # a killed job: its dir is moved aside (kept) and only its seed is run again, in a new sweep dir
    metrics = root / "discovery" / "3" / "metrics.jsonl"
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:5]))
    notes = R.run_sweep(session, R.sweep_named("discovery"), root / "session.log")
    assert len(calls) == 1
    # job 3 of the fake sweep: off_policy=distinct_solutions, seed 1
    assert sorted(calls[0][3:-3]) == sorted(
        [
            "experiment=discovery",
            "algo.off_policy=distinct_solutions",
            "algo.terms.found.coef=0",
            "sampler.stage1=sketch",
            "seed=1",
        ]
    )
    assert calls[0][-1] == f"hydra.sweep.dir={root / 'discovery.retry1'}"
    assert not (root / "discovery" / "3").exists()
    assert len(list((root / "discovery").glob(".3.incomplete.*"))) == 1
    job = "{'algo.off_policy': 'distinct_solutions', 'seed': '1'}"
    assert notes == [f"discovery: job {job} did not finish"]


def test_revivals_wait_for_their_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "claims"
    write_run(root / "collapse" / "0", {"experiment": "collapse_revival", "seed": 0})
    calls: list[list[str]] = []
    monkeypatch.setattr(R, "_run", lambda argv, log, name: calls.append(argv))
    notes = R.run_sweep(R.Session(root, SEEDS), R.sweep_named("revive_parallel"), root / "session.log")
    assert notes[0] == "revive_parallel: no complete collapse run of seed 1 to revive"
    assert f"ckpt={root / 'collapse' / '0'}" in calls[0]


def test_revivals_run_by_hand_with_relative_paths_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the recipes' header commands: ckpt=outputs/claims/collapse/0, relative to where they were typed
    monkeypatch.chdir(tmp_path)
    root = Path("outputs/claims")
    parent = write_run(root / "collapse" / "0", {"experiment": "collapse_revival", "seed": 0})
    write_revival(root / "revive_parallel" / "0", parent, at=6, overrides={"sampler": "parallel"})
    session = R.Session(root.resolve(), (0,))
    assert [path.name for _, path in session.complete(R.sweep_named("revive_parallel"))] == ["0"]


def test_two_lanes_keep_both_cores_busy_and_revivals_wait_for_their_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    events: list[tuple[str, str, int]] = []
    lock = threading.Lock()

    def fake_run_sweep(session: R.Session, sweep: R.Sweep, log: Path, jobs: int = 2) -> list[str]:
        with lock:
            events.append(("start", sweep.name, jobs))
        time.sleep(0.05)
        with lock:
            events.append(("end", sweep.name, jobs))
        return [f"{sweep.name} ran"]

    monkeypatch.setattr(R, "run_sweep", fake_run_sweep)
    names = ["collapse", "revive_parallel", "frozenlake", "sokoban", "countdown"]
    sweeps = [R.sweep_named(n) for n in names]
    for seed in SEEDS:  # countdown's runs are all there: it costs nothing
        for job, sampler in enumerate(["parallel", "sequential"]):
            write_run(
                tmp_path / "countdown" / str(2 * seed + job),
                {"experiment": "countdown_tiny", "sampler": sampler, "seed": seed},
                task="countdown",
                coverage=False,
            )
    notes = R.run_sweeps(R.Session(tmp_path, SEEDS), sweeps, tmp_path / "session.log")
    assert sorted(notes) == sorted(f"{n} ran" for n in names)
    assert {jobs for _, _, jobs in events} == {1}  # one job at a time in each lane
    order = [name for kind, name, _ in events if kind == "start"]
    assert order[0] == "sokoban"  # the costliest first (a Sokoban run costs several path runs)
    assert order.index("countdown") > order.index("collapse")  # nothing left to run: after every ready sweep
    assert events.index(("start", "revive_parallel", 1)) > events.index(("end", "collapse", 1))
    running, most = 0, 0
    for kind, _, _ in events:
        running += 1 if kind == "start" else -1
        most = max(most, running)
    assert most == 2


def test_a_stopped_session_starts_no_more_multiruns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def interrupted(argv: list[str], log: Path, name: str) -> None:
        calls.append(name)
        raise KeyboardInterrupt  # as the main thread gets it while a multirun runs

    monkeypatch.setattr(R, "_run", interrupted)
    sweeps = [R.sweep_named(n) for n in ("frozenlake", "countdown", "sokoban")]
    with pytest.raises(KeyboardInterrupt):
        R.run_sweeps(R.Session(tmp_path, SEEDS), sweeps, tmp_path / "session.log")
    assert len(calls) <= 2  # one per lane at most: nothing started after the stop
    assert R._STOPPING.is_set()


def test_sweeps_that_ran_at_once_share_the_wall_time() -> None:
    def record(name: str, started: str, seconds: float) -> dict[str, Any]:
        return {"sweep": name, "started": started, "seconds": seconds}

    # a and b overlap for 60 s (each gets 30 of them), c ran alone later; an old record (no start) ran alone
    records = [
        record("a", "2026-12-03T10:00:00", 120),
        record("b", "2026-12-03T10:01:00", 120),
        record("c", "2026-12-03T11:00:00", 50),
        {"sweep": "old", "finished": "2026-12-02T10:00:00", "seconds": 300},
    ]
    shares = R.machine_shares(records)
    assert shares == pytest.approx([90, 90, 50, 300])
    # the shares of a session add up to the time anything ran
    assert sum(shares) == pytest.approx(180 + 50 + 300)


def test_the_least_time_on_n_cores_is_the_total_over_them_or_the_longest_revival_chain(tmp_path: Path) -> None:
    def run(name: str, minutes: float, parent: Path | None = None, ended: bool = True) -> Path:
        path = tmp_path / name
        path.mkdir()
        end = f"2026-12-07T10:{minutes:02.0f}:00" if ended else None
        info = {"started": "2026-12-07T10:00:00", "ended": end, "parent_run": str(parent) if parent else None}
        (path / "run.json").write_text(json.dumps(info))
        return path

    # two collapse runs of 10 min, a 5-min revival of the first, five 3-min runs, one unfinished (not counted)
    first = run("collapse0", 10)
    runs = [first, run("collapse1", 10), run("revive0", 5, parent=first), *(run(f"h2h{i}", 3) for i in range(5))]
    runs.append(run("killed", 30, ended=False))
    timed = {path.resolve(): t for path in runs if (t := R.run_seconds(path)) is not None}
    assert len(timed) == 8
    assert R.least_time(timed, 1) == 40 * 60  # one core: the total
    assert R.least_time(timed, 2) == 20 * 60  # the total over two cores
    assert R.least_time(timed, 16) == 15 * 60  # many cores: the revival waits for its 10-min parent
    text = R.cores_sentence(runs, cores=(1, 2, 16))
    assert "The page's 8 runs took 0.7 core-hours" in text
    assert "on 1, 2 or 16 cores, one job each, their sweeps would take at least 40 min, 20 min or 15 min" in text
    assert R.cores_sentence([runs[-1]]) == ""


def test_the_launcher_chooses_the_multiruns_overrides_and_lanes(tmp_path: Path, monkeypatch) -> None:
    sweep = R.sweep_named("collapse")
    axes = {"seed": ["0", "1"]}
    joblib = R.command(R.Session(tmp_path), sweep, axes, tmp_path / "collapse", 1)
    assert joblib[-3:] == ["hydra/launcher=joblib", "hydra.launcher.n_jobs=1", f"hydra.sweep.dir={tmp_path}/collapse"]
    ray = R.command(R.Session(tmp_path, launcher=R.Launcher("ray", "auto")), sweep, axes, tmp_path / "collapse", 1)
    assert ray[-5:] == ["hydra/launcher=ray", "hydra.launcher.ray.init.address=auto",
                        "+hydra.launcher.ray.init.object_store_memory=null", "+hydra.launcher.ray.remote.num_cpus=1",
                        f"hydra.sweep.dir={tmp_path}/collapse"]  # fmt: skip
    assert not any("n_jobs" in a for a in ray)
    slurm = R.Session(tmp_path, extra=("hydra.launcher.partition=cpu",), launcher=R.Launcher("submitit_slurm"))
    argv = R.command(slurm, sweep, axes, tmp_path / "collapse")
    assert "hydra/launcher=submitit_slurm" in argv
    assert "hydra.launcher.partition=cpu" in argv
    assert (R.Launcher().lanes(), R.Launcher("ray").lanes(), R.Launcher("ray", "auto").lanes()) == (2, 1, None)
    # joblib's jobs get one thread; Ray sets a task's OMP_NUM_THREADS itself
    envs = []
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(
        R.subprocess, "run", lambda argv, env, **_: envs.append(env) or R.subprocess.CompletedProcess(argv, 0)
    )
    for argv in (joblib, ray):
        R._run(argv, tmp_path / "session.log", "collapse")
    assert [env.get("OMP_NUM_THREADS") for env in envs] == ["1", None]
    assert "$ OMP_NUM_THREADS=1 sesa train" in (tmp_path / "session.log").read_text()
    assert "$ sesa train -m experiment=collapse_revival" in (tmp_path / "session.log").read_text()


def test_a_cluster_runs_every_ready_sweep_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    running, most, order = [], [0], []
    lock = threading.Lock()

    def fake_run_sweep(session: R.Session, sweep: R.Sweep, log: Path, jobs: int = 2) -> list[str]:
        with lock:
            running.append(sweep.name)
            order.append(("start", sweep.name))
            most[0] = max(most[0], len(running))
        time.sleep(0.05)
        with lock:
            running.remove(sweep.name)
            order.append(("end", sweep.name))
        return []

    monkeypatch.setattr(R, "run_sweep", fake_run_sweep)
    sweeps = [R.sweep_named(n) for n in ("collapse", "revive_parallel", "frozenlake", "sokoban", "countdown")]
    R.run_sweeps(R.Session(tmp_path, SEEDS), sweeps, tmp_path / "session.log", lanes=None)
    assert most[0] == 4  # every sweep but the revival at once
    assert order.index(("start", "revive_parallel")) > order.index(("end", "collapse"))


@pytest.mark.slow
def test_smoke_session_end_to_end(tmp_path: Path, cache_dir: Path) -> None:
    """`nox -s results -- --smoke`: real sweeps of 2 seeds x 3 steps, then the page (a few minutes)."""
    root = tmp_path / "claims"
    assert R.main(["--smoke", "--root", str(root), f"model.cache_dir={cache_dir}"]) == 0
    text = (root / "docs" / "results.md").read_text()
    assert "**Smoke run**" in text
    assert "Not run yet." not in text
    assert "Missing:" not in text


def test_one_winning_answer_per_instance_is_said(tmp_path: Path) -> None:
    """When every run's final distinct correct@k equals its pass@k the page says so, once; otherwise nothing."""
    from sesa_cli.report.document import analyse

    runs = []
    for job, (sampler, seed) in enumerate([(s, seed) for s in ("parallel", "sequential") for seed in SEEDS]):
        runs.append(
            write_run(tmp_path / str(job), {"sampler": sampler, "seed": seed}, task="countdown", coverage=False)
        )
    report = analyse(runs, ("parallel", "sequential"))
    R.use_headline(report, R.AGENT_HEADLINE)
    assert R.one_answer_note(report) == []
    for run in runs:
        path = run / "metrics.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        last = max(i for i, r in enumerate(rows) if "eval/pass@16" in r)
        rows[last]["eval/distinct_correct@16"] = rows[last]["eval/pass@16"]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = analyse(runs, ("parallel", "sequential"))
    R.use_headline(report, R.AGENT_HEADLINE)
    (note, _) = R.one_answer_note(report)
    assert "exactly one distinct winning answer among its 16 samples" in note


@pytest.mark.parametrize(
    ("items", "name"),
    [
        ({"sampler": "parallel", "algo": "grpo", "algo.terms.found.coef": "0.2"}, "GRPO"),
        ({"sampler": "parallel", "algo": "outcome_bonus", "algo.terms.found.coef": "0.2"}, "outcome_bonus"),
        ({"sampler": "parallel", "algo": "darling"}, "darling"),
        ({"sampler": "sequential", "algo": "grpo"}, "SESA"),
        ({"sampler": "sequential", "algo": "unlikeliness"}, "SESA+unlikeliness"),
        ({"sampler": "lte", "algo": "grpo", "algo.loss_context": "prompt"}, "LTE"),
        ({"sampler": "lte", "algo": "grpo", "algo.loss_context": "is", "algo.off_policy": "paper"}, "LTE (IS loss)"),
        (
            {"sampler": "parallel", "algo": "unlikeliness", "algo.terms.unlikeliness.negatives": "keep"},
            "unlikeliness (negatives kept)",
        ),
        ({"sampler": "parallel", "algo": "grpo", "sampler.group_size": "16"}, "GRPO (16 a prompt)"),
    ],
)
def test_each_head_to_head_group_is_named_by_its_method(items: dict, name: str) -> None:
    """A group's method from what it is (its items, as data), never from the words of its label."""
    assert R.method_name(items) == name


def test_the_head_to_head_figure_is_drawn_from_the_sections_group_tables(tmp_path: Path) -> None:
    """A panel per head-to-head claim whose section wrote its groups.csv, at the claim's diversity metric; nothing
    (None) where no section wrote one."""
    assert R.head_to_head_figure(tmp_path) is None
    groups = (("[1] parallel grpo", 0.0, {"sampler": "parallel", "algo": "grpo"}),
              ("[2] sequential grpo", 2.0, {"sampler": "sequential", "algo": "grpo"}))  # fmt: skip
    for claim in ("VIII", "XI"):  # XI's table written before groups carried their items: labels name the methods
        diversity = R.HEAD_TO_HEAD["claims"][claim]
        (tmp_path / claim).mkdir()
        rows = [{"group": group, "metric": metric, "n_seeds": 5, "final_mean": mean, "final_low": mean - 0.1,
                 "final_high": mean + 0.1, **({"items": json.dumps(items)} if claim == "VIII" else {})}
                for group, shift, items in groups for metric, mean in ((diversity, 1.0 + shift), ("eval/success", 0.9))]  # fmt: skip
        pd.DataFrame(rows).to_csv(tmp_path / claim / R.GROUPS_CSV, index=False)
        table = pd.read_csv(tmp_path / claim / R.GROUPS_CSV)
        assert R.group_method(table, "[2] sequential grpo") == ("SESA" if claim == "VIII" else "[2] sequential grpo")
    path = R.head_to_head_figure(tmp_path)
    assert path == tmp_path / "head_to_head.png"
    assert path.stat().st_size > 0


def test_the_head_to_head_at_equal_compute_is_written_beside_its_section_and_drawn(tmp_path: Path) -> None:
    """A section's table "At equal compute" as numbers (each group against the GRPO group nearest its cost), and
    the figure drawn from them: a panel per head-to-head claim with a table; nothing where none has one."""
    sweep, more = write_sized_head_to_head(tmp_path / "runs")
    report = analyse([sweep, more], ["1", "*"])
    (tmp_path / "VIII").mkdir()
    R.write_equal_compute(report, tmp_path / "VIII" / R.EQUAL_COMPUTE_CSV)
    table = pd.read_csv(tmp_path / "VIII" / R.EQUAL_COMPUTE_CSV)
    against = dict(zip(table["group"], table["against"], strict=True))
    assert {g.split(" ")[0]: a.split(" ")[0] for g, a in against.items()} == {"[2]": "[3]", "[4]": "[1]"}
    assert set(table["metric"]) == set(report.headline)
    assert R.equal_compute_figure(tmp_path) is None  # the path task's panel needs its diversity and success
    rows = [{**row, "metric": metric} for row in table.drop_duplicates("group").to_dict("records")
            for metric in (R.HEAD_TO_HEAD["claims"]["VIII"], R.HEAD_TO_HEAD["success"])]  # fmt: skip
    pd.DataFrame(rows).to_csv(tmp_path / "VIII" / R.EQUAL_COMPUTE_CSV, index=False)
    path = R.equal_compute_figure(tmp_path)
    assert path == tmp_path / "equal_compute.png"
    assert path.stat().st_size > 0


def _setting(method: str, setting: str, success: float, diversity: float) -> dict[str, Any]:
    return {
        "method": method,
        "setting": setting,
        "success_diff": success,
        "diversity_diff": diversity,
        "clears": success >= R.TUNING["floor"],
    }


def test_equal_tuning_picks_by_one_criterion_and_the_check_says_whether_a_pick_held() -> None:
    """Claim XIX's criterion: per method, of the settings whose success is no more than the floor below GRPO's, the
    most diversity; where none clears, the highest success; a tie to the setting listed first. The task's winner:
    the same among the picks. Claim XX: a pick agrees when its diversity difference keeps its sign and its success
    clears the floor on both seed sets or on neither."""
    floor = R.TUNING["floor"]
    assert floor < 0
    frame = pd.DataFrame(
        [
            _setting("A", "as shipped", 2 * floor, 5.0),  # the most diversity, but below the floor
            _setting("A", "k=2", floor / 2, 1.0),
            _setting("A", "k=8", 0.0, 2.0),
            _setting("B", "as shipped", 10 * floor, 1.0),
            _setting("B", "x=1", 3 * floor, -1.0),  # none clears: the highest success
            _setting("C", "as shipped", 0.0, 0.5),
            _setting("C", "y=2", 0.0, 0.5),  # a tie: the first listed
        ]
    )
    picked = R.mark_picks(frame)
    assert picked.loc[picked["pick"], "setting"].tolist() == ["k=8", "x=1", "as shipped"]
    best = R.winner(picked)
    assert best is not None
    assert (best["method"], best["setting"]) == ("A", "k=8")
    assert R.winner(R.mark_picks(frame[frame["method"] == "B"])) is None
    tuned = _setting("A", "k=8", 0.0, 2.0)
    assert R.agrees(tuned, _setting("A", "k=8", floor / 2, 0.3))
    assert not R.agrees(tuned, _setting("A", "k=8", 0.0, -0.3))  # the diversity lead turned
    assert not R.agrees(tuned, _setting("A", "k=8", 2 * floor, 1.0))  # success fell below the floor
