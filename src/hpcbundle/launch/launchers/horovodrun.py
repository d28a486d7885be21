"""Horovod's own `horovodrun`."""

from __future__ import annotations

from ...config.sites import Problem, Site
from ..base import ALL_FLAVOURS, LAUNCHERS, Launcher, openmpi_major
from ..command import Parts
from ..layout import Layout


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

    name = command = "horovodrun"
    flavours = ALL_FLAVOURS
    summary = "Horovod's launcher discovers common interfaces, then starts the ranks"
    options = frozenset({"gloo"})
    interface_keys = frozenset()  # --network-interface (tail) sets them
    reads_allocation = False

    def problems(self, site: Site) -> list[Problem]:
        found = super().problems(site)
        if (openmpi_major(site) or 0) >= 5 and not site.launcher.gloo:
            found.append(
                Problem(
                    "launcher.name",
                    "horovodrun passes -bind-to none -map-by slot, which Open MPI 5 rejects",
                    "set launcher.gloo: true or use name: mpirun5",
                )
            )
        for param in ("pml", "btl"):
            if param in site.mca:
                found.append(
                    Problem(
                        f"mca.{param}",
                        "horovodrun passes its own -mca pml ob1 -mca btl ^openib, which win over this",
                        "use name: mpirun to choose them",
                    )
                )
        if site.network.interfaces:  # then horovodrun's own settings from --network-interface win
            gloo_or_mpi = "env.HOROVOD_GLOO_IFACE" if site.launcher.gloo else "mca.btl_tcp_if_include"
            for key in ("env.NCCL_SOCKET_IFNAME", gloo_or_mpi):
                section, name = key.split(".")
                if name in getattr(site, section):
                    found.append(
                        Problem(
                            key,
                            "horovodrun sets it from --network-interface (network.interfaces), which wins over this",
                            f"drop {key}, or network.interfaces, or use name: mpirun",
                        )
                    )
        return found

    def head(self, site: Site, layout: Layout, out: Parts) -> None:
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
