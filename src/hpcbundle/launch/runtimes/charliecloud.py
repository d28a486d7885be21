"""Charliecloud `ch-run`: unprivileged containers from directory or SquashFS images."""

from __future__ import annotations

from ...config.sites import Site
from ..base import RUNTIMES, Runtime
from ..command import Parts
from ..workdir import WorkDir


@RUNTIMES.register
class Charliecloud(Runtime):
    """One unprivileged container per rank::

        mpirun -np 2 --mca btl_vader_single_copy_mechanism none ch-run /var/tmp/img -- python3 train.py

    Always in a user namespace (so Open MPI 4 needs the vader setting above). `--` ends
    ch-run's options. The working directory is bound (-b DIR: a read-only image needs the mount point, as
    it has /tmp, which ch-run shares anyway) and the rank starts there (--cd=DIR; ch-run starts in / otherwise).
    GPUs need the driver injected into the image once (ch-fromhost --nvidia).
    """

    name = "charliecloud"
    summary = "one unprivileged container per rank: the launcher starts ch-run on every node"

    def parts(self, site: Site, image: str | None, workdir: WorkDir | None, out: Parts) -> None:
        self.start(site, out)
        self.add_binds(site, out, "-b")
        if workdir is not None:
            self.add_workdir_bind(site, workdir, out, "-b", both_sides=False)
            why = "every rank starts in the user's working directory (ch-run starts in / where the image lacks it)"
            out.add([f"--cd={workdir.path}"], workdir.source, why)
        self.add_args(site, out)
        out.add([image or ""], "flag --image", "the image (a directory or SquashFS file) every rank runs")
        out.add(["--"], "default of ch-run", "ends ch-run's options, so the program's own options stay the program's")
