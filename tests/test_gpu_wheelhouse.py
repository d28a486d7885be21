"""The route for GPU nodes without compilers or network, for real: `make gpu-wheelhouse`'s builder
(hpcbundle_testbed.gpu_wheelhouse) runs the rendered install script of cuda13.0-torch2.11 for
Python 3.11 on this build host, then a node of the namespace cluster, which has no route out and no
compiler, make, nvcc or mpicc on PATH, installs from that wheelhouse alone with the same script.

The build host's pip reads the cached CUDA wheelhouse offline (PIP_NO_INDEX, as gpu_build does) and
the script's Horovod wheel comes from its cache (horovod-0.28.1-<key>-py3.11): warm, nothing compiles.
Cold, the script compiles Horovod for six GPU architectures (~40 min on 2 cores).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hpcbundle_testbed import NetnsCluster
from hpcbundle_testbed.cuda_wheels import check_build_marks, cubin_archs, site_packages
from hpcbundle_testbed.gpu_plugin import GPU_RECIPE, CudaStack, terminal_progress

pytestmark = [pytest.mark.gpu_build, pytest.mark.cluster]

PYTHON = "3.11"

# What a bare GPU node offers: a shell, coreutils and friends, binutils' strip, Python 3.11 with venv.
# No c++/cc/gcc, make, cmake, nvcc, mpicc.
NODE_TOOLS = (
    "bash sh env cat cp mv rm ln mkdir mktemp dirname basename cut sed awk grep find tee tar sha256sum "
    "strip uname id ls readlink"
).split()
NodeRun = Callable[..., subprocess.CompletedProcess[str]]  # a bash script run on the node, as the node sees it
COMPILERS = ("c++", "g++", "gcc", "cc", "make", "cmake", "nvcc", "mpicc")


def _node_path(bin_dir: Path) -> str:
    """A PATH holding only NODE_TOOLS and python3 (Debian's 3.11)."""
    bin_dir.mkdir()
    for tool in NODE_TOOLS:
        found = subprocess.run(["which", tool], capture_output=True, text=True, check=False).stdout.strip()
        assert found, f"{tool} is not on this host"
        (bin_dir / tool).symlink_to(found)
    (bin_dir / "python3").symlink_to("/usr/bin/python3")
    return str(bin_dir)


@pytest.fixture(scope="module")
def wheelhouse(pytestconfig: pytest.Config, cuda_wheelhouse: CudaStack, tmp_path_factory) -> Iterator[Path]:
    """`make gpu-wheelhouse RECIPE=cuda13.0-torch2.11 PYTHON=3.11` as the README gives it, offline from the
    cached CUDA wheelhouse (pip reads PIP_NO_INDEX and PIP_FIND_LINKS)."""
    work = tmp_path_factory.mktemp("gpu-wheelhouse")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(cuda_wheelhouse.wheelhouse.path)}
    env.pop("HPCBUNDLE_SYSTEM_SITE_PACKAGES", None)
    make = ["make", "--no-print-directory", "gpu-wheelhouse", f"RECIPE={GPU_RECIPE}", f"PYTHON={PYTHON}"]
    progress = terminal_progress(pytestconfig, "gpu-wheelhouse")
    proc = subprocess.Popen(
        [*make, f"GPU_WHEELHOUSE={work / 'wh'}"],  # its build venv: a fresh one beside it
        cwd=pytestconfig.rootpath,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        progress(re.sub(r"^\[gpu-wheelhouse [\d:]+\] ", "", line.rstrip()))  # one time stamp, the tag's
    assert proc.wait(timeout=60) == 0, "".join(lines[-40:])
    shutil.rmtree(work / "wh.venv")  # the build venv (~5 GB): the node makes its own
    yield work / "wh"
    shutil.rmtree(work)


def test_wheelhouse_holds_horovod_under_the_scripts_cache_key_and_every_wheel_it_installs(wheelhouse: Path) -> None:
    horovod = sorted(wheelhouse.glob("horovod/horovod-0.28.1-*-py3.11/horovod-0.28.1-cp311-*.whl"))
    assert len(horovod) == 1, sorted(p.name for p in wheelhouse.rglob("*"))
    names = {p.name.split("-")[0].lower() for p in wheelhouse.glob("*.whl")}
    wanted = {"torch", "nvidia_nccl_cu13", "nvidia_cuda_nvcc", "cffi", "pycparser", "torchvision"}
    assert wanted <= names, sorted(wanted - names)
    assert (wheelhouse / "install.sh").is_file() and not list(wheelhouse.glob("*.tar.gz"))


def test_offline_node_without_compilers_installs_from_the_wheelhouse(
    netns_cluster: NetnsCluster, wheelhouse: Path, cuda_wheelhouse: CudaStack, tmp_path: Path
) -> None:
    node_env = {
        "PATH": _node_path(tmp_path / "bin"),
        "HOME": str(tmp_path),
        "PIP_CONFIG_FILE": os.devnull,  # nothing of this host's pip configuration (its indexes, links)
        "HPCBUNDLE_CACHE": str(wheelhouse),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheelhouse),
    }

    def on_node(script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return netns_cluster.run(
            "node1", ["env", "-i", *(f"{k}={v}" for k, v in node_env.items()), "bash", "-c", script], timeout=timeout
        )

    tools = on_node("for t in " + " ".join(COMPILERS) + "; do command -v $t || true; done")
    assert tools.returncode == 0 and tools.stdout.strip() == "", f"the node has these: {tools.stdout}"
    routes = on_node("cat /proc/net/route")
    assert [line.split()[1] for line in routes.stdout.splitlines()[1:]].count("00000000") == 0, routes.stdout
    outside = on_node("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 443), timeout=3)\"")
    assert outside.returncode != 0 and "unreachable" in outside.stderr.lower(), outside.stderr

    venv = tmp_path / "node-venv"
    try:
        _install_and_check(on_node, wheelhouse, venv, cuda_wheelhouse, tmp_path)
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # ~5 GB


def _install_and_check(
    on_node: NodeRun, wheelhouse: Path, venv: Path, cuda_wheelhouse: CudaStack, tmp_path: Path
) -> None:
    install = on_node(f"bash {wheelhouse}/install.sh {venv}", timeout=1200)
    log = install.stdout + install.stderr
    assert install.returncode == 0, log[-4000:]
    assert "Horovod: the cached wheel " in log and "Horovod: building" not in log, log[-4000:]

    check = on_node(f"source {venv}/hpcbundle-env.sh && horovodrun --check-build")
    assert check.returncode == 0, check.stdout + check.stderr
    assert {"Frameworks: PyTorch", "Tensor Operations: NCCL"} <= check_build_marks(check.stdout), check.stdout

    cuobjdump = _cuobjdump(cuda_wheelhouse, tmp_path / "cuobjdump")
    libs = sorted((site_packages(venv) / "horovod" / "torch").glob("mpi_lib_v2*.so"))
    assert libs, f"no horovod/torch/mpi_lib_v2*.so in {venv}"
    elf = subprocess.run([str(cuobjdump), "--list-elf", str(libs[0])], capture_output=True, text=True, check=False)
    wanted = set(cuda_wheelhouse.recipe.gpu.archs) if cuda_wheelhouse.recipe.gpu else set()
    assert wanted and wanted <= cubin_archs(elf.stdout), elf.stdout + elf.stderr


def _cuobjdump(stack: CudaStack, target: Path) -> Path:
    """cuobjdump from the nvidia-cuda-cuobjdump wheel of the cached CUDA wheelhouse, unpacked on this host."""
    wheel = sorted(stack.wheelhouse.path.glob("nvidia_cuda_cuobjdump-*.whl"))
    assert wheel, f"no nvidia_cuda_cuobjdump wheel in {stack.wheelhouse.path}"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(target)]
    subprocess.run([*pip, str(wheel[0])], check=True, capture_output=True, timeout=300)
    tool = target / "nvidia" / "cu13" / "bin" / "cuobjdump"
    tool.chmod(0o755)
    return tool
