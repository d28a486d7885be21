"""Wheels no public index serves (e.g. torch==2.13.0+cpu), fetched once into a directory the
image builds read."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .host import EngineError


def download_wheels(requirements: Sequence[str], dest: Path, timeout: float = 1800.0) -> Path:
    """`dest` holding a wheel for each ``name==version`` in `requirements`, fetched with this
    machine's pip configuration (`pip download --no-deps`) unless already there. Used for wheels no
    public index serves, e.g. torch==2.13.0+cpu (pip on the project's machines finds it locally)."""
    dest.mkdir(parents=True, exist_ok=True)
    for requirement in requirements:
        name, _, version = requirement.partition("==")
        if any(dest.glob(f"{name.replace('-', '_')}-{version}-*.whl")):
            continue
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(dest), requirement]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if res.returncode:
            raise EngineError(
                f"pip download {requirement} failed: {(res.stderr or res.stdout).strip()[-1500:]} "
                f"(put the wheel into {dest}, or configure pip to find it)"
            )
    return dest
