"""The torch.distributed wirings (`--torch`, `--torchrun`): ranks that meet by torch's own rendezvous instead of
through Horovod (pure).

The site's own launcher starts one rank per GPU (per slot on CPU sites) as for Horovod; each rank runs
the program under hpcbundle-torchenv (knowledge/torchenv.py), which sets RANK, WORLD_SIZE, LOCAL_RANK and
LOCAL_WORLD_SIZE from the launcher's own variables. Every rank gets MASTER_ADDR and MASTER_PORT, where
rank 0 listens, and GLOO_SOCKET_IFNAME (Gloo's interface, names only) from network.interfaces, beside the
NCCL settings the site already derives. The head is an address, never a name: torch publishes and
matches host names, which on many clusters resolve to the management network or 127.0.x.1.

`--torchrun` starts one agent per node instead (`PYTHON -m torch.distributed.run`, never the `torchrun` script,
whose shebang may name another Python), each starting the node's workers: `--np` and the hosts still count
workers. The agents meet by c10d at MASTER_ADDR:MASTER_PORT; the shim gives each its own address on the data
interface as --local-addr and says which one hosts the store (is_host), so no host name is ever matched (but
the head's own name in a line printed to run elsewhere, which torch matches, as the rule torch-head-by-name warns).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ..config.sites import Site
from .layout import RankLayout

BATCH_PORT = "61000 + SLURM_JOB_ID % 4536"
"""A batch job's MASTER_PORT: from its job id, above Linux's ephemeral ports (32768-60999), so two jobs
sharing a node do not collide (enroot's PyTorch hook takes the same)."""


BATCH_RUN_ID = '"$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}"'
"""A batch job's torchrun rendezvous id: its job id and its restarts, new for every requeued run."""

RUN_ID = "hpcbundle"
"""The rendezvous id of a printed torchrun line; `launch --exec` gives each run its own (LaunchPlan.run_id), so an
agent still shutting down from the run before never joins the next one at the same head:port (a batch job takes
JOBID.RESTARTS)."""


@dataclass(frozen=True)
class Agents:
    """A torchrun job's agents: one on each of `nodes` nodes, each starting `per_node` workers; `hosts` the nodes
    when named (else SLURM places the agents); `max_restarts` torch.max_restarts."""

    nodes: int
    per_node: int
    hosts: tuple[str, ...] = ()
    max_restarts: int = 0

    @property
    def standalone(self) -> bool:
        """One node: torchrun --standalone (its own store on localhost), no head to meet at."""
        return self.nodes == 1


@dataclass(frozen=True)
class TorchWiring:
    """Where the ranks of one torch job meet: `head` (MASTER_ADDR: an IPv4 address, or a host name for a
    line printed to run elsewhere) and `port`; both None in a batch job, whose script finds them on its
    first node and exports them (the launcher forwards them by name). `head_source` says where the head
    came from, for --explain. `agents`: the torchrun agents (--torchrun), None for env:// ranks (--torch), and
    `run_id` their rendezvous id (a batch job's script sets its own)."""

    head: str | None
    port: int | None
    head_source: str = "the first host"
    agents: Agents | None = None
    run_id: str = RUN_ID


def agent_layout(site: Site, layout: RankLayout, agents: Agents) -> RankLayout:
    """The launcher's layout of a torchrun job: one agent per node, each with the node's CPUs."""
    return replace(
        layout,
        np=agents.nodes,
        hosts=tuple((host, 1) for host in agents.hosts),
        hostfile=None if agents.hosts else layout.hostfile,
        np_source="flag --torchrun: one agent per node",
        cpus_per_rank=layout.node_cpus or site.node.cpus_for(1),
        cpus_source="the whole node"
        + (" (SLURM_JOB_CPUS_PER_NODE)" if layout.node_cpus else "")
        + ": its agent's workers share it",
        tasks_per_node=1 if layout.in_allocation else None,
        tasks_source="flag --torchrun: one agent per node",
    )


def torchrun_words(program: Sequence[str], agents: Agents) -> list[str]:
    """`PYTHON -m torch.distributed.run OPTIONS SCRIPT ARGS` for the program `PYTHON SCRIPT ARGS` (or `PYTHON -m
    MODULE ARGS`): the rendezvous endpoint, id and this node's address come from the shim (PET_* defaults).

    >>> torchrun_words(["python3", "train.py", "--epochs", "2"], Agents(2, 4))[3:]
    ['--nnodes=2', '--nproc-per-node=4', '--rdzv-backend=c10d', '--max-restarts=0', 'train.py', '--epochs', '2']
    >>> torchrun_words(["python", "-m", "pkg.train"], Agents(1, 2))[3:]
    ['--standalone', '--nproc-per-node=2', '--max-restarts=0', '-m', 'pkg.train']
    """
    python, *rest = program
    meet = ["--standalone"] if agents.standalone else [f"--nnodes={agents.nodes}"]
    options = [*meet, f"--nproc-per-node={agents.per_node}"]
    options += [] if agents.standalone else ["--rdzv-backend=c10d"]
    options.append(f"--max-restarts={agents.max_restarts}")
    return [python, "-m", "torch.distributed.run", *options, *rest]


def gloo_interfaces(site: Site) -> str | None:
    """GLOO_SOCKET_IFNAME for `site`: network.interfaces joined by commas (Gloo takes names, no '^'
    exclusions), unless the site sets it in env itself; None without interfaces."""
    if "GLOO_SOCKET_IFNAME" in site.env or not site.network.interfaces:
        return None
    return ",".join(site.network.interfaces)
