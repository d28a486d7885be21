"""The process edges a command meets before its input: standard output on a full disk and a working directory
removed under the shell each end in one line and exit status 2, never an OSError traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .helpers import ROOT, hpcbundle_argv

COMMANDS = {
    "rules": ["rules"],
    "sbatch": ["sbatch", "--site", "local", "--nodes", "1", "--", "python", "train.py"],
    "launch": ["launch", "--site", "local", "--np", "2", "--", "python", "train.py"],
    "site detect": ["site", "detect", "--name", "here"],
    "recipes": ["recipes"],
}
"""Commands that print a result on standard output."""


def _one_error(run: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    lines = run.stderr.splitlines()
    assert run.returncode == 2 and len(lines) == 1 and lines[0].startswith("hpcbundle: error:"), run.stderr
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_disk_under_standard_output_is_one_line_and_exit_2(command: str, tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        run = subprocess.run(
            hpcbundle_argv(*COMMANDS[command]),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
        )
    assert "standard output: cannot write: No space left on device" in _one_error(run)


def _in_removed_directory(tmp_path: Path, *argv: str, bundle: Path | None = ROOT) -> subprocess.CompletedProcess[str]:
    gone = tmp_path / "gone"
    gone.mkdir()
    code = f"import os, subprocess, sys; gone = {str(gone)!r}; os.chdir(gone); os.rmdir(gone)"
    code += "; sys.exit(subprocess.call(sys.argv[1:]))"
    return subprocess.run(
        ["python3", "-c", code, *hpcbundle_argv(*argv, bundle=bundle)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k != "HPCBUNDLE_ROOT"},
    )


@pytest.mark.parametrize("command", ["sbatch", "launch"])
def test_a_removed_working_directory_with_bundle_given_is_refused_as_the_workdir_default(
    command: str, tmp_path: Path
) -> None:
    line = _one_error(_in_removed_directory(tmp_path, *COMMANDS[command]))
    assert "--workdir: this shell's working directory was removed (cd to one that exists)" in line


@pytest.mark.parametrize("command", ["rules", "site detect", "recipes"])
def test_a_removed_working_directory_with_bundle_given_does_not_matter(command: str, tmp_path: Path) -> None:
    run = _in_removed_directory(tmp_path, *COMMANDS[command])
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]


def test_a_removed_working_directory_without_bundle_asks_for_one(tmp_path: Path) -> None:
    assert "pass --bundle DIR" in _one_error(_in_removed_directory(tmp_path, "recipes", bundle=None))
