"""pytest fixtures for Apptainer and the SIF images built from rendered .defs (hpcbundle_testbed.sif).

Load with ``pytest_plugins = ["hpcbundle_testbed.sif_plugin"]``. Each SIF is built once and cached
under ``$HPCBUNDLE_CACHE/sif/``; a warm session finds it. Nothing skips: Apptainer comes from the
set-up or is installed now, and a build that fails fails the test with its log's tail. Build times
are printed in the session summary ("sif images"). Apptainer's scratch space (APPTAINER_TMPDIR: a
build's rootfs, gigabytes) is a directory of this test run, removed at its end; one that a killed run
left behind is removed by the next run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hpcbundle.config.bundle import Bundle
from hpcbundle.config.recipes import Recipe
from hpcbundle.image.derive import image_spec
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.rules.loading import load_recipe

from .apptainer import ensure_apptainer
from .cache import cache_dir
from .cli import hpcbundle_argv
from .gpu_plugin import CudaStack, HostInstall
from .procs import pid_alive
from .sif import SifBuild, build_sif, setup_horovod_wheel

RUN_FLAGS = ("--userns",)
"""How the tests run a container: in a user namespace (this root lacks capabilities plain `exec` asks for)."""

_REPORT: list[str] = []
_SCRATCH = "apptainer-tmp"


def _scratch_of(pid: int) -> Path:
    return cache_dir() / _SCRATCH / f"run-{pid}"


def pytest_configure(config: pytest.Config) -> None:
    """Apptainer's scratch space in a directory of this run (and the ones killed runs left, removed)."""
    for stale in (cache_dir() / _SCRATCH).glob("run-*"):
        pid = stale.name.removeprefix("run-")
        if not (pid.isdigit() and pid_alive(int(pid))):
            shutil.rmtree(stale, ignore_errors=True)
    _scratch_of(os.getpid()).mkdir(parents=True, exist_ok=True)
    os.environ["APPTAINER_TMPDIR"] = str(_scratch_of(os.getpid()))


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_scratch_of(os.getpid()), ignore_errors=True)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _REPORT:
        terminalreporter.section("sif images")
        for line in _REPORT:
            terminalreporter.write_line(line)


def in_sif(apptainer: str, sif: SifBuild, argv: list[str], binds: tuple[str, ...] = (), timeout: float = 300) -> str:
    """argv's standard output inside the SIF (`apptainer exec --userns`, with `binds` as --bind specs); the
    test fails unless it exits 0."""
    flags = [*RUN_FLAGS, *(f"--bind={spec}" for spec in binds)]
    res = subprocess.run(
        [apptainer, "exec", *flags, str(sif.path), *argv], capture_output=True, text=True, timeout=timeout
    )
    if res.returncode:
        pytest.fail(
            f"{' '.join(argv)} in {sif.path.name} failed ({res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-3000:]}"
        )
    return res.stdout


@pytest.fixture(scope="session")
def apptainer() -> str:
    """The Apptainer to build and run with (the set-up's, or installed now)."""
    try:
        return ensure_apptainer()
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"no Apptainer: {exc}", pytrace=False)


def rendered_def(bundle: Bundle, recipe: str, base: Path) -> str:
    """The recipe's .def as `hpcbundle render RECIPE --format singularity --bootstrap localimage:BASE` prints it."""
    argv = hpcbundle_argv("render", recipe, "--format", "singularity", bundle=bundle.root)
    argv += ["--bootstrap", f"localimage:{base}"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if res.returncode:
        pytest.fail(f"{' '.join(argv[3:])}: {res.stderr.strip()}", pytrace=False)
    return res.stdout


def sif_image(
    bundle: Bundle,
    recipe: Recipe,
    apptainer: str,
    wheels: tuple[Path, ...],
    horovod: Path | None,
    env: dict[str, str] | None = None,
) -> SifBuild:
    """The recipe's SIF (cached or built now), its build reported in the session summary."""
    try:
        built = build_sif(
            recipe,
            lambda base: rendered_def(bundle, recipe.name, base),
            apptainer,
            bundle.examples_dir,
            wheels,
            horovod,
            env,
        )
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"SIF {recipe.name}: {exc}", pytrace=False)
    how = "cached" if built.cached else f"built in {built.seconds:.0f} s"
    reuse = f"Horovod wheel from {horovod.name}" if horovod else "Horovod compiled (no cached wheel)"
    reuse = reuse if recipe.horovod else "no Horovod"
    _REPORT.append(f"{built.path.name}: {how}, {built.path.stat().st_size / 1e9:.2f} GB; {reuse}")
    return built


@pytest.fixture(scope="session")
def cpu_local_sif(bundle_under_test: Bundle, apptainer: str, wheelhouse: Path) -> SifBuild:
    """The cpu-local recipe's rendered .def built into a SIF from the debootstrapped base, with the
    cached torch+cpu wheel and the set-up's Horovod wheel when its key matches the recipe."""
    recipe = load_recipe("cpu-local", bundle_under_test.recipes_dir)
    horovod = setup_horovod_wheel(recipe, image_spec(recipe, knowledge_base()))
    return sif_image(bundle_under_test, recipe, apptainer, (wheelhouse,), horovod)


@pytest.fixture(scope="session")
def cpu_ddp_sif(bundle_under_test: Bundle, apptainer: str, wheelhouse: Path) -> SifBuild:
    """The cpu-ddp recipe's rendered .def (torch.distributed, no Horovod, no MPI) built into a SIF from the
    debootstrapped base with the cached torch+cpu wheel: nothing compiles."""
    recipe = load_recipe("cpu-ddp", bundle_under_test.recipes_dir)
    return sif_image(bundle_under_test, recipe, apptainer, (wheelhouse,), None)


@pytest.fixture(scope="session")
def gpu_sif(
    bundle_under_test: Bundle, apptainer: str, cuda_wheelhouse: CudaStack, gpu_host_install: HostInstall
) -> SifBuild:
    """The CUDA-wheels recipe's rendered .def built into a SIF offline (PIP_NO_INDEX=1) from the cached CUDA
    wheelhouse and the Horovod NCCL wheel the install script cached for the same key (no GPU needed)."""
    wheels = (cuda_wheelhouse.wheelhouse.path,)
    horovod = gpu_host_install.wheel.parent
    return sif_image(bundle_under_test, cuda_wheelhouse.recipe, apptainer, wheels, horovod, {"PIP_NO_INDEX": "1"})
