"""The testbed's cache: where it lives, and the lock that lets one test process at a time fill an entry
(a wheelhouse, a rootfs)."""

from __future__ import annotations

import fcntl
import os
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
