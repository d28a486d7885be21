"""The CUDA-wheels recipe's rendered .def (`--bootstrap localimage:<base>`) built into a SIF by the real
Apptainer, offline, from the cached CUDA wheelhouse and the Horovod NCCL wheel the install script
cached for the same key (tests/test_gpu_build.py), so nothing is downloaded or compiled again; then,
inside the SIF, what tests/test_gpu_image.py shows of the Docker image: check-build lists NCCL, one
libnccl (torch's wheel) resolves, the cubins cover every gpu.archs entry.

No GPU executes any of it: this machine has none; the SIF's code is linked and inspected, not run on a GPU.
"""

from __future__ import annotations

import pytest

from hpcbundle.image.blocks.horovod import check_build
from hpcbundle.image.spec import VENV
from hpcbundle_testbed import cuda_wheels
from hpcbundle_testbed.cuda_wheels import check_build_marks, cubin_archs, ldd
from hpcbundle_testbed.gpu_plugin import CudaStack, HostInstall
from hpcbundle_testbed.sif import SifBuild
from hpcbundle_testbed.sif_plugin import in_sif

pytestmark = [pytest.mark.apptainer, pytest.mark.gpu_build]

SITE = f"{VENV}/lib/python3.11/site-packages"
HOST_CUDA = "/opt/host-cu13"
"""Where the host venv's CUDA wheel tree (with cuobjdump, a build tool the runtime image need not carry) is bound."""


def _torch_lib(apptainer: str, gpu_sif: SifBuild) -> str:
    return in_sif(apptainer, gpu_sif, ["bash", "-c", f"ls {SITE}/horovod/torch/mpi_lib_v2*.so"]).split()[0]


def test_sif_build_reused_the_cached_horovod_wheel(gpu_sif: SifBuild) -> None:
    if gpu_sif.cached:
        return  # the cached SIF's build was checked when it was built
    assert "Horovod: the cached wheel /wheelhouse/horovod/" in gpu_sif.log, gpu_sif.log[-3000:]
    assert "Horovod: building" not in gpu_sif.log


def test_sif_check_build_lists_nccl(apptainer: str, gpu_sif: SifBuild, cuda_wheelhouse: CudaStack) -> None:
    marks = check_build_marks(in_sif(apptainer, gpu_sif, ["horovodrun", "--check-build"]))
    assert {"Frameworks: PyTorch", "Tensor Operations: NCCL"} <= marks, marks
    assert set(check_build(cuda_wheelhouse.recipe)) <= marks, marks


def test_sif_has_one_nccl_torchs_own_wheel(apptainer: str, gpu_sif: SifBuild) -> None:
    resolved = ldd(_torch_lib(apptainer, gpu_sif), run=lambda argv: in_sif(apptainer, gpu_sif, argv))
    assert resolved.get("libnccl.so.2", "").startswith(f"{SITE}/nvidia/nccl/lib/"), resolved
    find = ["bash", "-c", "find / -xdev -name 'libnccl.so*' -type f 2>/dev/null || true"]
    copies = in_sif(apptainer, gpu_sif, find).split()
    assert len(copies) == 1, f"more than one NCCL in the SIF: {copies}"


def test_sif_cuda_code_for_every_recipe_arch(
    apptainer: str, gpu_sif: SifBuild, gpu_host_install: HostInstall, cuda_wheelhouse: CudaStack
) -> None:
    host_tree = cuda_wheels.site_packages(gpu_host_install.venv) / "nvidia" / "cu13"
    argv = [f"{HOST_CUDA}/bin/cuobjdump", "--list-elf", _torch_lib(apptainer, gpu_sif)]
    archs = cubin_archs(in_sif(apptainer, gpu_sif, argv, binds=(f"{host_tree}:{HOST_CUDA}:ro",)))
    recipe = cuda_wheelhouse.recipe
    wanted = set(recipe.gpu.archs) if recipe.gpu else set()
    assert wanted and wanted <= archs, f"cubins for {sorted(archs)}; the recipe's gpu.archs: {sorted(wanted)}"
