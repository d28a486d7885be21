"""The torch.distributed wiring (`--torch`): ranks that meet by env:// instead of through Horovod (pure).

The site's own launcher starts one rank per GPU (per slot on CPU sites) as for Horovod; each rank runs
the program under hpcbundle-torchenv (knowledge/torchenv.py), which sets RANK, WORLD_SIZE, LOCAL_RANK and
LOCAL_WORLD_SIZE from the launcher's own variables. Every rank gets MASTER_ADDR and MASTER_PORT, where
rank 0 listens, and GLOO_SOCKET_IFNAME (Gloo's interface, names only) from network.interfaces, beside the
NCCL settings the site already derives. The head is an address, never a name: torch publishes and
matches host names, which on many clusters resolve to the management network or 127.0.x.1.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.sites import Site

BATCH_PORT = "61000 + SLURM_JOB_ID % 4536"
"""A batch job's MASTER_PORT: from its job id, above Linux's ephemeral ports (32768-60999), so two jobs
sharing a node do not collide (enroot's PyTorch hook takes the same)."""


@dataclass(frozen=True)
class TorchWiring:
    """Where the ranks of one torch job meet: `head` (MASTER_ADDR: an IPv4 address, or a host name for a
    line printed to run elsewhere) and `port`; both None in a batch job, whose script finds them on its
    first node and exports them (the launcher forwards them by name). `head_source` says where the head
    came from, for --explain."""

    head: str | None
    port: int | None
    head_source: str = "the first host"


def gloo_interfaces(site: Site) -> str | None:
    """GLOO_SOCKET_IFNAME for `site`: network.interfaces joined by commas (Gloo takes names, no '^'
    exclusions), unless the site sets it in env itself; None without interfaces."""
    if "GLOO_SOCKET_IFNAME" in site.env or not site.network.interfaces:
        return None
    return ",".join(site.network.interfaces)
