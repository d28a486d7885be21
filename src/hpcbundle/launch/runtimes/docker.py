"""Docker `docker run`: one container holding the launcher and every rank on this node."""

from __future__ import annotations

from ...config.sites import Site
from ...knowledge.secrets import forwarded
from ..base import RUNTIMES, Runtime
from ..command import Parts
from ..workdir import WorkDir


@RUNTIMES.register
class Docker(Runtime):
    """The launcher runs inside one container (single node)::

        docker run --rm --init --network=host --ipc=host --gpus=all -e PATH img mpirun -np 2 python train.py

    A container is a child of the daemon, not of the launcher, so a per-rank container could not
    be wired by a host MPI, nor inherit host-side affinity: everything runs inside. Variables
    the site exports are passed in with -e; those it sets are set inside, in front of the launcher.
    The user's working directory is mounted at its own path (-v DIR:DIR) and the container starts there (-w DIR).
    """

    name = "docker"
    summary = "one container on this node holds the launcher and all its ranks"

    def parts(self, site: Site, image: str | None, workdir: WorkDir | None, out: Parts) -> None:
        self.start(site, out, "run", "--rm")
        out.add(
            ["--init"],
            f"default of {self.name}",
            "an init process reaps zombies and passes signals (the --exec time bound) to the launcher",
        )
        out.add(
            ["--network=host", "--ipc=host"],
            f"default of {self.name}",
            "ranks and NCCL use the host's interfaces and shared memory",
        )
        if site.container.gpu:
            out.site("container.gpu", ["--gpus=all"], "expose the host's GPUs and driver")
        self.add_binds(site, out, "-v", both_sides=True)
        if workdir is not None:
            self.add_workdir_bind(site, workdir, out, "-v")
            why = "the launcher and every rank start in the user's working directory, not the image's WORKDIR"
            out.add(["-w", workdir.path], workdir.source, why)
        for key, name in forwarded(site):
            out.site(key, ["-e", name], "the container does not inherit the host environment")
        self.add_args(site, out)
        out.add([image or ""], "flag --image", "the image the launcher and every rank run in")
