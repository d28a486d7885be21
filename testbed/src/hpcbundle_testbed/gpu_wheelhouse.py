"""`make gpu-wheelhouse`: on a build host without a GPU, the wheels an offline GPU node without
compilers installs a recipe's stack from.

It runs the recipe's rendered bare-metal install script (`hpcbundle render RECIPE --format shell`,
unchanged) on a build venv of the named Python, so Horovod is built (or taken from the script's own
cache) exactly as the node's script will look for it, then writes the wheelhouse OUT/:

    install.sh                           the rendered script, to run on the node
    horovod/<key>-py<M.m>/horovod-*.whl  the Horovod wheel under the script's own cache key (its
                                         libraries' debug sections stripped, as the script strips them)
    *.whl                                every other wheel the script installed (pip download --no-deps
                                         of its venv's packages); with HPCBUNDLE_SYSTEM_SITE_PACKAGES=1,
                                         only those a node whose Python already has torch lacks (torch
                                         and everything it requires are left out, listed in
                                         system-packages.txt)

On the node, offline and with no compiler (the script then asks for none):

    HPCBUNDLE_CACHE=OUT PIP_NO_INDEX=1 PIP_FIND_LINKS=OUT bash OUT/install.sh VENV

pip reads this host's configuration (PIP_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX): offline from a
local wheelhouse works as well as from an index. A cold Horovod CUDA build is long (about 40 min on
2 cores for six GPU architectures); the script keeps its wheel in HPCBUNDLE_CACHE, so a second run
takes seconds.

    python -m hpcbundle_testbed.gpu_wheelhouse cuda13.0-torch2.11 --python 3.11
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

from hpcbundle.config.bundle import find_bundle
from hpcbundle.image.blocks.horovod import horovod_key
from hpcbundle.rules.loading import load_recipe

from .cache import cache_dir
from .cuda_wheels import run_logged, tail

# Run inside the build venv: the distributions torch requires, transitively and with the extras it names
# (cuda-toolkit[cublas,cudart,...]): a node's system torch has them.
_TORCH_CLOSURE = """
import importlib.metadata as md, json
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
seen, todo = set(), [("torch", ())]
while todo:
    name, extras = todo.pop()
    if (canonicalize_name(name), extras) in seen:
        continue
    seen.add((canonicalize_name(name), extras))
    try:
        requires = md.distribution(name).requires or []
    except md.PackageNotFoundError:
        continue
    for text in requires:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            todo.append((req.name, tuple(sorted(req.extras))))
print(json.dumps(sorted({name for name, _ in seen})))
"""


# With HPCBUNDLE_SYSTEM_SITE_PACKAGES=1: the distributions left out, which the node's Python must have.
SYSTEM_PACKAGES = "system-packages.txt"


class UserError(Exception):
    """A mistake of the caller's (bad recipe, no such Python): one line, exit status 2."""


def say(text: str) -> None:
    print(f"[gpu-wheelhouse {time.strftime('%H:%M:%S')}] {text}", flush=True)


def _python_version(python: str) -> str | None:
    try:
        run = subprocess.run(
            [python, "-c", 'import sys; print("%d.%d" % sys.version_info[:2])'],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return None
    return run.stdout.strip() if run.returncode == 0 else None


def _ask(argv: list[str]) -> str:
    """The first output line of a helper (uv, pyenv) that may be missing or fail: '' then."""
    if shutil.which(argv[0]) is None:
        return ""
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return run.stdout.strip().splitlines()[0] if run.returncode == 0 and run.stdout.strip() else ""


def find_python(version: str) -> str:
    """An interpreter of `version` (e.g. 3.11): pythonX.Y on PATH (a pyenv shim too), then uv's, then pyenv's."""
    pyenv = _ask(["pyenv", "prefix", version])
    candidates = [
        shutil.which(f"python{version}") or "",
        _ask(["uv", "python", "find", version]),
        f"{pyenv}/bin/python{version}" if pyenv else "",
    ]
    for python in filter(None, candidates):
        if _python_version(python) == version:
            return python
    raise UserError(
        f"PYTHON={version}: no Python {version} on this host (get one: uv python install {version}, "
        f"or pyenv install {version}, or apt-get install python{version}-dev python{version}-venv)"
    )


def render_script(recipe: str, dest: Path) -> str:
    """`hpcbundle render RECIPE --format shell` into `dest`; the key its Horovod wheel is cached under (horovod_key)."""
    hpcbundle = [sys.executable, "-m", "hpcbundle", "render", recipe, "--format", "shell", "-o", str(dest)]
    run = subprocess.run(hpcbundle, capture_output=True, text=True, timeout=120, check=False)
    if run.returncode:
        raise UserError(f"RECIPE={recipe}: {run.stderr.strip().removeprefix('hpcbundle: error: ')}")
    return horovod_key(load_recipe(recipe, find_bundle(None, Path.cwd()).recipes_dir))


def _script_line(line: str) -> bool:
    """The install script's step lines and Horovod's build milestones (not pip's or the compiler's)."""
    return line.startswith(("==>", "Horovod:", "CUDA toolkit:", "NCCL ", "install.sh:")) or "Built target" in line


def _heartbeat(log: Path, stop: threading.Event, every: float = 60.0) -> None:
    """Every `every` s until `stop`: the log's latest line (pip and a compile can be silent for minutes)."""
    t0 = time.monotonic()
    while not stop.wait(every):
        say(f"[{time.monotonic() - t0:5.0f}s] still running; the log's last line: {tail(log, 1)[:120]}")


def run_script(script: Path, venv: Path, python: str, log: Path) -> None:
    """The rendered script, unchanged, for `venv` made by `python`: a venv of its own (no system
    packages), so every wheel it installs is there to collect."""
    env = {k: v for k, v in os.environ.items() if k != "HPCBUNDLE_SYSTEM_SITE_PACKAGES"}
    env |= {"HPCBUNDLE_PYTHON": python, "HPCBUNDLE_CACHE": str(cache_dir())}
    say(f"bash {script.name} {venv} (log: {log}); a cold Horovod CUDA build takes ~40 min on 2 cores")
    stop = threading.Event()
    threading.Thread(target=_heartbeat, args=(log, stop), daemon=True).start()
    try:
        status = run_logged(
            ["bash", str(script), str(venv)], log, env=env, timeout=4 * 3600, progress=say, show=_script_line
        )
    finally:
        stop.set()
    if status:
        raise RuntimeError(f"the install script failed ({status}); the end of {log}:\n{tail(log, 30)}")


def installed(venv: Path, system_torch: bool, bundled: set[str]) -> tuple[list[str], list[str]]:
    """name==version of the distributions in `venv` the node needs (Horovod and pip aside), and of
    those left to the node's own Python: with `system_torch`, torch and everything torch requires.
    `bundled`: what every new venv of that Python has already (pip; setuptools before 3.12)."""
    python = str(venv / "bin" / "python")
    system: set[str] = set()
    if system_torch:
        closure = subprocess.run(
            [python, "-c", _TORCH_CLOSURE], capture_output=True, text=True, timeout=120, check=True
        )
        system = set(json.loads(closure.stdout))
    pins = {_canonical(d["name"]): f"{d['name']}=={d['version']}" for d in _pip_list(venv)}
    needed = [pin for name, pin in pins.items() if name not in system | bundled | {"horovod"}]
    return sorted(needed), sorted(pin for name, pin in pins.items() if name in system)


def _pip_list(venv: Path) -> list[dict[str, str]]:
    python = str(venv / "bin" / "python")
    run = subprocess.run(
        [python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(run.stdout)


def bundled_with(python: str, scratch: Path) -> set[str]:
    """The distributions a new venv of `python` comes with (ensurepip's), as pip names them."""
    subprocess.run([python, "-m", "venv", str(scratch)], capture_output=True, timeout=300, check=True)
    try:
        return {_canonical(d["name"]) for d in _pip_list(scratch)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def download(venv: Path, requirements: list[str], dest: Path, log: Path) -> None:
    """The wheel files of `requirements` (exact pins, no dependencies: the venv resolved them) into `dest`."""
    say(f"pip download {len(requirements)} wheels into the wheelhouse")
    argv = [str(venv / "bin" / "python"), "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    status = run_logged([*argv, "--progress-bar", "off", "--dest", str(dest), *requirements], log, timeout=3600)
    if status:
        raise RuntimeError(f"pip download failed ({status}); the end of {log}:\n{tail(log, 30)}")


def strip_wheel(wheel: Path, dest: Path) -> Path:
    """`wheel` into `dest` with the debug sections of its libraries stripped, as the install script
    strips them once installed (Horovod builds RelWithDebInfo: 23 MB -> a few MB), its RECORD rewritten.
    Copied as it is where this host has no `strip`."""
    out = dest / wheel.name
    if shutil.which("strip") is None:
        return Path(shutil.copy2(wheel, out))
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as src:
        names = src.namelist()
        src.extractall(tmp)
        libs = [str(Path(tmp, n)) for n in names if n.endswith(".so") or ".so." in n]
        if libs:
            subprocess.run(["strip", "--strip-debug", *libs], check=True, timeout=600)
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        Path(tmp, record).write_text("".join(_record_line(Path(tmp), n, n == record) for n in names))
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as packed:
            for name in names:
                packed.write(Path(tmp, name), name)
    return out


def _record_line(root: Path, name: str, is_record: bool) -> str:
    """A wheel RECORD line: path,sha256=<urlsafe base64, unpadded>,size (the RECORD itself: no hash)."""
    if is_record:
        return f"{name},,\n"
    data = (root / name).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def build(recipe: str, version: str, out: Path, venv: Path, system_torch: bool) -> Path:
    """Make the wheelhouse `out` (replaced whole at the end: nothing half-written is left there)."""
    partial = out.with_name(f".{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        key = render_script(recipe, partial / "install.sh")
        python = find_python(version)
        say(f"Python {version}: {python}; Horovod cache key {key}-py{version}")
        run_script(partial / "install.sh", venv, python, out.with_name(f"{out.name}.install.log"))
        cached = cache_dir() / "horovod" / f"{key}-py{version}"
        wheels = sorted(cached.glob("horovod-*.whl"))
        if not wheels:
            raise RuntimeError(f"the install script left no Horovod wheel in {cached}")
        (partial / "horovod" / cached.name).mkdir(parents=True)
        strip_wheel(wheels[0], partial / "horovod" / cached.name)
        needed, system = installed(venv, system_torch, bundled_with(python, partial / ".bundled"))
        download(venv, needed, partial, out.with_name(f"{out.name}.download.log"))
        if system:  # what the node's Python must already have (carry-wheels.sh checks against it)
            (partial / SYSTEM_PACKAGES).write_text("".join(f"{pin}\n" for pin in system))
        shutil.rmtree(out, ignore_errors=True)
        os.replace(partial, out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-wheelhouse", description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", help="a recipe name under recipes/ or a path to a recipe file")
    parser.add_argument("--python", required=True, help="the GPU node's Python version, e.g. 3.11")
    parser.add_argument("--out", type=Path, help="the wheelhouse (default build/gpu-wheelhouse/RECIPE-pyX.Y)")
    parser.add_argument("--venv", type=Path, help="the build venv (default: beside the wheelhouse; reused)")
    args = parser.parse_args(argv)
    system_torch = os.environ.get("HPCBUNDLE_SYSTEM_SITE_PACKAGES") == "1"
    name = re.sub(r"\.ya?ml$", "", Path(args.recipe).name)
    out = (args.out or Path("build", "gpu-wheelhouse", f"{name}-py{args.python}")).absolute()
    venv = (args.venv or out.with_name(f"{out.name}.venv")).absolute()
    t0 = time.monotonic()
    try:
        build(args.recipe, args.python, out, venv, system_torch)
    except UserError as exc:
        print(f"gpu-wheelhouse: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"gpu-wheelhouse: {exc}", file=sys.stderr)
        return 1
    files = list(out.rglob("*.whl"))
    size = sum(p.stat().st_size for p in files) / 1e9
    what = "the wheels a node with a system torch lacks" if system_torch else "every wheel the script installs"
    say(f"wrote {out}: {len(files)} wheels ({what}), {size:.1f} GB, in {time.monotonic() - t0:.0f} s")
    env = "HPCBUNDLE_SYSTEM_SITE_PACKAGES=1 " if system_torch else ""
    offline = "HPCBUNDLE_CACHE=DIR PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR"
    say(f"on the node, {out.name}/ copied to DIR: {env}{offline} bash DIR/install.sh VENV")
    return 0


if __name__ == "__main__":
    sys.exit(main())
