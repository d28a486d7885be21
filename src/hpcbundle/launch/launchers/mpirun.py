"""Open MPI 3.x/4.x `mpirun` (orterun)."""

from __future__ import annotations

from ...config.sites import Site
from ..base import LAUNCHERS, Launcher
from ..command import Parts
from ..layout import RankLayout


@LAUNCHERS.register
class OpenMpi4(Launcher):
    """Open MPI 4 mpirun, spelled as its manual and the Singularity example do::

        mpirun -np 4 -H f1:2,f2:2 -x LD_LIBRARY_PATH -x NCCL_SOCKET_IFNAME=^virbr0,lo \\
            -mca btl openib,self -mca pml ob1 singularity exec --nv horovod.sif python train.py

    Keys: allow_run_as_root, tag_output, oversubscribe, bind_to, map_by, and single_dash for the
    -mca/-bind-to/-map-by/-wdir spellings (Open MPI <= 4 reads both; Open MPI 5 rejects single dashes).
    With --workdir, --wdir DIR starts every rank there (remote ones too), wherever the line is run from.
    Open MPI does not forward the environment, so variables go through -x.
    """

    name = "mpirun"
    summary = "Open MPI's launcher starts every rank (remote ones through ssh or SLURM)"

    def dash(self, site: Site) -> str:
        return "-" if site.launcher.single_dash else "--"

    def head(self, site: Site, layout: RankLayout, out: Parts) -> None:
        self.start(site, out)
        self.add_flags(site, out, {"allow_run_as_root": "--allow-run-as-root", "tag_output": "--tag-output"})
        out.add(["-np", str(layout.np)], layout.np_source, "number of ranks")
        self.add_hosts(layout, out, "-H", "--hostfile")
        self.add_flags(site, out, {"oversubscribe": "--oversubscribe"})
        self.add_values(site, out, {"bind_to": f"{self.dash(site)}bind-to", "map_by": f"{self.dash(site)}map-by"})

    def chdir(self, site: Site, path: str) -> tuple[str, ...]:
        """The row's --wdir, with a single dash under launcher.single_dash."""
        return (self.dash(site) + self.workdir_option.lstrip("-"), path)

    def setenv(self, site: Site, name: str, value: str) -> tuple[str, ...]:
        return (self.export_option, f"{name}={value}")

    def mca(self, site: Site, name: str, value: str) -> tuple[str, ...]:
        return (f"{self.dash(site)}mca", name, value)
