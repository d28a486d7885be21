"""Intel MPI from PyPI's wheels (impi-devel, impi-rt) into the venv."""

from __future__ import annotations

from ..spec import ImageSpec
from .base import BLOCKS, Block, Snippet


@BLOCKS.register
class IntelMpi(Block):
    """Intel MPI's wheels into the venv (mpi.install: pip); the venv's lib/ and libfabric hold it at run time.

    Parameters: `mpi.flavour` (intelmpi), `mpi.install` (pip), `mpi.version`.

    Example (recipe knl-intelmpi-tf2.15)::

        /opt/venv/bin/python -m pip install --no-cache-dir --find-links /wheelhouse \\
            impi-devel==2021.13.1 impi-rt==2021.13.1
    """

    name, position = "intelmpi", 45
    shell = ("pip",)

    def build(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        mpi = spec.recipe.mpi
        if mpi.install != "pip":
            return ()
        wheels = (f"impi-devel=={mpi.version}", f"impi-rt=={mpi.version}")
        return (
            Snippet("Intel MPI wheels into the venv", "pip", {"requirements": wheels, "toolkit": (), "frozen": False}),
        )
