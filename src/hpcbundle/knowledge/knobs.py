"""Which sites each knob of `hpcbundle tune` applies to, stated once: perf/tune/sweep.py's knobs read it, and
the rule knob-site (rules/request.py) judges the knobs a tune request names by it. Also the knob value GPU
sites draft before any tune ran there (GPU_CYCLE_TIME), with the measurement it rests on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config.sites import Site
from .launching import gloo_capable


@dataclass(frozen=True)
class KnobSites:
    """The sites a knob applies to: `applies` decides, `sites` says it in words (for a refusal)."""

    applies: Callable[[Site], bool]
    sites: str


def _openmpi(site: Site) -> bool:
    """Open MPI ranks under a launcher without launcher.gloo (mpirun, srun; not horovodrun)."""
    return site.mpi.flavour == "openmpi" and not gloo_capable(site.launcher.name)


def _gloo_capable(site: Site) -> bool:
    """A launcher with launcher.gloo (horovodrun), which the controller knob sets."""
    return gloo_capable(site.launcher.name)


OPEN_MPI_RANKS = KnobSites(_openmpi, "sites whose ranks run Open MPI under mpirun or srun")
HOROVODRUN = KnobSites(_gloo_capable, "sites with the horovodrun launcher")
EVERY_SITE = KnobSites(lambda site: True, "every site")

# Only a launcher with launcher.gloo (horovodrun) can switch the controller: it starts Gloo's rendezvous. Under
# mpirun/srun, Horovod 0.28 with HOROVOD_CPU_OPERATIONS=gloo and an MPI controller segfaults (no Gloo context is made).
KNOB_SITES: dict[str, KnobSites] = {
    "controller": HOROVODRUN,
    "algorithm": OPEN_MPI_RANKS,
    "tcp-links": OPEN_MPI_RANKS,
    "tcp-buffers": OPEN_MPI_RANKS,
    "yield": OPEN_MPI_RANKS,
}
"""The knobs of one MPI or launcher; every other knob (fusion, cycle: Horovod's own) applies to every site."""


def knob_sites(name: str) -> KnobSites:
    """The sites knob `name` applies to.

    >>> knob_sites("algorithm").sites, knob_sites("fusion").sites
    ('sites whose ranks run Open MPI under mpirun or srun', 'every site')
    """
    return KNOB_SITES.get(name, EVERY_SITE)


GPU_CYCLE_TIME = "0.1"
"""HOROVOD_CYCLE_TIME (ms) that the shipped GPU sites and `site detect` on a GPU node draft: the smallest
value of tune's cycle knob (perf/tune/sweep.py), in place of Horovod's 1 ms default.

Measured on one NVIDIA H200 (bench/gpu.py, one rank, NCCL 2.28.9, Horovod 0.28.1, 2026-11-27): with the
default 1 ms cycle a Horovod allreduce call cost 1.03-1.07 ms at every size from 4 KiB to 256 MiB, where
torch.distributed's cost 0.021-0.035 ms: the call waits for the background thread's next cycle. With
HOROVOD_CYCLE_TIME=0.1 it cost 0.157 ms at 4 KiB (torch 0.032 ms); training (resnet50) stayed at
Horovod/plain 1.000. tune itself did not run there (it needs 2 ranks, one GPU took one); on 2 namespace nodes
(CPU, 2026-11-26, docs/performance.md) it chose 0.1 ms too. A draft, to re-tune on the site's own nodes with
`hpcbundle tune --knobs cycle`."""

GPU_CYCLE_TIME_WHY = (
    "Horovod's 1 ms default cycle cost 1.03-1.07 ms per allreduce call at every size on one NVIDIA H200 "
    "(torch 0.021-0.035 ms); 0.1 ms cost 0.157 ms at 4 KiB (bench/gpu.py, 1 rank, 2026-11-27); "
    "re-tune on these nodes: hpcbundle tune --knobs cycle"
)
"""The `why` line of a drafted HOROVOD_CYCLE_TIME (launch --explain shows it)."""
