"""SingularityCE / Singularity 3 `singularity exec`."""

from __future__ import annotations

from ...config.sites import Site
from ...knowledge.launching import cwd_unbound_by
from ..base import RUNTIMES, Runtime
from ..command import Parts
from ..workdir import WorkDir


@RUNTIMES.register
class Singularity(Runtime):
    """One container per rank, started by the host's launcher (the hybrid MPI model)::

        mpirun -np 4 ... singularity exec --nv --bind /scratch horovod.sif python train.py

    container.gpu adds --nv, container.binds one --bind each. The working directory needs nothing: it is
    bound and the program starts in it by default (Apptainer's "Bind Paths and Mounts"). The host
    environment reaches the program, except PATH and LD_LIBRARY_PATH: the image's own win (Singularity
    and Apptainer omit them from the host's, internal/pkg/util/env/clean.go), so exporting them only finds singularity
    on the remote nodes. Installed setuid by default, so no user namespace unless container.args asks
    for one (`--userns`, `--fakeroot`) or container.userns says so.
    """

    name = "singularity"
    summary = (
        "one container per rank: the launcher starts it on every node and wires the ranks from outside "
        "(MPI, or Gloo under horovodrun)"
    )

    def parts(self, site: Site, image: str | None, workdir: WorkDir | None, out: Parts) -> None:
        self.start(site, out, "exec")
        if site.container.gpu:
            out.site(
                "container.gpu", ["--nv"], "bind the host's NVIDIA driver libraries and GPU devices into the container"
            )
        self.add_binds(site, out, "--bind")
        if workdir is not None:
            contained = cwd_unbound_by(site)
            why = (
                f"{self.name} binds the working directory and starts the program in it by default "
                "(unless container.args has --contain or --no-mount cwd: rule contained-workdir)"
                if contained is None
                else f"container.args has {contained}: {self.name} does not bind it (rule contained-workdir)"
            )
            out.add([], f"{workdir.source} {workdir.path}", why)
        self.add_args(site, out)
        out.add([image or ""], "flag --image", "the image every rank runs")
