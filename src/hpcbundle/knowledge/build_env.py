"""The variables hpcbundle derives for Horovod's build from a recipe.

A recipe's `horovod.build_env` may add build variables, never set one of these: the image would be
built otherwise than its recipe and labels say. The image stage's Horovod block sets only names
this module calls derived (a test holds it to that).

    >>> derived("HOROVOD_WITH_PYTORCH"), derived("HOROVOD_GPU_OPERATIONS"), derived("HOROVOD_CPU_OPERATIONS")
    (True, True, False)
"""

from __future__ import annotations

DERIVED_NAMES = frozenset(
    {
        # the image's own prefixes (the venv, a source-built MPI or UCX, Intel MPI's wheels)
        "PATH",
        "LD_LIBRARY_PATH",
        "I_MPI_ROOT",
        "FI_PROVIDER_PATH",
        # the GPU build: NCCL, CUDA and the recipe's gpu.archs in Horovod's and PyTorch's spelling
        "HOROVOD_GPU_OPERATIONS",
        "HOROVOD_NCCL_LINK",
        "HOROVOD_CUDA_HOME",
        "HOROVOD_NCCL_HOME",
        "HOROVOD_BUILD_CUDA_CC_LIST",
        "TORCH_CUDA_ARCH_LIST",
        "CMAKE_POLICY_VERSION_MINIMUM",
    }
)
DERIVED_PREFIXES = ("HOROVOD_WITH_", "HOROVOD_WITHOUT_")  # from frameworks and horovod.controllers


def derived(name: str) -> bool:
    """Whether hpcbundle derives build variable `name` from the recipe."""
    return name in DERIVED_NAMES or name.startswith(DERIVED_PREFIXES)
