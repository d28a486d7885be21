"""SLURM's `srun`, starting the ranks itself through PMI."""

from __future__ import annotations

from ...config.sites import Site
from .. import reasons
from ..base import LAUNCHERS, Launcher
from ..command import Parts
from ..layout import RankLayout


@LAUNCHERS.register
class Srun(Launcher):
    """srun as the MPI launcher (no mpirun): SLURM places the ranks and PMIx wires them::

        env NCCL_SOCKET_IFNAME=eth0 OMPI_MCA_pml=ob1 srun --mpi=pmix -n 8 --kill-on-bad-exit=1 --export=ALL \\
            apptainer exec --nv img python train.py

    srun passes its environment to every rank with --export=ALL, its default, stated on the line because a
    job submitted with --export=NONE makes NONE its steps' default; --export itself
    cannot carry values with commas, so variables are set in front of it, and MCA parameters
    become OMPI_MCA_* variables. Ranks come from the allocation: --hosts is refused. With --workdir,
    --chdir=DIR starts every rank there, wherever the line is run from.
    """

    name = "srun"
    summary = "SLURM starts every rank itself, in the allocation"

    def head(self, site: Site, layout: RankLayout, out: Parts) -> None:
        self.start(site, out)
        if site.launcher.pmi:
            out.site(
                "launcher.pmi",
                [f"--mpi={site.launcher.pmi}"],
                "the SLURM MPI plugin that wires the ranks together (PMIx for Open MPI)",
            )
        out.add(["-n", str(layout.np)], layout.np_source, "number of ranks")
        if site.faults.kill_on_bad_exit:
            out.site(
                "faults.kill_on_bad_exit",
                ["--kill-on-bad-exit=1"],
                "one rank that fails ends the step: the others would wait in their next collective until the "
                "time limit, and SLURM's default (KillOnBadExit=0) lets them",
            )
        if layout.cpus_per_rank:
            out.add(["-c", str(layout.cpus_per_rank)], layout.cpus_source, _cpus_why(site, layout.cpus_per_rank))
        if layout.tasks_per_node:
            out.add([f"--ntasks-per-node={layout.tasks_per_node}"], layout.tasks_source, "ranks per node")
        elif site.node.ranks_per_node:
            out.site("node.ranks_per_node", [f"--ntasks-per-node={site.node.ranks_per_node}"], "ranks per node")
        elif site.node.gpus:
            out.site("node.gpus", [f"--ntasks-per-node={site.node.gpus}"], reasons.SRUN_PER_GPU)
        if site.node.gpus and layout.tasks_per_node != 1:
            out.add(["--distribution=block:block"], f"site {site.name} node.gpus", reasons.SRUN_GPU_SOCKETS)
        self.add_flags(site, out, {"tag_output": "--label"})
        out.add(["--export=ALL"], "default of srun, stated", reasons.SRUN_EXPORT)


def _cpus_why(site: Site, cpus: int) -> str:
    """Why -c: the CPUs a rank gets; where SLURM counts hardware threads as CPUs, how many cores that is."""
    threads = site.node.threads_per_core
    if threads == 1:
        return reasons.SRUN_CPUS
    extra = reasons.SRUN_THREADS.format(threads=threads, cpus=cpus, cores=max(1, cpus // threads))
    return f"{reasons.SRUN_CPUS}; {extra}"
