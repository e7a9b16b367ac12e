"""Hostile inputs of issue 31 (cases 3, 4, 5, 7, 8, 10): what a user, a scheduler or a damaged tree can hand sesa.
Each ends in one line on stderr and exit 2 (no traceback), and nothing outside the command's own run dir changes;
the helpers are tests.test_damaged_inputs' (a real short run copied and damaged per case)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import typing
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_damaged_inputs import check_one_line, snapshot


# ------------------------------------------------------------------------ case 3: NaN and infinity in a float
def float_settings() -> list[tuple[str, str]]:
    """(command-line prefix choosing the task or "", dotted key) of every float field of every command's schema and
    of every task's schema, found by walking the dataclasses: a float field added later is tested too."""
    from sesa_cli.config import ReviveConfig, TrainConfig
    from sesa_cli.tasks import TASK_SCHEMAS

    def walk(schema: type, prefix: str) -> list[str]:
        hints = typing.get_type_hints(schema)
        found = []
        for f in dataclasses.fields(schema):
            kind = hints[f.name]
            if dataclasses.is_dataclass(kind):
                found += walk(kind, f"{prefix}{f.name}.")  # type: ignore[arg-type]
            elif kind is float or float in typing.get_args(kind):
                found.append(f"{prefix}{f.name}")
        return found

    keys = sorted(set(walk(TrainConfig, "")) | set(walk(ReviveConfig, "")))
    task_keys = sorted({(f"task={name}", f"task.{k}") for name, s in TASK_SCHEMAS.items() for k in walk(s, "")})
    return [("task=path", k) for k in keys if not k.startswith("task.")] + task_keys


FLOATS = float_settings()


def test_the_float_settings_are_found():
    keys = {k for _, k in FLOATS}
    assert {"optim.lr", "sampler.temperature", "optim.weight_decay", "algo.kl_coef", "model.lora_dropout"} <= keys
    assert any(k.startswith("task.") for k in keys)


@pytest.mark.parametrize(("task", "setting"), FLOATS, ids=[k for _, k in FLOATS])
def test_nan_is_refused_in_every_float_setting(task, setting, tmp_path, monkeypatch, capsys):
    code = run_cli(["train", task, f"{setting}=nan", f"hydra.run.dir={tmp_path / 'out'}"], monkeypatch)
    line = check_one_line(code, capsys.readouterr().err, f"{setting}=nan must be a finite number")
    assert line == f"sesa train: error: {setting}=nan must be a finite number"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["inf", "-inf", "+inf", "1e999"])
def test_infinity_is_refused_in_every_float_setting(value):
    from sesa_cli.commands.validate import validate_argv

    by_task: dict[str, list[str]] = {}
    for task, setting in FLOATS:
        by_task.setdefault(task, []).append(setting)
    for task, settings in by_task.items():  # one composition per task: every float setting infinite at once
        problem = validate_argv("train", [task, *(f"{s}={value}" for s in settings)])
        sign = "-" if value.startswith("-") else ""
        assert sorted(problem.split("; ")) == sorted(f"{s}={sign}inf must be a finite number" for s in settings)


# ------------------------------------------------------------------------ case 7: `+key=` outside the schema
@pytest.mark.parametrize(
    ("command", "override", "expected"),
    [
        ("train", "+optim.lrr=0.1", "unknown key 'optim.lrr'; valid keys under 'optim': lr, lr_schedule, "),
        ("train", "++optim.lrr=0.1", "unknown key 'optim.lrr'; valid keys under 'optim': lr, lr_schedule, "),
        ("train", "+lrr=0.1", "unknown key 'lrr'; valid keys at the top level: algo, collapse, "),
        ("train", "+task.foo=1", "unknown key 'task.foo'; valid keys under 'task': "),
        (
            "eval",
            "+eval.sample=4",
            "unknown key 'eval.sample'; valid keys under 'eval': instances, policy_instances, samples",
        ),
    ],
)
def test_adding_a_key_outside_the_schema_is_refused_like_an_unknown_key(command, override, expected, tmp_path,
                                                                       monkeypatch, capsys):  # fmt: skip
    out = tmp_path / "out"
    code = run_cli([command, "task=path", override, f"hydra.run.dir={out}"], monkeypatch)
    check_one_line(code, capsys.readouterr().err, f"sesa {command}: error: {expected}")
    assert not out.exists()
    # the same typo without the +: the same line
    assert run_cli([command, "task=path", override.lstrip("+"), f"hydra.run.dir={out}"], monkeypatch) == 2
    check_one_line(2, capsys.readouterr().err, f"sesa {command}: error: {expected}")


def test_adding_a_key_where_the_schema_allows_it_still_works():
    from sesa_cli.commands.validate import validate_argv

    # reasoning_gym's task.options is a dict of the dataset's own fields: the one place keys are added
    base = ["task=reasoning_gym", "model=smollm2-135m"]
    assert validate_argv("train", [*base, "+task.options.min_digits=2"]) is None
    assert validate_argv("train", ["task=path", "++optim.lr=0.1"]) is None  # ++ on a key the schema has
    assert validate_argv("train", ["task=path", "+hydra.job.env_set.X=1"]) is None  # Hydra's own settings


# ------------------------------------------------------------------------ case 8: printed commands on odd run dirs
ODD_NAMES = [
    "d sp/ünï 😀 (1)",
    "it's",
    'say "hi"',
    "back\\slash'",
    "end\\",
    "a,b=c",
    "[x]{y}",
    "${oops}",
    "-m",
    "x y\\'z",
]


@pytest.mark.parametrize("name", ODD_NAMES)
def test_a_printed_path_reads_back_as_the_same_path(name, tmp_path):
    import shlex

    from hydra import compose, initialize_config_dir

    from sesa_cli.commands.ending import arg
    from sesa_cli.commands.schemas import register_configs
    from sesa_cli.config import conf_dir

    path = tmp_path / name
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(conf_dir())):
        [ckpt] = shlex.split(arg("ckpt", path))
        assert compose("eval", overrides=["task=path", ckpt]).ckpt == str(path)
        [runs] = shlex.split(arg("runs", path, listed=True))
        assert list(compose("diversity_report", overrides=[runs]).runs) == [str(path)]


def test_the_printed_next_commands_run_as_pasted(source_run, tmp_path, monkeypatch, capsys):
    """A run copied into a dir with spaces, parentheses, a quote, non-ASCII and an emoji: each command the ending of
    a training run and of an eval print is pasted back (the shell's split, then the CLI). The evals and the report
    run; the revive commands go through the CLI's whole validation (their checkpoint found and its run config
    reloaded), which is where a misquoted path fails, without training again."""
    import shlex

    from sesa_cli.commands.ending import next_commands
    from sesa_cli.commands.validate import validate_argv

    monkeypatch.chdir(tmp_path)  # paths print relative to the working directory
    run = tmp_path / "d sp" / "ünï 😀 (1) it's"
    shutil.copytree(source_run, run)
    capsys.readouterr()
    next_commands(run)  # what sesa train's ending prints

    def printed() -> list[list[str]]:
        lines = [line.strip() for line in ("\n" + capsys.readouterr().out).partition("\nnext:")[2].splitlines()]
        return [shlex.split(line)[1:] for line in lines if line.startswith("sesa ")]

    def out(name: str) -> str:
        return f"hydra.run.dir={tmp_path / name}"

    evaluate, revive, report = printed()
    assert (evaluate[0], revive[0], report[0]) == ("eval", "revive", "diversity-report")
    assert validate_argv("revive", [*revive[1:], out("revived")]) is None
    assert run_cli(report, monkeypatch) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert run_cli([*evaluate, "eval.instances=2", out("evaluated")], monkeypatch) == 0, capsys.readouterr().err
    sequential, revive_ckpt = printed()  # the eval's own ending: the chain health of its checkpoint, revive
    assert (sequential[0], revive_ckpt[0]) == ("eval", "revive")
    assert validate_argv("revive", [*revive_ckpt[1:], out("revived")]) is None
    # 2 samples, chains of group_size=4: the chain health of their first two items (issue 31 case 11)
    argv = [*sequential, "eval.instances=1", "eval.samples=2", out("sequential")]
    assert run_cli(argv, monkeypatch) == 0, capsys.readouterr().err


def test_the_printed_commands_run_as_pasted_from_a_venv_that_is_not_activated(source_run, tmp_path, monkeypatch,
                                                                               capsys):  # fmt: skip
    """Issue 53: after the README's set-up (``.venv/bin/sesa train``, the venv never activated) a bare ``sesa`` is
    "command not found". The ending names the sesa of the environment that ran, and its commands run as pasted into
    a shell whose PATH does not hold that environment."""
    import subprocess
    import sys

    from sesa_cli.commands.ending import next_commands
    from sesa_cli.paths import sesa_program

    script = Path(sys.executable).parent / "sesa"
    assert script.is_file(), "the tests run from an environment with sesa installed"
    assert sesa_program() == "sesa"  # on PATH (tests/conftest.py): a nox session, an activated venv
    bare = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != script.parent)
    monkeypatch.setenv("PATH", bare)
    assert shutil.which("sesa") is None or Path(shutil.which("sesa") or "").resolve() != script.resolve()
    # beside the environment, the path relative to the working directory, as the README's user types it
    monkeypatch.chdir(script.parent.parent.parent)
    assert sesa_program() == str(script.relative_to(script.parent.parent.parent))
    monkeypatch.chdir(tmp_path)
    assert sesa_program() == str(script)
    run = tmp_path / "run"
    shutil.copytree(source_run, run)
    capsys.readouterr()
    next_commands(run)
    lines = [line.strip() for line in capsys.readouterr().out.partition("next:")[2].splitlines()]
    commands = [line for line in lines if line and not line.startswith("#")]
    assert len(commands) == 3
    assert all(c.startswith(f"{script} ") for c in commands), commands
    report = commands[-1]  # the one that runs in seconds: no model work
    done = subprocess.run(f"{report} hydra.run.dir=report", shell=True, cwd=tmp_path, capture_output=True,
                          check=False, text=True, env={**os.environ, "PATH": bare}, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "report" / "report.md").is_file()


# ------------------------------------------------------------------------ case 4: a YAML bomb in a run's config
BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9 if prev else ['lol'] * 9)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)  # 9 ** 9 (387 million) strings once its aliases are expanded, in 400 bytes


@pytest.mark.parametrize(
    ("argv", "content"),
    [
        (["eval", "ckpt={run}"], BOMB),
        (["revive", "ckpt={run}", "more_steps=1"], BOMB),
        (["eval", "ckpt={run}"], "model: &m {name: tiny, again: *m}\n"),  # an alias inside itself
    ],
    ids=["eval", "revive", "self-reference"],
)
def test_a_yaml_bomb_in_a_run_config_is_refused_at_once(source_run, tmp_path, monkeypatch, capsys, argv, content):
    from tests.test_damaged_inputs import fill, prepare, write

    run, out, before = prepare(source_run, tmp_path, write("config.yaml", content))
    capsys.readouterr()
    started = time.monotonic()
    code = run_cli(fill(argv, run, out), monkeypatch)
    elapsed = time.monotonic() - started
    line = check_one_line(code, capsys.readouterr().err, f"{run}/config.yaml is not a valid run config (")
    assert line.startswith(f"sesa {argv[0]}: error: ")
    assert elapsed < 10, elapsed  # expanded, it would run for minutes and fill the memory
    assert snapshot(tmp_path, out) == before


# ------------------------------------------------------------------------ case 10: diversity-report, damaged trees
def _copy(source: Path, target: Path, step_time: float | None = None) -> Path:
    """A copy of a run dir without its checkpoints (a report reads none); ``step_time`` makes it another run."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("checkpoints"))
    if step_time is not None:
        lines = (target / "metrics.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in lines]
        rows[0]["time/step_s"] = step_time
        (target / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        info = json.loads((target / "run.json").read_text())
        info["id"] = f"another-{step_time}"
        (target / "run.json").write_text(json.dumps(info))
    return target


def _report(tmp_path: Path, runs: list[Path], monkeypatch, capsys) -> tuple[str, str]:
    out = tmp_path / "report"
    before = snapshot(tmp_path, out)
    capsys.readouterr()
    code = run_cli(["diversity-report", f"runs=[{','.join(str(r) for r in runs)}]", f"hydra.run.dir={out}"],
                   monkeypatch)  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err
    assert snapshot(tmp_path, out) == before
    return "".join(captured.out.split()), (out / "report.md").read_text()  # the console wraps lines: no spaces


def test_copies_of_one_run_count_as_one_seed(source_run, tmp_path, monkeypatch, capsys):
    from sesa_cli.report import load_runs

    runs = [_copy(source_run, tmp_path / "tree" / "original")]
    runs += [_copy(source_run, tmp_path / "tree" / f"copy{i}") for i in range(50)]
    loaded, notes = load_runs(runs)
    assert [r.path for r in loaded] == [runs[0]]  # one run, its first path
    copies = [n for n in notes if "a copy of" in n]
    assert len(copies) == 50
    assert all(n.startswith("warning: skipped ") and n.endswith(f"a copy of {runs[0]} (the same run), counted once")
               for n in copies)  # fmt: skip
    out, markdown = _report(tmp_path, runs, monkeypatch, capsys)
    assert "1runsin1group" in out
    assert out.count("acopyof") == 50
    assert markdown.count("a copy of") == 50


def test_a_copy_of_a_run_written_before_run_ids_is_found_by_its_metrics(source_run, tmp_path):
    from sesa_cli.report import load_runs

    original = _copy(source_run, tmp_path / "original")
    info = json.loads((original / "run.json").read_text())
    del info["id"]
    (original / "run.json").write_text(json.dumps(info))
    copy = _copy(original, tmp_path / "copy")
    other = _copy(original, tmp_path / "other", step_time=123.0)  # a distinct run of the same settings
    del info["started"]
    loaded, notes = load_runs([original, copy, other])
    assert [r.path for r in loaded] == [original, other]
    assert sum("a copy of" in n for n in notes) == 1


def test_runs_that_cannot_be_read_fully_are_said_and_not_grouped_as_unset(source_run, tmp_path, monkeypatch, capsys):
    tree = tmp_path / "tree"
    whole = _copy(source_run, tree / "whole")
    no_config = _copy(source_run, tree / "no_config", step_time=1.0)
    (no_config / "config.yaml").unlink()
    shutil.rmtree(no_config / ".hydra", ignore_errors=True)
    no_info = _copy(source_run, tree / "no_info", step_time=2.0)
    (no_info / "run.json").unlink()
    bomb = _copy(source_run, tree / "bomb", step_time=3.0)
    (bomb / "config.yaml").write_text(BOMB)
    out, markdown = _report(tmp_path, [whole, no_config, no_info, bomb], monkeypatch, capsys)
    for text, squeeze in ((out, lambda t: "".join(t.split())), (markdown, str)):
        assert squeeze(f"warning: {no_config} was not read fully: no config.yaml") in text
        assert squeeze(f"warning: {no_info} was not read fully: no run.json") in text
        assert squeeze(f"warning: {bomb} was not read fully: {bomb}/config.yaml is not a valid run file") in text
        assert squeeze(f"{whole} was not read") not in text
        assert "(unset)" not in text
    assert "unknown (no run.json)" in markdown
    assert "(unknown: no config)" in markdown


# ------------------------------------------------------------------------ case 5: sizes the machine cannot hold
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["train", "task=path", "sampler.group_size=100000"],
         ("train.batch_size=8 x sampler.group_size=100000 rows x task.max_new_tokens=24 need at least 78.6 GB of "
         "key/value cache (4 layers x 128 key/value width, from model.num_layers, model.hidden_size)")),
        (["eval", "task=path", "eval.samples=10000000"], "eval.samples=10000000 rows x task.max_new_tokens=24 need "),
        (["train", "task=path", "train.batch_size=4096", "sampler=sequential", "sampler.group_size=4096"],
         "train.batch_size=4096 x sampler.group_size=4096 rows x task.max_new_tokens=24 need "),
    ],
)  # fmt: skip
def test_rows_the_memory_cannot_hold_are_refused_before_model_work(argv, expected, tmp_path, monkeypatch, capsys):
    if os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") > 70e9:
        pytest.skip("the machine holds 78 GB: the sizes of this test would fit")  # not a CI runner's size
    started = time.monotonic()
    code = run_cli([*argv, f"hydra.run.dir={tmp_path / 'out'}"], monkeypatch)
    check_one_line(code, capsys.readouterr().err, f"sesa {argv[0]}: error: {expected}")
    assert time.monotonic() - started < 20  # before the warm start and any sampling
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "recipe", sorted(p.stem for p in (Path(__file__).parents[1] / "conf" / "experiment").glob("*.yaml"))
)
def test_the_memory_estimate_passes_every_recipe(recipe, tmp_path):
    # the commands of README.md and docs/ go through the same validation in tests/test_docs_commands.py
    from sesa_cli.commands.validate import memory_problem, validate_argv
    from tests.conftest import compose_train

    assert validate_argv("train", [f"experiment={recipe}", f"hydra.run.dir={tmp_path}/run"]) is None
    assert memory_problem(compose_train([f"experiment={recipe}"])) is None


def test_a_prompt_longer_than_the_model_is_refused_before_sampling(tmp_path, monkeypatch, capsys):
    """A 200,000-character math question (task.data): one line naming model.max_position_embeddings, not a 40 GB
    allocation. (Its length is known only once the tokenizer is: the check is at the first encoded prompt.)"""
    pytest.importorskip("math_verify")
    data = tmp_path / "huge.jsonl"
    row = json.dumps({"question": "1+" * 100_000 + "1", "answer": "100001"})
    data.write_text(f"{row}\n{row}\n")
    out = tmp_path / "out"
    argv = ["eval", "task=math", f"task.data={data}", "model.warm_start_steps=0", "model.warm_start_corpus_size=10",
            f"model.cache_dir={tmp_path / 'cache'}", "eval.samples=2", f"hydra.run.dir={out}"]  # fmt: skip
    before = snapshot(tmp_path, out)
    code = run_cli(argv, monkeypatch)
    line = check_one_line(code, capsys.readouterr().err, "a prompt of 200,004 tokens ('P1+1+1+1")
    assert "does not fit the model's 1,024 positions (model.max_position_embeddings)" in line
    after = snapshot(tmp_path, out)
    assert {k: v for k, v in after.items() if not k.startswith("cache")} == before  # its run dir, its base cache
