"""Open MPI: built from source (against UCX when the recipe has it) or the distribution's packages."""

from __future__ import annotations

from ...config.fields import parse_version
from ..spec import ImageSpec
from .base import BLOCKS, MpiBlock, Packages
from .ucx import UCX_PREFIX


def prefix_by_default(version: str) -> str:
    """The configure option that makes mpirun pass its prefix to remote nodes (prte's from Open MPI 5).

    >>> prefix_by_default("4.1.6"), prefix_by_default("5.0.5")
    ('--enable-orterun-prefix-by-default', '--enable-prte-prefix-by-default')
    """
    launcher = "prte" if parse_version(version).major >= 5 else "orterun"
    return f"--enable-{launcher}-prefix-by-default"


@BLOCKS.register
class OpenMpi(MpiBlock):
    """Open MPI from its pinned tarball into /opt/openmpi (mpi.install: source), or the distribution's
    libopenmpi-dev/openmpi-bin (mpi.install: distro).

    Parameters: `mpi.flavour` (openmpi), `mpi.install`, `mpi.version`, `mpi.source.url`,
    `mpi.source.sha256`, `mpi.configure`, `ucx` (adds --with-ucx).

    Example (recipe cuda11.8-tf2.14-torch2.1)::

        env -C /tmp/build/openmpi ./configure --prefix=/opt/openmpi --enable-orterun-prefix-by-default --with-cuda=...
        make -C /tmp/build/openmpi -j"$(nproc)" install
    """

    name, position, flavour = "openmpi", 40, "openmpi"
    distro_packages = Packages(("libopenmpi-dev", "openmpi-bin"), ("libopenmpi3", "openmpi-bin"))

    def options(self, spec: ImageSpec) -> tuple[str, ...]:
        """mpirun's prefix passed to remote nodes, UCX when the recipe has it, then mpi.configure."""
        ucx = (f"--with-ucx={UCX_PREFIX}",) if spec.recipe.ucx else ()
        return (prefix_by_default(spec.recipe.mpi.version), *ucx, *super().options(spec))
