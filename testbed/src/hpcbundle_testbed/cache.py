"""The testbed's cache: where it lives, and the lock that lets one test process at a time fill an entry
(a wheelhouse, a rootfs)."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def cache_dir() -> Path:
    """``$HPCBUNDLE_CACHE``, else ``~/.cache/hpcbundle`` (the Makefile exports the same)."""
    return Path(os.environ.get("HPCBUNDLE_CACHE") or Path.home() / ".cache" / "hpcbundle")


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path` (waiting for it) for the duration of the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


IMAGE_MARKERS = ("docker", "apptainer", "gpu_build")
"""Tests that build images, fill the cache and take scratch space by the gigabyte."""
FILLED_CACHE_GB = 32
"""The cache once every image test has run (measured 2026-11-25: 30 GB, the Docker data root 18 of it)."""
SCRATCH_GB = 8
"""What a run of the image tests takes beyond its cache at its peak (measured: 5.5 GB, warm)."""


def disk_space_problem(cache: Path, scratch: Path) -> str:
    """One line saying why the image tests would run out of disk ('' when there is room): they need
    SCRATCH_GB free where `scratch` (the temp dir) lives, and FILLED_CACHE_GB more where `cache` lives
    while the cache is still cold (no Docker data root in it yet), the two added up on one file system."""
    cold = not (cache / "docker").is_dir()
    cache.mkdir(parents=True, exist_ok=True)
    needs: dict[int, tuple[Path, int]] = {}
    for path, gigabytes in ((cache, FILLED_CACHE_GB if cold else 0), (scratch, SCRATCH_GB)):
        device = os.stat(path).st_dev
        seen, total = needs.get(device, (path, 0))
        needs[device] = (seen, total + gigabytes)
    for path, gigabytes in needs.values():
        free = shutil.disk_usage(path).free / 1e9
        if free < gigabytes:
            return (
                f"only {free:.1f} GB free on the file system of {path}; the image tests need about "
                f"{gigabytes} GB there ({'a cold cache fills to ' + str(FILLED_CACHE_GB) + ' GB, ' if cold else ''}"
                f"a run takes {SCRATCH_GB} GB of scratch): free space, or set HPCBUNDLE_CACHE and TMPDIR "
                "to a larger disk"
            )
    return ""
