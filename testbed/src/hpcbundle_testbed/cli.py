"""hpcbundle's own command line as tests and benchmarks run it: a child process of the running interpreter,
on this checkout's bundle, as a user types it.

    hpcbundle("check", "cpu-local").returncode                  # run it here
    cluster.run("node1", hpcbundle_argv("launch", ...))         # or hand the argv to whoever runs it
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
"""The checkout this testbed belongs to: the bundle (recipes/, site_configs/, ...) the commands read."""


def hpcbundle_argv(*args: str, bundle: Path | None = REPO) -> list[str]:
    """`python -m hpcbundle --bundle BUNDLE ARGS...`; with bundle=None the CLI finds its bundle from the cwd."""
    return [sys.executable, "-m", "hpcbundle", *(["--bundle", str(bundle)] if bundle else []), *args]


def hpcbundle(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    cwd: Path | None = None,
    bundle: Path | None = REPO,
) -> subprocess.CompletedProcess[str]:
    """Run the command line in a child and capture its text (outside SLURM unless `env` says so)."""
    clean = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    return subprocess.run(
        hpcbundle_argv(*args, bundle=bundle),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, **(env or {})},
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )
