"""sesa_cli.api: the example of docs/api.md (train -> eval -> revive -> report) runs as written, on the tiny model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sesa_cli.config import conf_dir

DOC = Path(conf_dir()).parent / "docs" / "api.md"


def test_the_docs_example_drives_train_eval_revive_report(tmp_path, monkeypatch, tiny_overrides):
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    monkeypatch.chdir(tmp_path)
    # the example as written, on the test suite's small world and shared tiny base
    code = code.replace('"task=path"', "*TEST_OVERRIDES")
    namespace: dict = {"TEST_OVERRIDES": tiny_overrides}
    exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102  (our own docs page, run as a reader would)
    parent, revived, report = namespace["parent"], namespace["revived"], namespace["report"]
    assert parent.run_dir == tmp_path / "outputs/api/parent"
    rows = [json.loads(line) for line in (parent.run_dir / "metrics.jsonl").read_text().splitlines()]
    last_eval = [r for r in rows if "eval/success" in r][-1]
    assert parent.metrics["eval/success"] == last_eval["eval/success"]  # the final metrics are the run's own
    assert (parent.run_dir / ".hydra" / "overrides.yaml").is_file()  # Hydra's run mode, as the CLI's
    assert json.loads((revived.run_dir / "run.json").read_text())["parent_step"] == 1
    assert Path(report.files["html"]).is_file()


def test_bad_overrides_raise_the_clis_one_line_error(tmp_path):
    from sesa_cli import api
    from sesa_cli.config import ConfigError

    with pytest.raises(ConfigError, match="sampler=nope is not a sampler option"):
        api.train(["sampler=nope"], run_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists()
