"""No container: the program runs on the host with the host's own software."""

from __future__ import annotations

from ...config.sites import Site
from ..base import RUNTIMES, Runtime
from ..command import Parts
from ..workdir import WorkDir


@RUNTIMES.register
class NoRuntime(Runtime):
    """container.runtime: none, e.g. the `local` site: `mpirun -np 2 python3 train.py`."""

    name = "none"
    summary = "no container: the program runs with the host's own Python and libraries"

    def parts(self, site: Site, image: str | None, workdir: WorkDir | None, out: Parts) -> None:
        out.site("container.runtime", [], self.summary)
