"""OS packages from the distribution, in the build stage and again in the runtime stage."""

from __future__ import annotations

from ..spec import ImageSpec
from .base import BLOCKS, Apt, Block, Packages, Snippet, apt_packages

BASE_PACKAGES = Packages(("python3-venv",), ("libgomp1", "openssh-client", "python3"))
"""What every image needs: Python's venv to build, Python and ssh to run (what compiles brings its compilers)."""


@BLOCKS.register
class AptPackages(Block):
    """apt-get installs every block's packages (`Block.apt`) beside `BASE_PACKAGES`, one step per stage.

    Parameters: no recipe key of its own; the other blocks' packages follow from theirs
    (mpi.install: distro, ucx, fabric_libs, gpu.nccl where apt brings NCCL).

    Example (recipe cpu-local, runtime stage)::

        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libgomp1 libopenmpi3 openmpi-bin ...
        apt-get clean
        rm -rf /var/lib/apt/lists/*

    The install script asks the host for these instead (`on_host` is False).
    """

    name, position, on_host = "apt", 10, False
    shell = ("apt",)

    def apt(self, spec: ImageSpec) -> Apt:
        return Apt(BASE_PACKAGES)

    def build(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        return (self._step("OS packages for building", spec, "build"),)

    def runtime(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        return (self._step("OS packages to run", spec, "runtime"),)

    @staticmethod
    def _step(title: str, spec: ImageSpec, stage: str) -> Snippet:
        wanted = apt_packages(spec)
        values = {kind: getattr(getattr(wanted, kind), stage) for kind in ("install", "pinned", "purged")}
        return Snippet(title, "apt", values)
