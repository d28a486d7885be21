"""Horovod's own `horovodrun`."""

from __future__ import annotations

from ...config.sites import Elastic, Site
from ..base import LAUNCHERS, Launcher
from ..command import Parts
from ..layout import RankLayout


@LAUNCHERS.register
class HorovodRun(Launcher):
    """horovodrun, which builds an mpirun line itself (or runs Gloo with launcher.gloo)::

        horovodrun -np 4 -H f1:2,f2:2 --network-interface ib0 python train.py

    It hard-codes `-bind-to none -map-by slot -mca pml ob1 -mca btl ^openib`: Open MPI 5 rejects
    the single dashes (use gloo or mpirun5), and site pml/btl settings would be overridden. From
    --network-interface it sets btl_tcp_if_include and NCCL_SOCKET_IFNAME (HOROVOD_GLOO_IFACE with
    Gloo) itself. It forwards its environment; it does not read a SLURM allocation, so several
    nodes need --hosts. It has no option for the ranks' directory: they start in the one it runs in
    (remote ranks too: it changes into it over ssh, or mpirun does), so a line for --workdir DIR runs from DIR.
    """

    name = "horovodrun"
    summary = "Horovod's launcher discovers common interfaces, then starts the ranks"

    def head(self, site: Site, layout: RankLayout, out: Parts) -> None:
        self.start(site, out)
        elastic = site.faults.elastic
        if elastic is None:
            out.add(["-np", str(layout.np)], layout.np_source, "number of ranks")
            self.add_hosts(layout, out, "-H", "--hostfile")
        else:
            self.elastic(site, elastic, layout, out)
        self.add_flags(site, out, {"gloo": "--gloo"})

    def elastic(self, site: Site, elastic: Elastic, layout: RankLayout, out: Parts) -> None:
        """Elastic mode: the ranks to start with, the range the job may shrink and grow in, the
        discovery script that says which hosts it may use now, and how long a failed host sits out."""
        assert layout.discovery_script is not None
        out.add(
            ["-np", str(layout.np)], layout.np_source, "ranks to start with (it waits for hosts with that many slots)"
        )
        out.site(
            "faults.elastic.min_np",
            ["--min-np", str(elastic.min_np)],
            "fewest ranks the job goes on with when hosts are lost; below that it waits for hosts "
            "(HOROVOD_ELASTIC_TIMEOUT, 600 s) and then fails",
        )
        high = ["--max-np", str(elastic.max_np or layout.np)]
        why = "most ranks the job grows to when hosts join"
        if elastic.max_np:
            out.site("faults.elastic.max_np", high, why)
        else:
            out.add(high, f"{layout.np_source} (faults.elastic.max_np not set)", why)
        out.site(
            "faults.elastic.discovery",
            ["--host-discovery-script", layout.discovery_script],
            f"horovodrun runs it every second: its HOST:SLOTS lines ({elastic.discovery}) are the hosts "
            "the job may use now",
        )
        low, top = elastic.cooldown
        out.site(
            "faults.elastic.cooldown",
            ["--blacklist-cooldown-range", str(low), str(top)],
            "a host whose ranks failed sits out this many seconds (doubling per failure) before it is tried "
            "again; without it, it never comes back",
        )

    def tail(self, site: Site, out: Parts) -> None:
        if site.network.interfaces:
            out.site(
                "network.interfaces",
                ["--network-interface", ",".join(site.network.interfaces)],
                "Horovod and MPI traffic stay on these interfaces",
            )
