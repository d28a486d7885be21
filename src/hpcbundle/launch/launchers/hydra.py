"""Intel MPI / MPICH / MVAPICH2 `mpiexec.hydra`."""

from __future__ import annotations

from ...config.sites import Site
from ..base import LAUNCHERS, Launcher
from ..command import Parts
from ..layout import RankLayout


@LAUNCHERS.register
class Hydra(Launcher):
    """The Hydra process manager, as on TACC Stampede2's KNL nodes::

        mpiexec.hydra -l -ppn 1 -n 2 taskset -c 0-64 numactl -p 1 python train.py

    -ppn comes from node.ranks_per_node, -l from launcher.tag_output, -iface from
    network.interfaces (and on GPU sites NCCL_SOCKET_IFNAME, unless the site sets it), -wdir from --workdir
    (every rank starts there, wherever the line is run from). Hydra passes
    its whole environment to every rank (-genvall is the default), so the site's variables are set
    in front of it.
    """

    name = "mpiexec.hydra"
    summary = "Hydra (Intel MPI / MPICH) starts every rank"

    def head(self, site: Site, layout: RankLayout, out: Parts) -> None:
        self.start(site, out)
        self.add_flags(site, out, {"tag_output": "-l"})
        if layout.tasks_per_node:
            out.add(["-ppn", str(layout.tasks_per_node)], layout.tasks_source, "ranks per node")
        elif site.node.ranks_per_node:
            out.site("node.ranks_per_node", ["-ppn", str(site.node.ranks_per_node)], "ranks per node")
        out.add(["-n", str(layout.np)], layout.np_source, "number of ranks")
        self.add_hosts(layout, out, "-hosts", "-f")

    def tail(self, site: Site, out: Parts) -> None:
        if site.network.interfaces:
            out.site(
                "network.interfaces",
                ["-iface", site.network.interfaces[0]],
                "MPI's traffic stays on this interface (a wrong one hangs the job)",
            )
