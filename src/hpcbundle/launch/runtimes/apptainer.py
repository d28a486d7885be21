"""Apptainer `apptainer exec` (Singularity's successor at the Linux Foundation)."""

from __future__ import annotations

from ..base import RUNTIMES
from .singularity import Singularity


@RUNTIMES.register
class Apptainer(Singularity):
    """Like singularity, with the apptainer command::

        srun --mpi=pmix -n 8 --kill-on-bad-exit=1 apptainer exec --nv horovod.sif python train.py

    Apptainer >= 1.1 installs without setuid by default: containers run in a user namespace,
    where Open MPI 4's vader single-copy (CMA) hangs (see `hpcbundle check RECIPE --site SITE`).
    """

    name = "apptainer"
