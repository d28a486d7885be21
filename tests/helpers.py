"""Shared test helpers: the repository root, shipped recipes as data, golden files, the CLI in a child."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
GOLDEN = Path(__file__).resolve().parent / "golden"


def examples(full: int) -> int:
    """How many examples a property test draws: `full` in `make test`; a fifth (at least 50) in `make check`,
    which sets HPCBUNDLE_FAST_LANE=1 to stay a fast lane; the same strategies, so each run still covers them."""
    return max(full // 5, 50) if os.environ.get("HPCBUNDLE_FAST_LANE") == "1" else full


def recipe_data(name: str) -> dict[str, Any]:
    """A shipped recipe as plain data, safe to mutate."""
    return copy.deepcopy(yaml.safe_load((RECIPES / f"{name}.yaml").read_text()))


def write_recipe(directory: Path, data: dict[str, Any]) -> Path:
    """Write `data` as <directory>/<data['name']>.yaml and return the path."""
    path = directory / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def assert_golden(path: Path, text: str) -> None:
    """`text` must equal the golden file `path` (under tests/golden/).

    With HPCBUNDLE_REGEN_GOLDEN=1 the file is rewritten first: `make golden` runs every test file
    that calls this, that way, so every golden file is regenerated; the diff is reviewed like code.
    """
    if os.environ.get("HPCBUNDLE_REGEN_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} missing: run `make golden` and review the diff"
    assert text == path.read_text(encoding="utf-8"), f"{path.name} differs: review, then `make golden` if intended"


def hpcbundle(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The real command line, in a child process, as a user runs it (outside SLURM unless `env` says so)."""
    clean = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    return subprocess.run(
        [sys.executable, "-m", "hpcbundle", "--bundle", str(ROOT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, **(env or {})},
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


def launched_command(stderr: str) -> str:
    """The one command `hpcbundle launch --exec` ran: it echoes it as `+ CMD` on stderr."""
    lines = [line[2:] for line in stderr.splitlines() if line.startswith("+ ")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def assert_refused_in_one_line(script: Path, options: list[str], message: str) -> None:
    """`python SCRIPT OPTIONS` (a benchmark) stops with exit 2 and one line on stderr holding `message`."""
    run = subprocess.run([sys.executable, str(script), *options], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and message in run.stderr, run.stderr
