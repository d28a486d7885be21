"""What the engine and the base image share: the host's tools (installed when missing), the cache
root, and careful file-system helpers (no rm -rf across a mount)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

# Packages that provide what this package runs; installed with apt-get when a tool is missing.
_TOOLS = {"dockerd": "docker.io", "debootstrap": "debootstrap", "unshare": "util-linux", "tar": "tar"}
_SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")


class EngineError(RuntimeError):
    """The engine or the base image could not be set up; the message says why and what to do."""


def which(tool: str) -> str | None:
    """`tool` on PATH or in the sbin directories (dockerd and debootstrap live in /usr/sbin)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *_SBIN])
    return shutil.which(tool, path=path)


def ensure_tools(tools: Sequence[str] = tuple(_TOOLS)) -> dict[str, str]:
    """Paths of `tools`; missing ones are installed with apt-get (root only), else EngineError."""
    missing = sorted({_TOOLS[t] for t in tools if which(t) is None})
    if missing:
        if os.geteuid() != 0:
            raise EngineError(
                f"missing {', '.join(missing)} and not root: run `sudo apt-get install -y {' '.join(missing)}`"
            )
        for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "-o", "DPkg::Lock::Timeout=600", *missing]):
            res = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=1200,
                check=False,
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
            if res.returncode:
                raise EngineError(
                    f"{' '.join(argv)} failed ({res.returncode}): {(res.stderr or res.stdout).strip()[-2000:]}"
                )
    found = {t: which(t) for t in tools}
    still = [t for t, p in found.items() if p is None]
    if still:
        raise EngineError(f"{', '.join(still)} not found even after installing {', '.join(missing)}")
    return {t: str(p) for t, p in found.items()}


def dockerd_version(dockerd: str = "dockerd") -> str:
    """dockerd's version, e.g. ``20.10.24+dfsg1`` (part of the data-root cache key)."""
    out = subprocess.run([dockerd, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    m = re.search(r"version\s+([^\s,]+)", out)
    if not m:
        raise EngineError(f"cannot read dockerd's version from {out!r}")
    return m.group(1)


def dpkg_arch() -> str:
    """The Debian architecture of this machine (amd64, arm64, ...)."""
    return subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, timeout=30, check=True
    ).stdout.strip()


def remove_tree(path: Path) -> None:
    """rm -rf that never crosses into a mounted file system (a leaked /proc or /dev bind)."""
    if path.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=True, timeout=600)


def mounts_under(path: Path) -> list[str]:
    """Mount points (in this mount namespace) at or below `path`."""
    prefix = str(path.resolve())
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1].replace("\\040", " ")
        if target == prefix or target.startswith(prefix + "/"):
            found.append(target)
    return found


def log_tail(path: Path, n: int = 2000) -> str:
    """The last `n` characters of a log file, for an error message."""
    try:
        return path.read_text(errors="replace")[-n:].strip()
    except FileNotFoundError:
        return "(no log)"
