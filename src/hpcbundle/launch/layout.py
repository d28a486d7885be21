"""Where the ranks go: the rank count and the hosts given on the command line (pure parsing)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

from ..config.errors import UserError, clip
from .hostfile import HOST_ERE, MAX_SLOTS

_HOST = re.compile(HOST_ERE)
MAX_HOSTS = 4096
"""The most hosts --hosts may expand to (a typo such as n[1-1000000] is refused before it is expanded)."""
_ITEMS = re.compile(r"(?:[^,\[]|\[[^\]]*\])+")
"""--hosts split at the commas outside brackets: 'n[01-04]:2,gpu[1,3]' -> 'n[01-04]:2', 'gpu[1,3]'."""
_ITEM = re.compile(r"([A-Za-z0-9\[][A-Za-z0-9._\[\],-]{0,252})(?::([0-9]+))?")
"""HOSTS[:SLOTS]: a host or a SLURM host list; nothing ClusterShell reads as a group (@) or an operator (!&^*)."""
_BRACKET = re.compile(r"\[([^\]]*)\]")
_RANGE = re.compile(r"([0-9]{1,6})(?:-([0-9]{1,6}))?")


@dataclass(frozen=True)
class RankLayout:
    """The ranks of one launch.

    `hosts` come from --hosts; `hostfile` is passed to the launcher and `hostfile_slots` is what
    the CLI counted in it; `in_allocation` says the launch runs inside a SLURM allocation, where
    the launcher takes the nodes from SLURM. `np_source` names where np came from, for --explain.
    `cpus_per_rank` (batch jobs) is what each rank asked SLURM for, and `cpus_source` where it came from.
    `discovery_script` is where an elastic site's host discovery script is (hpcbundle.launch.elastic).
    `hostfile_hosts` are the (host, slots) lines of the hostfile; `nodes` the nodes of the SLURM job
    when known (sbatch --nodes, SLURM_JOB_NUM_NODES); `tasks_per_node` a batch job's --tasks-per-node
    (`tasks_source`: where it came from). `node_cpus` is what a node of the SLURM allocation the launch runs in
    holds for it (the fewest of SLURM_JOB_CPUS_PER_NODE), read at the edge: the ranks on a node share it out.
    """

    np: int
    hosts: tuple[tuple[str, int], ...] = ()
    hostfile: str | None = None
    hostfile_slots: int | None = None
    in_allocation: bool = False
    np_source: str = "flag --np"
    cpus_per_rank: int | None = None
    cpus_source: str = ""
    discovery_script: str | None = None
    hostfile_hosts: tuple[tuple[str, int], ...] = ()
    nodes: int | None = None
    tasks_per_node: int | None = None
    tasks_source: str = "flag --tasks-per-node"
    node_cpus: int | None = None

    @property
    def slots(self) -> int | None:
        """Slots named on the command line, or None when no hosts were given."""
        if self.hosts:
            return sum(slots for _, slots in self.hosts)
        return self.hostfile_slots

    def placement(self, here: str) -> tuple[tuple[str, int], ...]:
        """Ranks per host as far as the command line tells: the hosts given, else every rank on `here`
        (no hosts, no hostfile, no SLURM allocation: mpirun starts them all on this node); () when unknown.

        >>> RankLayout(np=2).placement("gpu1"), RankLayout(np=4, hosts=(("f1", 2), ("f2", 2))).placement("gpu1")
        ((('gpu1', 2),), (('f1', 2), ('f2', 2)))
        """
        if self.hosts or self.hostfile or self.in_allocation:
            return self.hosts
        return ((here, self.np),)

    def ranks_per_host(self) -> tuple[tuple[str, int], ...]:
        """The ranks each named host gets, every source merged: --hosts or the hostfile, a repeated host's
        slots added up, then filled in order as mpirun and hydra place ranks by slot (at most `np` in all).

        >>> RankLayout(np=8, hosts=(("f1", 2), ("f2", 4), ("f1", 2))).ranks_per_host()
        (('f1', 4), ('f2', 4))
        >>> RankLayout(np=8, hostfile="h", hostfile_hosts=(("f1", 8), ("f2", 8))).ranks_per_host()
        (('f1', 8),)
        """
        merged: dict[str, int] = {}
        for host, slots in self.hosts or self.hostfile_hosts:
            merged[host] = merged.get(host, 0) + slots
        placed, left = [], self.np
        for host, slots in merged.items():
            if left > 0:
                placed.append((host, min(slots, left)))
                left -= slots
        return tuple(placed)

    def host_list(self) -> str:
        """'f1:2,f2:2', the form mpirun -H, hydra -hosts and horovodrun -H all read."""
        return ",".join(f"{host}:{slots}" for host, slots in self.hosts)


_CPUS_PER_NODE = re.compile(r"([0-9]{1,7})(?:\(x[0-9]{1,7}\))?")
"""One item of SLURM_JOB_CPUS_PER_NODE: CPUS, or CPUS(xNODES) for that many nodes alike."""


def fewest_cpus(text: str) -> int | None:
    """The fewest CPUs any node holds in SLURM_JOB_CPUS_PER_NODE's form (None: not that form, or 0).

    >>> fewest_cpus("72(x2),36"), fewest_cpus("16"), fewest_cpus(""), fewest_cpus("x")
    (36, 16, None, None)
    """
    items = [_CPUS_PER_NODE.fullmatch(item) for item in text.split(",")]
    counts = [int(item.group(1)) for item in items if item]
    return min(counts) or None if counts and len(counts) == len(items) else None


def parse_hosts(text: str) -> tuple[tuple[str, int], ...]:
    """Parse --hosts: HOSTS[:SLOTS] items split by commas, where HOSTS is a host or a SLURM host list
    (`$SLURM_JOB_NODELIST`'s compressed form, expanded by ClusterShell's NodeSet) and SLOTS (default 1)
    applies to each of its hosts; at most MAX_HOSTS hosts in all.

    >>> parse_hosts("f1:2,f2")
    (('f1', 2), ('f2', 1))
    >>> parse_hosts("n[01-02]:2,gpu[1,3]")
    (('n01', 2), ('n02', 2), ('gpu1', 1), ('gpu3', 1))
    """
    raw = _ITEMS.findall(text)
    items = [item.strip() for item in raw]
    if not raw or ",".join(raw) != text or not all(items):
        raise UserError.at("", "--hosts", f"{clip(text)} is not a host list", "e.g. --hosts f1:2,f2:2 or n[01-04]:2")
    matches = [_ITEM.fullmatch(item) for item in items]
    for item, match in zip(items, matches, strict=True):
        if not match:
            raise UserError.at("", "--hosts", f"{clip(item)} is not HOST or HOST:SLOTS", "e.g. --hosts f1:2,n[01-04]:2")
    expected = sum(_count_hosts(match.group(1)) for match in matches if match)
    if expected > MAX_HOSTS:
        raise UserError.at(
            "", "--hosts", f"{clip(text)} names {expected} hosts", f"give at most {MAX_HOSTS} hosts (or a hostfile)"
        )
    hosts = []
    for match in matches:
        assert match is not None
        slots = _slots(match.group(2), "", "--hosts")
        hosts += [(host, slots) for host in _expand(match.group(1))]
    return tuple(hosts)


def _count_hosts(pattern: str) -> int:
    """How many hosts a host list names at most, counted before NodeSet expands it (a bracket's
    ranges multiply); indices of more than 6 digits are refused."""
    counts = []
    for bracket in _BRACKET.findall(pattern):
        ranges = [_RANGE.fullmatch(part) for part in bracket.split(",")]
        if not all(ranges):
            raise UserError.at(
                "",
                "--hosts",
                f"{clip(f'[{bracket}]')} is not a range list",
                "write ranges like [01-04,07] (up to 6 digits)",
            )
        counts.append(sum(int(r.group(2) or r.group(1)) - int(r.group(1)) + 1 for r in ranges if r))
    return math.prod(max(count, 1) for count in counts)


def _expand(pattern: str) -> list[str]:
    """The hosts of one host list, as ClusterShell's NodeSet expands it (no group resolution)."""
    try:
        names = list(NodeSet(pattern, resolver=RESOLVER_NOGROUP))
    except NodeSetException as error:
        raise UserError.at(
            "", "--hosts", f"{clip(pattern)}: {clip(str(error), 60)}", "write hosts like n01 or n[01-04,07]"
        ) from None
    for name in names:
        if not _HOST.fullmatch(name):
            raise UserError.at("", "--hosts", f"{clip(name)} is not a host name", "use letters, digits, '.', '_', '-'")
    return names


def _slots(digits: str | None, where: str, key: str) -> int:
    """A host's slot count from its ASCII digits (None: one slot), between 1 and MAX_SLOTS."""
    if digits is None:
        return 1
    count = int(digits[-7:]) if len(digits.lstrip("0")) <= 6 else MAX_SLOTS + 1
    if not 1 <= count <= MAX_SLOTS:
        raise UserError.at(where, key, f"{clip(digits, 12)} slots", f"give 1 to {MAX_SLOTS} slots per host")
    return count
