"""MPICH: built from source or the distribution's packages."""

from __future__ import annotations

from .base import BLOCKS, MpiBlock, Packages


@BLOCKS.register
class Mpich(MpiBlock):
    """MPICH from its pinned tarball into the MPI prefix /opt/openmpi (mpi.install: source), or the
    distribution's libmpich-dev/mpich (mpi.install: distro).

    Parameters: `mpi.flavour` (mpich), `mpi.install`, `mpi.source.url`, `mpi.source.sha256`, `mpi.configure`.

    Example (mpi: {flavour: mpich, install: distro}): libmpich-dev mpich join the build stage's apt
    step and libmpich12 mpich the runtime stage's; no step of its own.
    """

    name, position, flavour = "mpich", 40, "mpich"
    distro_packages = Packages(("libmpich-dev", "mpich"), ("libmpich12", "mpich"))
