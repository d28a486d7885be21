"""A CUDA home and an NCCL home for Horovod's build, made from the NVIDIA wheels in the venv."""

from __future__ import annotations

from typing import Mapping

from ...knowledge.labels import NVIDIA_CONTAINER_ENV
from ..spec import ImageSpec
from .base import BLOCKS, Block, Paths, Snippet
from .nccl import torch_nccl


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

    name, position, path_order = "cudawheels", 60, 10
    shell = ("cudawheels",)

    def build(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        nccl = torch_nccl(spec)
        homes = [what for what, there in (("a CUDA home", spec.cuda_tree), ("an NCCL home", nccl)) if there]
        if not homes:
            return ()
        title = f"{' and '.join(homes)} from the NVIDIA wheels for Horovod's build"
        return (Snippet(title, "cudawheels", {"nccl": nccl}),)

    def paths(self, spec: ImageSpec) -> Paths:
        """The wheels' library directories found at run time, first of all: one NCCL, one cuDNN, the CUDA runtime."""
        recipe, nccl, libs = spec.recipe, torch_nccl(spec), []
        if nccl:
            libs.append(f"{nccl.dir}/lib")
            if recipe.frameworks.tensorflow:
                # TensorFlow's pip wheel dlopens libcudnn.so.8: it finds torch's cuDNN wheel here.
                libs.append(nccl.dir.rsplit("/", 1)[0] + "/cudnn/lib")
        if recipe.gpu and recipe.gpu.source == "wheels" and spec.cuda_home:
            # lib64: the install script's toolkit may be the host's (HPCBUNDLE_CUDA_HOME), which has no lib/.
            libs.append(f"{spec.cuda_home}/{'lib64' if spec.layout.host else 'lib'}")
        return Paths(lib=tuple(libs))

    def runtime_env(self, spec: ImageSpec) -> Mapping[str, str]:
        """What the nvidia/cuda base images set, on the wheels route's plain OS base."""
        return NVIDIA_CONTAINER_ENV if spec.cuda_tree is not None and not spec.layout.host else {}
