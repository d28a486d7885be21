"""The image's one NCCL from apt: NVIDIA's exact packages where torch's wheel brings none, or the base
image's own packages removed where it does."""

from __future__ import annotations

from typing import NamedTuple

from ...config.fields import major_minor
from ...config.recipes import Recipe
from ...knowledge.compat import KnowledgeBase
from ..spec import ImageSpec
from .base import BLOCKS, Apt, Block, Packages


def nccl_from_torch(recipe: Recipe, kb: KnowledgeBase) -> bool:
    """True when torch's wheel brings NCCL as the nvidia-nccl wheel (the image's one NCCL)."""
    pt = recipe.frameworks.pytorch
    if recipe.gpu is None or pt is None:
        return False
    if recipe.gpu.source == "wheels":
        return True
    wheel = kb.torch_wheel(pt.version, pt.variant)
    return wheel is not None and wheel.nccl is not None


class TorchNccl(NamedTuple):
    """torch's nvidia/nccl (`dir`) and what HOROVOD_NCCL_HOME names (`home`): the same in an image, a link
    tree in the install script's build directory (the host's wheel may sit in another site-packages)."""

    dir: str
    home: str


def torch_nccl(spec: ImageSpec) -> TorchNccl | None:
    """The NCCL torch's wheel brings, where it does (None: the base image's or NVIDIA's apt NCCL)."""
    if not nccl_from_torch(spec.recipe, spec.kb):
        return None
    if spec.layout.host:
        return TorchNccl("${HPCBUNDLE_NCCL_DIR}", f"{spec.layout.build_dir}/nccl")
    there = f"{spec.site_packages}/nvidia/nccl"
    return TorchNccl(there, there)


def apt_version(nccl: str, cuda: str) -> str:
    """NVIDIA's apt spelling of an NCCL version built for a CUDA.

    >>> apt_version("2.16.5", "11.8.0")
    '2.16.5-1+cuda11.8'
    """
    return f"{nccl}-1+cuda{major_minor(cuda)}"


@BLOCKS.register
class Nccl(Block):
    """NCCL's apt packages (no steps of its own; the apt block installs or purges them).

    Without an NCCL from torch's wheel, libnccl2/libnccl-dev are pinned to gpu.nccl (the CUDA base
    images hold another version, so the pin may replace a held package or go down a version). With
    one, the nvidia/cuda base image's own NCCL goes: devel images hold libnccl2 + libnccl-dev,
    runtime images libnccl2, base images none.

    Parameters: `gpu.nccl`, `gpu.cuda`, `gpu.source`, `frameworks.pytorch`, `base.runtime_image`.

    Example (recipe cuda11.8-tf2.14-torch2.1, in the build stage's apt step)::

        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends --allow-change-held-packages \
            --allow-downgrades libnccl2=2.16.5-1+cuda11.8 libnccl-dev=2.16.5-1+cuda11.8
    """

    name, position = "nccl", 55

    def apt(self, spec: ImageSpec) -> Apt:
        recipe, gpu = spec.recipe, spec.recipe.gpu
        if gpu is None:
            return Apt()
        if torch_nccl(spec) is None:
            nccl = apt_version(gpu.nccl, gpu.cuda)
            return Apt(pinned=Packages((f"libnccl2={nccl}", f"libnccl-dev={nccl}"), (f"libnccl2={nccl}",)))
        if gpu.source != "image":
            return Apt()
        runtime = ("libnccl2",) if "-runtime-" in recipe.base.runtime_image else ()
        return Apt(purged=Packages(("libnccl-dev", "libnccl2"), runtime))
