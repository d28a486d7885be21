"""Shared pytest configuration, and the fixtures more than one test module uses."""

from __future__ import annotations

import subprocess

import pytest

from .helpers import VENV_PYTHON

pytest_plugins = [
    "hpcbundle_testbed.plugin",
    "hpcbundle_testbed.docker_plugin",
    "hpcbundle_testbed.gpu_plugin",
    "hpcbundle_testbed.gpu_device",
    "hpcbundle_testbed.sif_plugin",
]

# Programs and files the tests feed the tool: never imported as test modules (a user's program runs at import).
collect_ignore_glob = ["data/*"]


@pytest.fixture(scope="module")
def horovod(cluster_tools: None) -> None:
    """The venv's Horovod with PyTorch; fails (never skips) saying how to get it."""
    if not VENV_PYTHON.exists():
        pytest.fail(
            f"{VENV_PYTHON} does not exist: these tests need the project venv with Horovod (run `make setup`)",
            pytrace=False,
        )
    probe = subprocess.run(
        [str(VENV_PYTHON), "-c", "import horovod.torch"], capture_output=True, text=True, timeout=120, check=False
    )
    if probe.returncode:
        pytest.fail(
            f"`import horovod.torch` fails in {VENV_PYTHON} (run `make setup`, which "
            f"builds Horovod with PyTorch):\n{probe.stderr[-2000:]}",
            pytrace=False,
        )
