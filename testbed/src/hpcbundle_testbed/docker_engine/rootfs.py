"""The registry-free Debian root file system: debootstrap output as a tar, cached under
``$HPCBUNDLE_CACHE/debootstrap/<suite>-<variant>-<arch>-f<ROOTFS_FORMAT>.tar``."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..cache import cache_dir, exclusive_lock
from .apt_sources import host_mirror
from .host import EngineError, dpkg_arch, ensure_tools, log_tail, mounts_under, remove_tree, which

# Bump when the way the rootfs tarball is made changes, so cached tarballs are remade.
ROOTFS_FORMAT = 2


@dataclass(frozen=True)
class RootfsTarball:
    """A cached Debian root file system as a tar, ready for `docker import`."""

    path: Path
    key: str
    sha256: str
    seconds: float  # what getting it took this time
    cached: bool  # True when it came from the cache


def rootfs_key(suite: str, variant: str, arch: str) -> str:
    return f"{suite}-{variant}-{arch}-f{ROOTFS_FORMAT}"


def debootstrap_tarball(
    suite: str = "bookworm",
    variant: str = "minbase",
    *,
    arch: str | None = None,
    cache: Path | None = None,
    timeout: float = 1800.0,
) -> RootfsTarball:
    """The cached rootfs tarball for suite+variant+arch; debootstrapped (~90 s) when missing.

    The mirror is read from this machine's apt sources at run time. The tarball is plain
    debootstrap output; what this machine adds (apt sources, trusted CAs) is a layer on top, made
    by `ensure_base_image`, so the cache does not depend on it.
    """
    t0 = time.monotonic()
    ensure_tools(["debootstrap", "unshare", "tar"])
    arch = arch or dpkg_arch()
    key = rootfs_key(suite, variant, arch)
    base = (cache or cache_dir()) / "debootstrap"
    tar, meta = base / f"{key}.tar", base / f"{key}.json"
    with exclusive_lock(base / f"{key}.lock"):
        if tar.is_file() and meta.is_file():
            sha = json.loads(meta.read_text())["sha256"]
            return RootfsTarball(tar, key, sha, time.monotonic() - t0, cached=True)
        mirror = host_mirror(suite)
        work = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=base))
        try:
            rootfs = work / "rootfs"
            argv = [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                which("debootstrap") or "debootstrap",
                f"--variant={variant}",
                f"--arch={arch}",
                suite,
                str(rootfs),
                mirror,
            ]
            log = work / "debootstrap.log"
            with log.open("w") as out:
                try:
                    res = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False)
                except subprocess.TimeoutExpired:
                    raise EngineError(
                        f"debootstrap {suite} from {mirror} took over {timeout:.0f} s; log: {log_tail(log)}"
                    ) from None
            if res.returncode:
                raise EngineError(f"debootstrap {suite} from {mirror} failed ({res.returncode}): {log_tail(log)}")
            _tidy_rootfs(rootfs)
            tmp_tar = work / "rootfs.tar"
            subprocess.run(
                ["tar", "-C", str(rootfs), "--numeric-owner", "--exclude=./dev/*", "-cf", str(tmp_tar), "."],
                check=True,
                timeout=600,
            )
            sha = _sha256(tmp_tar)
            meta.write_text(
                json.dumps(
                    {
                        "sha256": sha,
                        "suite": suite,
                        "variant": variant,
                        "arch": arch,
                        "mirror": mirror,
                        "seconds": round(time.monotonic() - t0, 1),
                    },
                    indent=1,
                )
            )
            os.replace(tmp_tar, tar)
        finally:
            stray = mounts_under(work)
            if stray:  # never rm -rf over a mounted /proc or /dev
                subprocess.run(["umount", "-R", "-l", *sorted(stray, reverse=True)], check=False)
            remove_tree(work)
    return RootfsTarball(tar, key, sha, time.monotonic() - t0, cached=False)


def _tidy_rootfs(rootfs: Path) -> None:
    """Drop what a base image does not carry: package caches, apt lists, logs, host files."""
    for pattern in (
        "var/cache/apt/archives/*.deb",
        "var/cache/apt/*.bin",
        "var/lib/apt/lists/*_*",
        "var/log/*.log",
        "etc/hostname",
        "etc/resolv.conf",
    ):
        for path in rootfs.glob(pattern):
            if path.is_file() or path.is_symlink():
                path.unlink()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
