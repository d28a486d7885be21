"""Podman `podman run`, Docker's command line without a daemon."""

from __future__ import annotations

from ..base import RUNTIMES
from .docker import Docker


@RUNTIMES.register
class Podman(Docker):
    """Like docker::

        podman run --rm --init --network=host --ipc=host img mpirun -np 2 python train.py

    Rootless podman runs in a user namespace (container.userns).
    """

    name = "podman"
