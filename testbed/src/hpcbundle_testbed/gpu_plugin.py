"""pytest fixtures for the GPU stack built without a GPU: the CUDA-wheels wheelhouse and a host venv
made from it (hpcbundle_testbed.cuda_wheels), and the `gpu_build` marker.

Load with ``pytest_plugins = ["hpcbundle_testbed.gpu_plugin"]``. Nothing skips: a download or an
install that fails fails the test with its log's tail. Long steps print progress lines to the
terminal (also without -s); timings are printed in the session summary ("gpu build").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

from hpcbundle.config.bundle import find_bundle
from hpcbundle.config.fields import major_minor
from hpcbundle.config.recipes import Recipe
from hpcbundle.image.blocks.frameworks import framework_requirements
from hpcbundle.image.blocks.horovod import horovod_cache
from hpcbundle.image.blocks.venv import HOROVOD_HELPERS, build_requirements
from hpcbundle.image.derive import image_spec
from hpcbundle.knowledge.compat import knowledge_base
from hpcbundle.rules.loading import load_recipe

from . import cuda_wheels
from .cache import cache_dir
from .cuda_wheels import Prepared

# The CUDA-wheels recipe the GPU build tests build (host script and image).
GPU_RECIPE = "cuda13.0-torch2.11"

_REPORT: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gpu_build: builds the CUDA stack for real from PyPI's NVIDIA wheels (no GPU needed; slow cold, "
        "~3 GB of downloads cached under $HPCBUNDLE_CACHE)",
    )


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _REPORT:
        terminalreporter.section("gpu build")
        for line in _REPORT:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def gpu_report() -> list[str]:
    """Lines for the session summary (what was cached, what each step took): append to it."""
    return _REPORT


def terminal_progress(config: pytest.Config, tag: str) -> Callable[[str], None]:
    """A progress callback writing ``[tag HH:MM:SS] line`` to the terminal past pytest's capture."""
    capman = config.pluginmanager.get_plugin("capturemanager")
    writer = config.get_terminal_writer()

    def progress(text: str) -> None:
        line = f"[{tag} {time.strftime('%H:%M:%S')}] {text}"
        if capman is None:
            writer.line(line)
            writer.flush()
            return
        with capman.global_and_fixture_disabled():
            writer.line(line)
            writer.flush()  # CI pipes the output: show each line when it happens

    return progress


@dataclass(frozen=True)
class CudaStack:
    """The recipe and the requirement list the GPU build tests install, and where they are."""

    recipe: Recipe
    requirements: tuple[str, ...]
    wheelhouse: Prepared
    venv: Prepared | None = None


def stack_requirements(recipe: Recipe) -> tuple[str, ...]:
    """What the install script puts into its venv (the host layout of the recipe's spec): Horovod's
    pinned build helpers and cmake, the frameworks (torch 2.11.0 pulls its NVIDIA wheels: NCCL,
    cuDNN, ...), the CUDA toolkit wheels; plus cuobjdump, which the tests read cubins with."""
    kb = knowledge_base()
    spec = image_spec(recipe, kb, host=True)
    if spec.cuda_tree is None or recipe.gpu is None:
        raise ValueError(f"recipe {recipe.name} does not take CUDA from PyPI's wheels (gpu.source: wheels)")
    cuobjdump = kb.cuda_wheels[major_minor(recipe.gpu.cuda)].cuobjdump
    return (
        *HOROVOD_HELPERS,
        *build_requirements(spec),
        *framework_requirements(recipe, kb),
        *spec.cuda_tree.requirements,
        *(f"{name}=={version}" for name, version in cuobjdump.items()),
    )


def stack_sdists(recipe: Recipe) -> tuple[str, ...]:
    """Source distributions the script builds from when its cache has no wheel: Horovod's."""
    return (f"horovod=={recipe.horovod.version}",)


@pytest.fixture(scope="session")
def gpu_recipe(pytestconfig: pytest.Config) -> Recipe:
    """The CUDA-wheels recipe (recipes/cuda13.0-torch2.11.yaml of the bundle under test)."""
    bundle = find_bundle(None, pytestconfig.rootpath)
    return load_recipe(GPU_RECIPE, bundle.recipes_dir)


@pytest.fixture(scope="session")
def cuda_wheelhouse(pytestconfig: pytest.Config, gpu_recipe: Recipe, gpu_report: list[str]) -> CudaStack:
    """Every wheel of the CUDA-wheels stack in one cached directory (pip download once per key)."""
    try:
        requirements = stack_requirements(gpu_recipe)
        wheels = cuda_wheels.wheelhouse(
            requirements, sdists=stack_sdists(gpu_recipe), progress=terminal_progress(pytestconfig, "wheelhouse")
        )
    except (RuntimeError, TimeoutError, ValueError) as exc:
        pytest.fail(f"CUDA wheelhouse unavailable: {exc}", pytrace=False)
    size = sum(p.stat().st_size for p in wheels.path.iterdir())
    gpu_report.append(f"wheelhouse {wheels.key}: {size / 1e9:.1f} GB, {wheels.how}")
    return CudaStack(gpu_recipe, requirements, wheels)


@pytest.fixture(scope="session")
def cuda_host_venv(pytestconfig: pytest.Config, cuda_wheelhouse: CudaStack, gpu_report: list[str]) -> CudaStack:
    """A host venv that already has torch and the NVIDIA wheels, installed offline from the wheelhouse."""
    try:
        venv = cuda_wheels.host_venv(
            cuda_wheelhouse.requirements,
            cuda_wheelhouse.wheelhouse.path,
            progress=terminal_progress(pytestconfig, "host venv"),
        )
    except (RuntimeError, TimeoutError) as exc:
        pytest.fail(f"CUDA host venv unavailable: {exc}", pytrace=False)
    gpu_report.append(f"host venv {venv.key}: {venv.how}")
    return CudaStack(cuda_wheelhouse.recipe, cuda_wheelhouse.requirements, cuda_wheelhouse.wheelhouse, venv)


@dataclass(frozen=True)
class HostInstall:
    """What the rendered install script did on the host venv."""

    venv: Path
    wheel: Path  # the Horovod wheel in the script's cache ($HPCBUNDLE_CACHE/horovod/<key>-py<M.m>/)
    installed_from: Path  # the wheel file pip installed: the cached one when warm, the build's when cold
    log: str
    seconds: float
    torch_record: tuple[int, int] | None  # torch's RECORD (inode, mtime) before the script ran


def _script_lines(line: str) -> bool:
    """The script's own lines (not pip's or the compiler's), and make's targets as they finish."""
    noise = ("Requirement already", "Looking in", "Collecting", "Processing", "WARNING: Location", "Using cached")
    return (not line[0].isspace() and not line.startswith(noise)) or "Built target" in line


def installed_wheel(venv: Path, name: str = "horovod") -> Path | None:
    """The wheel file `name` was installed from (pip's direct_url.json), if it came from a file."""
    for meta in cuda_wheels.site_packages(venv).glob(f"{name}-*.dist-info/direct_url.json"):
        url = json.loads(meta.read_text()).get("url", "")
        if url.startswith("file://"):
            return Path(unquote(url[len("file://") :]))
    return None


def run_install_script(config: pytest.Config, venv: Path, work: Path, env: dict[str, str]) -> tuple[str, float]:
    """Render `GPU_RECIPE --format shell` into `work` and run it unchanged for `venv`, with `env` over
    this process's: (its log, seconds). Fails the test with the log's tail unless it exits 0."""
    script = work / "install.sh"
    hpcbundle = Path(sys.executable).parent / "hpcbundle"
    render = subprocess.run(
        [str(hpcbundle), "render", GPU_RECIPE, "--format", "shell", "-o", str(script)],
        cwd=config.rootpath,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if render.returncode:
        pytest.fail(f"hpcbundle render {GPU_RECIPE} --format shell: {render.stderr.strip()}", pytrace=False)
    log = work / "install.log"
    t0 = time.monotonic()
    try:
        status = cuda_wheels.run_logged(
            ["bash", str(script), str(venv)],
            log,
            env={**os.environ, **env},
            cwd=work,
            timeout=1800,
            progress=terminal_progress(config, "install.sh"),
            show=_script_lines,
        )
    except TimeoutError as exc:
        pytest.fail(f"the rendered install script: {exc}\n{cuda_wheels.tail(log, 60)}", pytrace=False)
    if status:
        pytest.fail(f"the rendered install script failed ({status}):\n{cuda_wheels.tail(log, 60)}", pytrace=False)
    return log.read_text(errors="replace"), time.monotonic() - t0


def in_venv(
    venv: Path, argv: list[str], timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run argv as the install script tells users to: after sourcing the venv's hpcbundle-env.sh
    (PATH, and LD_LIBRARY_PATH with torch's nvidia/nccl and the CUDA tree, as in the image's ENV)."""
    env_file = venv / "hpcbundle-env.sh"
    assert env_file.is_file(), f"the install script wrote no {env_file.name} into the venv"
    return subprocess.run(
        ["bash", "-c", 'source "$0" && exec "$@"', str(env_file), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONNOUSERSITE": "1", **(env or {})},
        cwd="/",
        check=False,
    )


def offline_env(stack: CudaStack) -> dict[str, str]:
    """The install script's environment on the cached host venv: offline from the stack's wheelhouse."""
    return {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(stack.wheelhouse.path),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "HPCBUNDLE_CACHE": str(cache_dir()),
    }


@pytest.fixture(scope="session")
def gpu_host_install(
    pytestconfig: pytest.Config, cuda_host_venv: CudaStack, gpu_report: list[str], tmp_path_factory
) -> HostInstall:
    """`hpcbundle render cuda13.0-torch2.11 --format shell`, run unchanged on the cached host venv,
    offline (PIP_NO_INDEX=1, the wheelhouse as PIP_FIND_LINKS). Horovod is uninstalled first, so the
    script must install it: cold it compiles (~220 s), warm it takes its cached wheel."""
    venv = cuda_host_venv.venv
    assert venv is not None
    py = str(venv.path / "bin" / "python")
    subprocess.run([py, "-m", "pip", "uninstall", "--yes", "horovod"], capture_output=True, timeout=300, check=False)
    torch_record = cuda_wheels.dist_record(venv.path, "torch")
    log, seconds = run_install_script(
        pytestconfig, venv.path, tmp_path_factory.mktemp("gpu-install"), offline_env(cuda_host_venv)
    )
    installed = installed_wheel(venv.path)
    if installed is None:
        pytest.fail("the install script left no Horovod installed from a wheel file", pytrace=False)
    cached = host_horovod_cache(cuda_host_venv.recipe, venv.path) / installed.name
    how = "its cached wheel" if installed == cached else "a fresh build"
    gpu_report.append(f"install script on the host venv: {seconds:.0f} s (Horovod from {how})")
    return HostInstall(venv.path, cached, installed, log, seconds, torch_record)


def host_horovod_cache(recipe: Recipe, venv: Path) -> Path:
    """The install script's cache directory for the recipe's Horovod: $HPCBUNDLE_CACHE/horovod/<key>-py<M.m>."""
    template = horovod_cache(recipe, host=True)
    python = cuda_wheels.site_packages(venv).parent.name.removeprefix("python")
    path = template.replace("${HPCBUNDLE_CACHE}", str(cache_dir())).replace("${HPCBUNDLE_PYVER}", python)
    return Path(path)
