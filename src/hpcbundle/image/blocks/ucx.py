"""UCX built from source (Open MPI's pml ucx: InfiniBand/RoCE, CUDA-aware transfers)."""

from __future__ import annotations

from typing import Mapping

from ..spec import ImageSpec
from .base import BLOCKS, Apt, Packages, SourceBlock, SourceBuild

UCX_PREFIX = "/opt/ucx"
UCX_PACKAGES = Packages(("libnuma-dev",), ("libnuma1",))


@BLOCKS.register
class Ucx(SourceBlock):
    """UCX from its pinned tarball into /opt/ucx, before the MPI that uses it.

    Parameters: `ucx.source.url`, `ucx.source.sha256`, `ucx.configure`.

    Example (recipe cuda12.2-tf2.15-torch2.1-ucx)::

        env -C /tmp/build/ucx ./contrib/configure-release --prefix=/opt/ucx --with-cuda=/usr/local/cuda --with-verbs ...
        make -C /tmp/build/ucx -j"$(nproc)" install
    """

    name, position, path_order = "ucx", 30, 30

    def source(self, spec: ImageSpec) -> SourceBuild | None:
        ucx = spec.recipe.ucx
        if ucx is None:
            return None
        return SourceBuild(
            "ucx", ucx.source.url, ucx.source.sha256, "./contrib/configure-release", tuple(ucx.configure), UCX_PREFIX
        )

    def apt(self, spec: ImageSpec) -> Apt:
        return Apt.merge(super().apt(spec), Apt(UCX_PACKAGES)) if spec.recipe.ucx else Apt()

    def manifest(self, spec: ImageSpec) -> Mapping[str, str | None]:
        return {"ucx_prefix": self.prefix(spec)}
