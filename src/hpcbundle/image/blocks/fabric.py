"""Fabric user space in the image: rdma-core for InfiniBand/RoCE, PSM2 for Omni-Path."""

from __future__ import annotations

from ..spec import ImageSpec
from .base import BLOCKS, Apt, Block, Packages

FABRIC_PACKAGES = {
    # rdma-core: the verbs library, the adapters' providers (mlx5, ...) and the RDMA connection manager;
    # without them NCCL finds no IB device and falls back to sockets, UCX has no ib/rdmacm transport.
    "verbs": Packages(("libibverbs-dev", "librdmacm-dev"), ("ibverbs-providers", "libibverbs1", "librdmacm1")),
    # Omni-Path's PSM2 library, loaded at run time by libfabric's psm2 provider (Intel MPI's).
    "psm2": Packages((), ("libpsm2-2",)),
}


@BLOCKS.register
class Fabric(Block):
    """The fabric libraries a recipe names, as apt packages (no steps of its own).

    Parameters: `fabric_libs` (verbs, psm2).

    Example: `fabric_libs: [verbs]` adds libibverbs-dev librdmacm-dev to the build stage's apt
    step and ibverbs-providers libibverbs1 librdmacm1 to the runtime stage's.
    """

    name, position = "fabric", 15

    def apt(self, spec: ImageSpec) -> Apt:
        return Apt.merge(*(Apt(FABRIC_PACKAGES[lib]) for lib in spec.recipe.fabric_libs))
