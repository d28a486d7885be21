"""Open MPI 5 `mpirun` (a front end to PRRTE's prterun)."""

from __future__ import annotations

from ...config.sites import Site
from .. import reasons
from ..base import LAUNCHERS
from ..command import Parts
from ..layout import RankLayout
from .mpirun import OpenMpi4

# Parameters of PRRTE (the runtime) and PMIx, which Open MPI 5 wants as --prtemca / --pmixmca.
_PRRTE = ("oob_", "plm_", "ras_", "rmaps_", "odls_", "errmgr_", "state_", "iof_", "prte_")
_PMIX = ("pmix_", "ptl_", "gds_", "psec_", "pnet_")


@LAUNCHERS.register
class OpenMpi5(OpenMpi4):
    """Open MPI 5 mpirun, in the forms its manual documents::

        mpirun -n 8 --host a:4,b:4 --bind-to none --map-by slot -x NCCL_IB_HCA=mlx5_0 \\
            --mca pml ucx --prtemca oob_tcp_if_include eth0 apptainer exec --nv img python train.py

    Double-dash options only (prterun rejects Horovod's -bind-to none -map-by slot),
    oversubscription as a --map-by modifier, PRRTE and PMIx parameters as --prtemca/--pmixmca.
    """

    name = "mpirun5"
    summary = "Open MPI 5's launcher (PRRTE) starts every rank"

    def head(self, site: Site, layout: RankLayout, out: Parts) -> None:
        self.start(site, out)
        self.add_flags(site, out, {"allow_run_as_root": "--allow-run-as-root"})
        if site.launcher.tag_output:
            out.site("launcher.tag_output", ["--output", "tag"], reasons.LAUNCHER["tag_output"])
        out.add(["-n", str(layout.np)], layout.np_source, "number of ranks")
        self.add_hosts(layout, out, "--host", "--hostfile")
        self.add_values(site, out, {"bind_to": "--bind-to"})
        map_by, over = site.launcher.map_by, site.launcher.oversubscribe
        if map_by and over:
            out.site(
                "launcher.map_by",
                ["--map-by", f"{map_by}:oversubscribe"],
                "ranks fill each host's slots in order, and may outnumber its cores (launcher.oversubscribe)",
            )
        else:
            self.add_values(site, out, {"map_by": "--map-by"})
            self.add_flags(site, out, {"oversubscribe": "--oversubscribe"})

    def mca(self, site: Site, name: str, value: str) -> tuple[str, ...]:
        option = "--prtemca" if name.startswith(_PRRTE) else "--pmixmca" if name.startswith(_PMIX) else "--mca"
        return (option, name, value)
