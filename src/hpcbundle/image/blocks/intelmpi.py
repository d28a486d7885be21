"""Intel MPI from PyPI's wheels (impi-devel, impi-rt) into the venv."""

from __future__ import annotations

from typing import Mapping

from ..spec import ImageSpec
from .base import BLOCKS, Block, Paths, Snippet


@BLOCKS.register
class IntelMpi(Block):
    """Intel MPI's wheels into the venv (mpi.install: pip); the venv's lib/ and libfabric hold it at run time.

    Parameters: `mpi.flavour` (intelmpi), `mpi.install` (pip), `mpi.version`.

    Example (recipe knl-intelmpi-tf2.15)::

        /opt/venv/bin/python -m pip install --no-cache-dir --find-links /wheelhouse \\
            impi-devel==2021.13.1 impi-rt==2021.13.1
    """

    name, position, path_order = "intelmpi", 45, 20
    shell = ("pip",)

    def build(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        mpi = spec.recipe.mpi
        if mpi is None or mpi.install != "pip":
            return ()
        wheels = (f"impi-devel=={mpi.version}", f"impi-rt=={mpi.version}")
        return (
            Snippet("Intel MPI wheels into the venv", "pip", {"requirements": wheels, "toolkit": (), "frozen": False}),
        )

    def paths(self, spec: ImageSpec) -> Paths:
        """The venv's lib/ and libfabric, I_MPI_ROOT and the providers (the host's venv holds them too)."""
        if spec.recipe.mpi is None or spec.recipe.mpi.install != "pip":
            return Paths()
        venv = spec.venv
        env = {"I_MPI_ROOT": venv, "FI_PROVIDER_PATH": f"{venv}/lib/libfabric/prov"}
        return Paths(lib=(f"{venv}/lib", f"{venv}/lib/libfabric"), env=env)

    def manifest(self, spec: ImageSpec) -> Mapping[str, str | None]:
        """mpi_prefix None: the wheels sit in the venv."""
        mpi = spec.recipe.mpi
        return {"mpi_prefix": None} if mpi is not None and mpi.flavour == "intelmpi" else {}
