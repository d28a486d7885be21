"""Which sites each knob of `hpcbundle tune` applies to, stated once: perf/tune.py's knobs read it, and
the rule knob-site (rules/request.py) judges the knobs a tune request names by it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config.sites import Site


@dataclass(frozen=True)
class KnobSites:
    """The sites a knob applies to: `applies` decides, `sites` says it in words (for a refusal)."""

    applies: Callable[[Site], bool]
    sites: str


def _openmpi(site: Site) -> bool:
    return site.mpi.flavour == "openmpi" and site.launcher.name != "horovodrun"


def _horovodrun(site: Site) -> bool:
    return site.launcher.name == "horovodrun"


OPEN_MPI_RANKS = KnobSites(_openmpi, "sites whose ranks run Open MPI under mpirun or srun")
HOROVODRUN = KnobSites(_horovodrun, "sites with the horovodrun launcher")
EVERY_SITE = KnobSites(lambda site: True, "every site")

# Only horovodrun can switch the controller: it starts Gloo's rendezvous. Under mpirun/srun, Horovod 0.28 with
# HOROVOD_CPU_OPERATIONS=gloo and an MPI controller segfaults (no Gloo context is made).
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
