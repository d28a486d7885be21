"""MPICH: built from source or the distribution's packages."""

from __future__ import annotations

from ..imagespec import MPI_PREFIX, ImageSpec
from .base import BLOCKS, Apt, Packages, SourceBlock, SourceBuild

DISTRO_PACKAGES = Packages(("libmpich-dev", "mpich"), ("libmpich12", "mpich"))


@BLOCKS.register
class Mpich(SourceBlock):
    """MPICH from its pinned tarball into the MPI prefix /opt/openmpi (mpi.install: source), or the
    distribution's libmpich-dev/mpich (mpi.install: distro).

    Parameters: `mpi.flavour` (mpich), `mpi.install`, `mpi.source.url`, `mpi.source.sha256`, `mpi.configure`.

    Example (mpi: {flavour: mpich, install: distro}): libmpich-dev mpich join the build stage's apt
    step and libmpich12 mpich the runtime stage's; no step of its own.
    """

    name, position = "mpich", 40

    def source(self, spec: ImageSpec) -> SourceBuild | None:
        mpi = spec.recipe.mpi
        if mpi.flavour != "mpich" or mpi.install != "source":
            return None
        assert mpi.source is not None  # guaranteed by the recipe model
        return SourceBuild(
            mpi.flavour, mpi.source.url, mpi.source.sha256, "./configure", tuple(mpi.configure), MPI_PREFIX
        )

    def apt(self, spec: ImageSpec) -> Apt:
        mpi = spec.recipe.mpi
        if mpi.flavour == "mpich" and mpi.install == "distro":
            return Apt(DISTRO_PACKAGES)
        return super().apt(spec)
