"""A CUDA home and an NCCL home for Horovod's build, made from the NVIDIA wheels in the venv."""

from __future__ import annotations

from ...config.fields import major_minor
from ...config.recipes import Recipe
from ...knowledge.compat import CudaWheels as KnownCudaWheels
from ...knowledge.compat import KnowledgeBase
from ..spec import CudaTree, ImageSpec
from .base import BLOCKS, Block, Snippet


def cuda_tree(recipe: Recipe, kb: KnowledgeBase) -> CudaTree | None:
    """The toolkit wheels for gpu.source: wheels (None for the image route or an unknown CUDA)."""
    gpu = recipe.gpu
    if gpu is None or gpu.source != "wheels":
        return None
    wheels: KnownCudaWheels | None = kb.cuda_wheels.get(major_minor(gpu.cuda))
    assert wheels is not None, "the cuda-source rule refuses a CUDA without toolkit wheels before any render"
    return CudaTree(
        dir=wheels.dir,
        build_wheels=tuple(f"{name}=={version}" for name, version in wheels.build.items()),
        runtime_wheels=tuple(f"{name}=={version}" for name, version in wheels.runtime.items()),
        cudart=f"libcudart.so.{gpu.cuda.split('.')[0]}",
    )


@BLOCKS.register
class CudaWheels(Block):
    """Links that make the NVIDIA wheels look like a toolkit and an NCCL install to CMake and nvcc
    (lib64, unversioned libcudart.so and libnccl.so); the install script first finds the wheels' trees.

    Parameters: `gpu.source` (wheels: the toolkit's home), `gpu.cuda`, `frameworks.pytorch`
    (its wheel brings the image's one NCCL).

    Example (recipe cuda13.0-torch2.11)::

        ln -sf libnccl.so.2 /opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so
        if [ ! -e "/opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib64" ]; then ln -s lib "..."; fi
    """

    name, position = "cudawheels", 60
    shell = ("cudawheels",)

    def build(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        homes = [what for what, there in (("a CUDA home", spec.cuda_tree), ("an NCCL home", spec.nccl_dir)) if there]
        if not homes:
            return ()
        return (Snippet(f"{' and '.join(homes)} from the NVIDIA wheels for Horovod's build", "cudawheels"),)
