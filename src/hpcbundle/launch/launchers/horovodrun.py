"""Horovod's own `horovodrun`."""

from __future__ import annotations

from ...config.sites import Site
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
    nodes need --hosts.
    """

    name = "horovodrun"
    summary = "Horovod's launcher discovers common interfaces, then starts the ranks"

    def head(self, site: Site, layout: RankLayout, out: Parts) -> None:
        self.start(site, out)
        out.add(["-np", str(layout.np)], layout.np_source, "number of ranks")
        self.add_hosts(layout, out, "-H", "--hostfile")
        self.add_flags(site, out, {"gloo": "--gloo"})

    def tail(self, site: Site, out: Parts) -> None:
        if site.network.interfaces:
            out.site(
                "network.interfaces",
                ["--network-interface", ",".join(site.network.interfaces)],
                "Horovod and MPI traffic stay on these interfaces",
            )
