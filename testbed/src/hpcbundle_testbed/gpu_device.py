"""pytest plugin for the tests that need an NVIDIA GPU: the `gpu` marker, its skip, and the GPU lane.

`make test-gpu` runs them (``pytest -m gpu``); `make test` deselects them (CI has no GPU). On a
host without an NVIDIA GPU each one skips with the reason "no NVIDIA GPU on this host" (nvidia-smi
missing, failing, or listing no GPU). On a GPU host the lane installs the CUDA 13 recipe through
the project's own bare-metal route, its rendered install script, unchanged:

- into a venv that sees the host's torch and NVIDIA wheels (a ``.pth`` naming the site-packages
  of the ``python3`` that imports torch: that Python may itself be a venv, whose packages
  ``--system-site-packages`` would not show), so torch is used, not downloaded;
- with the host's CUDA toolkit (``HPCBUNDLE_CUDA_HOME`` from ``nvcc`` on PATH), where there is one;
- offline from a folder of wheels for what the host lacks, where one is given;
- with a fresh Horovod cache, so Horovod is built there, with NCCL.

Environment:
    HPCBUNDLE_GPU_WHEELS=DIR    pip --no-index --find-links DIR (default: .carry/wheels in the
                                repository, when it exists; see scripts/device/carry-wheels.sh)
    HPCBUNDLE_GPU_LANE_DIR=DIR  where the venv, the Horovod cache and the logs stay (default: a
                                pytest temp dir); bench/gpu.py reuses the venv from there
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .gpu_plugin import run_install_script

NO_GPU = "no NVIDIA GPU on this host"


@functools.cache
def nvidia_gpus() -> tuple[str, ...]:
    """The GPUs `nvidia-smi -L` lists ('GPU 0: NVIDIA H100 80GB HBM3 (UUID: ...)'); () without one."""
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        run = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return ()
    if run.returncode:
        return ()
    return tuple(line for line in run.stdout.splitlines() if line.startswith("GPU "))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"gpu: needs an NVIDIA GPU (make test-gpu); skips with '{NO_GPU}'")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None and not nvidia_gpus():
        pytest.skip(NO_GPU)


def host_torch_site(python: str = "python3") -> Path:
    """The site-packages that holds the torch of `python` (fails the test without one)."""
    probe = "import pathlib, torch; print(pathlib.Path(torch.__file__).resolve().parent.parent)"
    run = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=300, check=False)
    if run.returncode:
        pytest.fail(f"{python} cannot import torch on this GPU host: {run.stderr.strip()[-500:]}", pytrace=False)
    return Path(run.stdout.strip())


@pytest.fixture(scope="session")
def gpu_venv(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory, gpu_report: list[str]) -> Path:
    """The venv of `hpcbundle render cuda13.0-torch2.11 --format shell`, run on this GPU host (see the
    module); its log is install.log beside it."""
    work = Path(os.environ.get("HPCBUNDLE_GPU_LANE_DIR") or tmp_path_factory.mktemp("gpu-lane")).resolve()
    venv = work / "venv"
    if not (venv / "bin" / "python").exists():
        work.mkdir(parents=True, exist_ok=True)
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True, timeout=300)
        site = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
        Path(site, "hpcbundle-host-torch.pth").write_text(f"{host_torch_site()}\n")
    env = {"HPCBUNDLE_CACHE": str(work / "cache"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    wheels = Path(os.environ.get("HPCBUNDLE_GPU_WHEELS") or pytestconfig.rootpath / ".carry" / "wheels")
    if wheels.is_dir():
        env |= {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels.resolve())}
    nvcc = shutil.which("nvcc")
    if nvcc:
        env["HPCBUNDLE_CUDA_HOME"] = str(Path(nvcc).resolve().parent.parent)
    _, seconds = run_install_script(pytestconfig, venv, work, env)
    gpu_report.append(f"install script on this GPU host: {seconds:.0f} s ({venv})")
    return venv
