"""The gpu-numa placement wrapper: each rank on the CPUs and memory of its GPU's NUMA node (pure).

A site with node.gpu_numa (GPU index -> NUMA node) runs every rank under `hpcbundle-bind MAP
PROGRAM...` (data/hpcbundle-bind, plain POSIX sh): from the rank's local rank it finds the rank's GPU
and that GPU's NUMA node N, and execs the program under `numactl --cpunodebind=N --membind=N` (or
`taskset -c` over N's CPUs where numactl is missing). Images built here carry the script at
/usr/local/bin; hosts get it with `make install-bind`. An image built elsewhere
(container.foreign_image) has no such file, so where the wrapper runs inside the container it runs
the same text inline, `sh -c SCRIPT hpcbundle-bind MAP PROGRAM...`. The map, validated integers, is
the script's only argument: nothing from the site runs as code.
"""

from __future__ import annotations

from typing import Sequence

from ..config.sites import Site
from ..knowledge.bind import BIND_INLINE, BIND_NAME
from . import reasons


def gpu_numa_wrapper(gpu_numa: Sequence[int], inline: bool = False) -> list[str]:
    """The argv words in front of a rank's command for the map `gpu_numa` (GPU index -> NUMA node);
    `inline`: the script's text as `sh -c` (for an image without hpcbundle-bind).

    >>> gpu_numa_wrapper([0, 0, 1, 1]), gpu_numa_wrapper([0, 1], inline=True)[3:]
    (['hpcbundle-bind', '0,0,1,1'], ['hpcbundle-bind', '0,1'])
    """
    mapping = ",".join(str(int(node)) for node in gpu_numa)
    return ["sh", "-c", BIND_INLINE, BIND_NAME, mapping] if inline else [BIND_NAME, mapping]


def gpu_numa_placement(site: Site, in_container: bool) -> tuple[list[str], str, str]:
    """The wrapper for a site with node.gpu_numa, its source and its why for --explain (the site's own
    why line first, then what hpcbundle-bind does); inline where it runs `in_container` and the site's
    images were built elsewhere (container.foreign_image)."""
    assert site.node.gpu_numa
    inline = in_container and site.container.foreign_image
    source = f"site {site.name} node.gpu_numa" + (", inline: container.foreign_image" if inline else "")
    why = "; ".join(
        filter(None, (site.why.get("node.gpu_numa"), reasons.GPU_NUMA_INLINE if inline else reasons.GPU_NUMA))
    )
    return gpu_numa_wrapper(site.node.gpu_numa, inline), source, why
