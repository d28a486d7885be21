"""A recipe's rendered .def built into a SIF by the real Apptainer, from the debootstrapped Debian base
(no registry), reusing prebuilt Horovod wheels, cached under ``$HPCBUNDLE_CACHE/sif/``.

The base is the testbed's cached rootfs tarball plus this machine's layer (apt sources, trusted CAs:
`host_layer`, as the Docker engine's base image gets), unpacked once as a sandbox directory that
`hpcbundle render --bootstrap localimage:<sandbox>` names. The build runs where the .def expects its
context: a directory with examples/ and wheelhouse/, the wheelhouse holding the given wheels and a
Horovod wheel at ``wheelhouse/horovod/<horovod_key>/`` (what the Docker route's build context holds:
the same rendered step installs it instead of compiling). The SIF's cache key covers the rendered
.def (which names the base sandbox, itself keyed by the rootfs and the host layer) and the wheels.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hpcbundle.config.bundle import find_bundle
from hpcbundle.config.recipes import Recipe
from hpcbundle.image.blocks.horovod import horovod_cache, horovod_env, horovod_key
from hpcbundle.image.derive import image_spec
from hpcbundle.image.spec import WHEELHOUSE, ImageSpec
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.rules.loading import load_recipe

from .apptainer import build_argv
from .cache import cache_dir, exclusive_lock
from .docker_engine.base_image import host_layer
from .docker_engine.rootfs import debootstrap_tarball

SUITE = "bookworm"
WHEELHOUSE_FILES = ("*.whl", "*.tar.gz")
"""What a wheelhouse directory gives a build: wheels, the Horovod sdist, source tarballs."""


@dataclass(frozen=True)
class SifBuild:
    """A SIF built from a recipe's rendered .def, and how getting it went."""

    path: Path
    definition: str
    seconds: float  # what getting it took this time
    cached: bool  # True when it came from the cache
    log: str  # the build's output (empty when cached)


def base_sandbox(cache: Path | None = None) -> Path:
    """The debootstrapped Debian rootfs plus this machine's layer, as a cached sandbox directory."""
    rootfs = debootstrap_tarball(SUITE)
    layer = host_layer(SUITE)
    digest = hashlib.sha256(rootfs.sha256.encode())
    for rel, data in sorted(layer.items()):
        digest.update(rel.encode() + b"\0" + data)
    root = (cache or cache_dir()) / "sif"
    sandbox = root / f"base-{rootfs.key}-{digest.hexdigest()[:12]}"
    with exclusive_lock(root / f"{sandbox.name}.lock"):
        if sandbox.is_dir():
            return sandbox
        partial = Path(tempfile.mkdtemp(prefix=".base-", dir=root))
        try:
            subprocess.run(["tar", "-C", str(partial), "-xf", str(rootfs.path)], check=True, timeout=600)
            for rel, data in layer.items():
                (partial / rel).parent.mkdir(parents=True, exist_ok=True)
                (partial / rel).write_bytes(data)
            partial.rename(sandbox)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return sandbox


def wheelhouse_files(wheels: Iterable[Path]) -> list[Path]:
    """The wheels and source tarballs in the directories `wheels` (not their bookkeeping files)."""
    return sorted(p for d in wheels for pattern in WHEELHOUSE_FILES for p in d.glob(pattern) if p.is_file())


def setup_horovod_wheel(recipe: Recipe, spec: ImageSpec, cache: Path | None = None) -> Path | None:
    """The directory of the Horovod wheel scripts/setup/horovod-wheel.sh cached for the host venv when its
    key names exactly this recipe's versions (Horovod, torch, TensorFlow, Open MPI, Python, patches) and its
    BUILD-INFO the recipe's sdist sha256 and HOROVOD_WITH_*/WITHOUT_* flags; else None. That wheel is
    built on the same Debian release against the same distro Open MPI, so the image can install it."""
    fw = recipe.frameworks
    if (
        recipe.base.os != "debian12"
        or recipe.mpi.install != "distro"
        or recipe.gpu
        or not (fw.pytorch and fw.tensorflow)
    ):
        return None
    torch = fw.pytorch.version + (f"+{fw.pytorch.variant}" if fw.pytorch.variant else "")
    prefix = (
        f"horovod{recipe.horovod.version}-torch{torch}-tf{fw.tensorflow.version}-ompi{recipe.mpi.version}"
        f"-py{recipe.python}-{'-'.join(recipe.horovod.patches)}."
    )
    flags = {f"{k}={v}" for k, v in horovod_env(spec).items() if k.startswith(("HOROVOD_WITH_", "HOROVOD_WITHOUT_"))}
    for entry in sorted(((cache or cache_dir()) / "horovod").glob(f"{prefix}*")):
        info = entry / "BUILD-INFO"
        if not info.is_file() or not any(entry.glob("horovod-*.whl")):
            continue
        fields = dict(line.split("=", 1) for line in info.read_text().splitlines() if "=" in line)
        if fields.get("sdist_sha256") == recipe.horovod.sdist_sha256 and set(fields.get("flags", "").split()) == flags:
            return entry
    return None


def build_context(recipe: Recipe, dest: Path, examples: Path, wheels: Iterable[Path], horovod: Path | None) -> None:
    """`dest` as the .def's build context: examples/, wheelhouse/ with `wheels`' files and, when given,
    the Horovod wheel directory `horovod` at wheelhouse/horovod/<horovod_key>/."""
    shutil.copytree(examples, dest / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    wheelhouse = dest / "wheelhouse"
    wheelhouse.mkdir()
    for path in wheelhouse_files(wheels):
        _link_or_copy(path, wheelhouse / path.name)
    if horovod is not None:
        link_horovod_wheel(recipe, horovod, wheelhouse)


def link_horovod_wheel(recipe: Recipe, wheels: Path, wheelhouse: Path) -> Path:
    """Hard-link the Horovod wheel in `wheels` to wheelhouse/horovod/<horovod_key>/, where the rendered
    Horovod step installs it instead of compiling; that directory."""
    target = wheelhouse / horovod_cache(recipe, host=False).removeprefix(WHEELHOUSE + "/")
    target.mkdir(parents=True, exist_ok=True)
    for wheel in wheels.glob("horovod-*.whl"):
        if not (target / wheel.name).exists():
            _link_or_copy(wheel, target / wheel.name)
    return target


def _link_or_copy(src: Path, dest: Path) -> None:
    """A hard link (no copy of gigabytes), a copy where links cannot cross file systems."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def _context_digest(examples: Path, wheels: Iterable[Path], horovod: Path | None) -> str:
    """What the build context brings in: the examples' contents, the wheels' names and sizes (a
    wheel's name fixes its contents)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in examples.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f"{path.relative_to(examples)}\0".encode() + path.read_bytes())
    wheel_files = wheelhouse_files(wheels)
    wheel_files += sorted(horovod.glob("horovod-*.whl")) if horovod else []
    for path in wheel_files:
        digest.update(f"{path.name} {path.stat().st_size}\0".encode())
    return digest.hexdigest()


def build_sif(
    recipe: Recipe,
    render: Callable[[Path], str],
    apptainer: str,
    examples: Path,
    wheels: Iterable[Path] = (),
    horovod: Path | None = None,
    env: Mapping[str, str] | None = None,
    cache: Path | None = None,
    timeout: float = 3600,
) -> SifBuild:
    """The SIF of `recipe`, built from the .def `render(base_sandbox)` returns, or the cached one; `env`
    is added to the build's environment, which %post sees (e.g. PIP_NO_INDEX=1: offline).

    A failed build leaves nothing at the cached path; its log's tail is in the RuntimeError."""
    t0 = time.monotonic()
    wheels = tuple(wheels)
    definition = render(base_sandbox(cache))
    key = hashlib.sha256((definition + "\0" + _context_digest(examples, wheels, horovod)).encode()).hexdigest()[:16]
    root = (cache or cache_dir()) / "sif"
    sif = root / f"{recipe.name}-{key}.sif"
    with exclusive_lock(root / f"{sif.name}.lock"):
        if sif.is_file():
            return SifBuild(sif, definition, time.monotonic() - t0, cached=True, log="")
        work = Path(tempfile.mkdtemp(prefix=f".build-{recipe.name}-", dir=root))
        try:
            build_context(recipe, work, examples, wheels, horovod)
            (work / f"{recipe.name}.def").write_text(definition)
            partial = work / f"{recipe.name}.sif"
            res = subprocess.run(
                build_argv(apptainer, partial, work / f"{recipe.name}.def"),
                cwd=work,
                env={**os.environ, **(env or {})},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                timeout=timeout,
                check=False,
            )
            if res.returncode or not partial.is_file():
                raise RuntimeError(f"apptainer build {recipe.name} failed ({res.returncode}):\n{res.stdout[-4000:]}")
            partial.rename(sif)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    for stale in root.glob(f"{recipe.name}-*.sif"):  # the recipe's older builds: gigabytes each
        if stale != sif:
            stale.unlink(missing_ok=True)
            stale.with_name(f"{stale.name}.lock").unlink(missing_ok=True)
    return SifBuild(sif, definition, time.monotonic() - t0, cached=False, log=res.stdout)


def cached_horovod_wheel(recipe: Recipe, cache: Path | None = None) -> Path | None:
    """The directory of a cached Horovod wheel built for exactly this recipe's versions: the install
    script's (``horovod/<horovod_key>-py<python>/``), else the set-up's (`setup_horovod_wheel`); None for a
    recipe without Horovod too."""
    if recipe.horovod is None:
        return None
    spec = image_spec(recipe, knowledge_base())
    script = (cache or cache_dir()) / "horovod" / f"{horovod_key(recipe)}-py{recipe.python}"
    if any(script.glob("horovod-*.whl")):
        return script
    return setup_horovod_wheel(recipe, spec, cache)


def main(argv: list[str]) -> int:
    """`base`: make the base sandbox, print its path. `horovod RECIPE WHEELHOUSE`: link the cached Horovod
    wheel of the bundle's recipe into WHEELHOUSE/horovod/<horovod_key>/ (say so when there is none)."""
    if argv[:1] == ["base"]:
        print(base_sandbox())
        return 0
    if len(argv) == 3 and argv[0] == "horovod":
        recipe = load_recipe(argv[1], find_bundle(None, Path.cwd()).recipes_dir)
        if recipe.horovod is None:
            print(f"{recipe.name} builds no Horovod: no wheel to link", file=sys.stderr)
            return 0
        wheels = cached_horovod_wheel(recipe)
        if wheels is None:
            print(f"no cached Horovod wheel for {recipe.name}: the build compiles it", file=sys.stderr)
            return 0
        target = link_horovod_wheel(recipe, wheels, Path(argv[2]))
        print(f"Horovod for {recipe.name}: the cached wheel in {target} (no compile)", file=sys.stderr)
        return 0
    print("usage: python -m hpcbundle_testbed.sif base | horovod RECIPE WHEELHOUSE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
