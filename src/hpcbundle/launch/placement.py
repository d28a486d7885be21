"""The gpu-numa placement wrapper: each rank on the CPUs of its GPU's NUMA node, memory preferred there (pure).

A site with node.gpu_numa (GPU index -> NUMA node) runs every rank under `hpcbundle-bind MAP
PROGRAM...` (data/hpcbundle-bind, plain POSIX sh): from the rank's local rank it finds the rank's GPU
and that GPU's NUMA node N, and execs the program under `numactl --cpunodebind=N --preferred=N` (or
`taskset -c` over N's CPUs where numactl is missing). It runs where it exists (knowledge/bind.py
bind_place): inside an image built here, which carries it at /usr/local/bin; on the host only where the
site says every node has it (node.host_bind, `make install-bind`); else its same text inline,
`sh -c SCRIPT hpcbundle-bind MAP PROGRAM...`. The map, validated integers, is the script's only
argument: nothing from the site runs as code.
"""

from __future__ import annotations

from typing import Sequence

from ..config.sites import Site
from ..knowledge.bind import BIND_INLINE, BIND_NAME, BindPlace, bind_place
from . import reasons


def gpu_numa_wrapper(gpu_numa: Sequence[int], inline: bool = False) -> list[str]:
    """The argv words in front of a rank's command for the map `gpu_numa` (GPU index -> NUMA node);
    `inline`: the script's text as `sh -c` (where no file of it is known to exist).

    >>> gpu_numa_wrapper([0, 0, 1, 1]), gpu_numa_wrapper([0, 1], inline=True)[3:]
    (['hpcbundle-bind', '0,0,1,1'], ['hpcbundle-bind', '0,1'])
    """
    mapping = ",".join(str(int(node)) for node in gpu_numa)
    return ["sh", "-c", BIND_INLINE, BIND_NAME, mapping] if inline else [BIND_NAME, mapping]


def gpu_numa_placement(site: Site, image: bool) -> tuple[list[str], str, str, BindPlace]:
    """The wrapper for a site with node.gpu_numa (ranks in an `image` or not): its words, its source and its why
    for --explain (the site's own why line first, then what hpcbundle-bind does and where), and where it runs."""
    assert site.node.gpu_numa
    place = bind_place(site, image)
    how = {"host": ", on the host: node.host_bind", "image": ", in the image", "inline": ", inline"}[place]
    why = "; ".join(filter(None, (site.why.get("node.gpu_numa"), reasons.GPU_NUMA[place])))
    return gpu_numa_wrapper(site.node.gpu_numa, place == "inline"), f"site {site.name} node.gpu_numa{how}", why, place
