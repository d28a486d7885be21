"""CUDA 13 without a GPU, from PyPI's NVIDIA wheels: a cached wheelhouse, a host venv made from it
offline, and readers for what a Horovod NCCL build must show (check-build, ldd, cuobjdump).

Everything slow is cached under ``${HPCBUNDLE_CACHE:-~/.cache/hpcbundle}``, keyed by the exact
requirement list, the Python version and the machine, so a warm run downloads and installs nothing:

    wheelhouse/<key>/   every wheel `pip download` resolved for the requirements (2.9 GB cold,
                        ~35 s from PyPI; 0 s warm); complete only with its COMPLETE file
    venvs/<key>/        a venv with those wheels installed offline (--no-index), as on a GPU host
                        that already has torch and the NVIDIA wheels (~5 GB, 65-100 s cold; 0 s warm)
    horovod/<key>/      the Horovod wheel, written by the install script itself (not this module)

A half-made entry (an interrupted run) lacks its COMPLETE file and is made again. One maker per
entry: an exclusive flock on ``<entry>.lock``. Long steps report through a `progress` callback
(one line at a time), so a cold CI run shows where it is.

What the NVIDIA wheels need on top (all measured on Debian 12 / GCC 12, no GPU): the toolkit
(nvcc, nvvm, crt, cccl) installs into one tree ``site-packages/nvidia/cu13``; cuobjdump is its
own wheel (nvidia-cuda-cuobjdump, no 13.0 release exists: 13.2 reads 13.0's fat binaries);
torch==2.11.0 from PyPI is the CUDA 13.0 build and pulls NCCL (nvidia-nccl-cu13), cuDNN and cuBLAS.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .cache import cache_dir, exclusive_lock

Progress = Callable[[str], None]

COMPLETE = "COMPLETE"


def stack_key(requirements: Sequence[str], python: str | None = None) -> str:
    """A short key for `requirements` on this Python and machine, e.g. ``cu13-py3.11-x86_64-1a2b3c4d5e6f``."""
    python = python or "%d.%d" % sys.version_info[:2]
    digest = hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()[:12]
    return f"cu13-py{python}-{platform.machine()}-{digest}"


@dataclass(frozen=True)
class Prepared:
    """A cached entry (wheelhouse or venv), where it is and what getting it took this time."""

    path: Path
    key: str
    seconds: float
    cached: bool  # True: it was complete in the cache, nothing was downloaded or installed

    @property
    def how(self) -> str:
        return f"{'cached' if self.cached else 'made'} in {self.seconds:.0f} s"


def run_logged(
    argv: Sequence[str],
    log: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 3600.0,
    progress: Progress | None = None,
    show: Callable[[str], bool] = lambda line: True,
    heartbeat: float = 60.0,
) -> int:
    """Run `argv`, its output (stdout + stderr) into `log`; lines for which `show` is true, and the
    latest line every `heartbeat` seconds, go to `progress` prefixed with the elapsed seconds.
    Returns the exit status; on timeout the process group is killed and TimeoutError raised."""
    t0 = time.monotonic()
    last_shown = t0
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.write(line)
                out.flush()  # readers of the log (a heartbeat) see it as it grows
                now = time.monotonic()
                if now - t0 > timeout:
                    raise TimeoutError(f"{argv[0]} ran over {timeout:.0f} s; log: {log}")
                text = line.rstrip()
                if progress and text and (show(text) or now - last_shown >= heartbeat):
                    progress(f"[{now - t0:5.0f}s] {text[:150]}")
                    last_shown = now
            return proc.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file (for failure messages)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return f"(no log at {path})"


def _pip_show(line: str) -> bool:
    """pip lines worth a progress line: each big download, and the end."""
    return bool(re.match(r"^\s*(Downloading \S+ \(\d+(\.\d+)? [MG]B\)|Successfully|Saved \S+torch)", line))


def wheelhouse(
    requirements: Sequence[str],
    *,
    sdists: Sequence[str] = (),
    cache: Path | None = None,
    progress: Progress | None = None,
) -> Prepared:
    """A directory holding every wheel `requirements` resolve to (``pip download``, this machine's
    pip configuration and its HTTP cache), and the source distributions `sdists` (no dependencies,
    e.g. ``horovod==0.28.1``, for an offline build from source), made once per key. Warm: returns
    at once, no pip run."""
    t0 = time.monotonic()
    key = stack_key([*requirements, *(f"sdist:{s}" for s in sdists)])
    base = (cache or cache_dir()) / "wheelhouse"
    entry = base / key
    with exclusive_lock(base / f"{key}.lock"):
        if (entry / COMPLETE).is_file():
            return Prepared(entry, key, time.monotonic() - t0, cached=True)
        if entry.exists():
            shutil.rmtree(entry)
        partial = base / f".{key}.partial"
        partial.mkdir(parents=True, exist_ok=True)  # a partial download is resumed: pip skips saved files
        _seed(partial, base)
        log = base / f"{key}.download.log"
        if progress:
            progress(f"pip download {len(requirements)} requirements into {entry} (~3 GB cold)")
        argv = [sys.executable, "-m", "pip", "download", "--progress-bar", "off", "--dest", str(partial)]
        status = run_logged([*argv, *requirements], log, progress=progress, show=_pip_show, timeout=3600)
        if status == 0 and sdists:
            log = log.with_suffix(".sdist.log")
            no_binary = [*argv, "--no-deps", "--no-binary", ":all:", *sdists]
            status = run_logged(no_binary, log, progress=progress, show=_pip_show, timeout=600)
        if status:
            raise RuntimeError(f"pip download failed ({status}):\n{tail(log)}")
        wheels = sorted(p.name for p in partial.iterdir())
        listing = {"requirements": list(requirements), "sdists": list(sdists), "files": wheels}
        (partial / COMPLETE).write_text(json.dumps(listing, indent=1))
        os.replace(partial, entry)
    return Prepared(entry, key, time.monotonic() - t0, cached=False)


def _seed(partial: Path, base: Path) -> None:
    """Hard-link the files of the complete wheelhouses beside `partial` into it, so that a changed stack
    (one more wheel, e.g. torchvision) downloads only what it adds: pip skips the files already saved."""
    for entry in sorted(base.glob(f"cu13-py{sys.version_info[0]}.{sys.version_info[1]}-*")):
        if not (entry / COMPLETE).is_file():
            continue
        for wheel in entry.iterdir():
            if wheel.name != COMPLETE and not (partial / wheel.name).exists():
                os.link(wheel, partial / wheel.name)


def host_venv(
    requirements: Sequence[str],
    wheels: Path,
    *,
    cache: Path | None = None,
    python: str = "/usr/bin/python3",
    progress: Progress | None = None,
) -> Prepared:
    """A venv with `requirements` installed offline from `wheels` (``--no-index``): a GPU host that
    already has torch and the NVIDIA wheels. Made in place once per key (venvs do not move)."""
    t0 = time.monotonic()
    key = stack_key(requirements)
    base = (cache or cache_dir()) / "venvs"
    entry = base / key
    with exclusive_lock(base / f"{key}.lock"):
        if (entry / COMPLETE).is_file() and (entry / "bin" / "python").exists():
            return Prepared(entry, key, time.monotonic() - t0, cached=True)
        if entry.exists():
            shutil.rmtree(entry)
        log = base / f"{key}.install.log"
        if progress:
            progress(f"venv {entry}: pip install --no-index from {wheels.name} (~5 GB, ~60 s cold)")
        status = run_logged([python, "-m", "venv", str(entry)], log, timeout=300)
        if status == 0:
            pip = [str(entry / "bin" / "python"), "-m", "pip", "install", "--progress-bar", "off", "--no-index"]
            status = run_logged(
                [*pip, "--find-links", str(wheels), *requirements],
                log,
                env={**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)},
                progress=progress,
                show=lambda line: line.startswith("Successfully"),
                timeout=1800,
            )
        if status:
            shutil.rmtree(entry, ignore_errors=True)
            raise RuntimeError(f"the host venv could not be made ({status}):\n{tail(log)}")
        (entry / COMPLETE).write_text("\n".join(requirements) + "\n")
    return Prepared(entry, key, time.monotonic() - t0, cached=False)


def site_packages(venv: Path) -> Path:
    """The venv's site-packages directory."""
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise RuntimeError(f"no lib/python3*/site-packages in {venv}")
    return found[0]


def dist_record(venv: Path, name: str) -> tuple[int, int] | None:
    """(inode, mtime_ns) of distribution `name`'s RECORD file in `venv`: changes iff pip reinstalled it."""
    for record in site_packages(venv).glob(f"{name}-*.dist-info/RECORD"):
        st = record.stat()
        return st.st_ino, st.st_mtime_ns
    return None


# --------------------------------------------------------------------------------------------
# what a built Horovod shows


def check_build_marks(out: str) -> set[str]:
    """`horovodrun --check-build` output -> {'Frameworks: PyTorch', 'Tensor Operations: NCCL', ...}:
    every name marked [X], with the section it is listed under."""
    marked, section = set(), ""
    for line in out.splitlines():
        m = re.match(r"^Available (.+?):\s*$", line)
        if m:
            section = m.group(1)
            continue
        m = re.match(r"^\s*\[X\]\s+(.+?)\s*$", line)
        if m and section:
            marked.add(f"{section}: {m.group(1)}")
    return marked


def ldd(path: Path | str, *, run: Callable[[list[str]], str] | None = None) -> dict[str, str]:
    """soname -> resolved path ('not found' when unresolved) as ldd prints it for `path`.
    `run` runs an argv and returns its output (default: here; e.g. inside a container)."""
    out = (run or _run_here)(["ldd", str(path)])
    found = {}
    for line in out.splitlines():
        m = re.match(r"^\s*(\S+)\s+=>\s+(not found|\S+)", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def cubin_archs(out: str) -> set[str]:
    """`cuobjdump --list-elf` output -> the compute capabilities of its cubins, e.g. {'7.5', '9.0'}."""
    archs = set()
    for m in re.finditer(r"\.sm_(\d+)[a-z]?\.cubin", out):
        digits = m.group(1)
        archs.add(f"{digits[:-1]}.{digits[-1]}")
    return archs


def _run_here(argv: list[str]) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if res.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({res.returncode}): {(res.stderr or res.stdout)[-2000:]}")
    return res.stdout
