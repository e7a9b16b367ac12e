"""Shell completion through the dispatcher: command names, then the command's config groups and options."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("sesa tr", {"train"}),
        ("sesa ", {"train", "eval", "revive", "diversity-report"}),
        ("sesa train sam", {"sampler="}),
        ("sesa train sampler=", {"sampler=parallel", "sampler=sequential"}),
        ("sesa revive al", {"algo="}),
        ("sesa eval task=pa", {"task=path"}),
    ],
)
def test_completion_query_answers_commands_then_groups_and_options(monkeypatch, capsys, line, expected):
    monkeypatch.setenv("COMP_LINE", line)
    monkeypatch.setenv("COMP_POINT", str(len(line)))
    assert run_cli(["-sc", "query=bash"], monkeypatch) == 0
    assert expected <= set(capsys.readouterr().out.split())


def test_install_script_registers_completion_for_sesa(monkeypatch, capsys):
    assert run_cli(["-sc", "install=bash"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert "hydra_bash_completion()" in out
    assert out.strip().endswith("-F hydra_bash_completion sesa")
