"""No tracked file outside tests/, and no help text, names an absolute path of the machine that wrote it."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.conftest import ROOT, run_cli

# a home, a scratch or temp dir, a container's work dir: /work/..., /root/..., /home/..., /tmp/..., /Users/...,
# /mnt/..., /scratch/..., macOS's /private/var/... and /var/folders/..., C:\Users\... (not inside a URL or a word)
MACHINE_PATH = re.compile(
    r"(?<![\w.~$}/-])/(?:work|root|home|tmp|Users|mnt|scratch|private/var|var/folders)/[^\s`'\")\]]*"
    r"|\b[A-Za-z]:\\Users\\"
)


def _tracked_text_files() -> list[str]:
    if shutil.which("git") and (ROOT / ".git").exists():
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        names = out.splitlines()
    else:  # an unpacked sdist: what it ships
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    texts = []
    for name in names:
        if name.startswith("tests/") or not (ROOT / name).is_file():
            continue
        data = (ROOT / name).read_bytes()
        if b"\0" not in data[:8192]:
            texts.append(name)
    return texts


def test_the_pattern_finds_machine_paths_and_nothing_else():
    for bad in ("runs under `/work/claims`", "model.cache_dir=/work/cache", "see /home/ana/x", "/tmp/pytest-1/a",
                "(/Users/bo/runs)", r"C:\Users\bo"):  # fmt: skip
        assert MACHINE_PATH.search(bad), bad
    for fine in ("outputs/claims/collapse", "https://example.org/home/page", "/proc/loadavg", "~/runs", "a/tmp/b"):
        assert not MACHINE_PATH.search(fine), fine


def test_no_tracked_file_outside_tests_names_a_machine_path():
    files = _tracked_text_files()
    assert {"README.md", "noxfile.py", "docs/results.md", "docs/measurements.md"} <= set(files)
    found = [
        f"{name}:{n}: {m.group(0)}"
        for name in files
        for n, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1)
        for m in MACHINE_PATH.finditer(line)
    ]
    assert not found, found[:10]


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["eval", "--help"], ["revive", "--help"],
                                  ["diversity-report", "--help"]])  # fmt: skip
def test_no_help_text_names_a_machine_path(argv, monkeypatch, capsys):
    assert run_cli(argv, monkeypatch) == 0
    out = capsys.readouterr().out
    assert out.strip()
    assert not MACHINE_PATH.findall(out)


def test_the_results_script_help_names_no_machine_path(capsys):
    from tests.scripts import results

    with pytest.raises(SystemExit):
        results.main(["--help"])
    out = capsys.readouterr().out
    assert "model.cache_dir=" in out
    assert not MACHINE_PATH.findall(out)
