"""Where the ranks go: the rank count and the hosts given on the command line (pure parsing)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..config.errors import UserError, clip

_HOST = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]{0,252})(?::([0-9]+))?")
MAX_SLOTS = 100_000
"""The most slots one host may have (a typo such as 10000000000 is refused, not launched)."""


@dataclass(frozen=True)
class RankLayout:
    """The ranks of one launch.

    `hosts` come from --hosts; `hostfile` is passed to the launcher and `hostfile_slots` is what
    the CLI counted in it; `in_allocation` says the launch runs inside a SLURM allocation, where
    the launcher takes the nodes from SLURM. `np_source` names where np came from, for --explain.
    `cpus_per_rank` (batch jobs) is what each rank asked SLURM for, and `cpus_source` where it came from.
    """

    np: int
    hosts: tuple[tuple[str, int], ...] = ()
    hostfile: str | None = None
    hostfile_slots: int | None = None
    in_allocation: bool = False
    np_source: str = "flag --np"
    cpus_per_rank: int | None = None
    cpus_source: str = ""

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

    def host_list(self) -> str:
        """'f1:2,f2:2', the form mpirun -H, hydra -hosts and horovodrun -H all read."""
        return ",".join(f"{host}:{slots}" for host, slots in self.hosts)


def parse_hosts(text: str) -> tuple[tuple[str, int], ...]:
    """Parse --hosts: 'f1:2,f2:2' -> (('f1', 2), ('f2', 2)); a bare host has one slot.

    >>> parse_hosts("f1:2,f2")
    (('f1', 2), ('f2', 1))
    """
    hosts = []
    for item in text.split(","):
        match = _HOST.fullmatch(item.strip())
        if not match:
            raise UserError.at("", "--hosts", f"{clip(item)} is not HOST or HOST:SLOTS", "e.g. --hosts f1:2,f2:2")
        hosts.append((match.group(1), _slots(match.group(2), "", "--hosts")))
    return tuple(hosts)


def _slots(digits: str | None, where: str, key: str) -> int:
    """A host's slot count from its ASCII digits (None: one slot), between 1 and MAX_SLOTS."""
    if digits is None:
        return 1
    count = int(digits[-7:]) if len(digits.lstrip("0")) <= 6 else MAX_SLOTS + 1
    if not 1 <= count <= MAX_SLOTS:
        raise UserError.at(where, key, f"{clip(digits, 12)} slots", f"give 1 to {MAX_SLOTS} slots per host")
    return count


def hostfile_slots(text: str, where: str) -> int:
    """Count the slots in a hostfile: Open MPI lines `host slots=N`, hydra lines `host:N`, or `host`.

    >>> hostfile_slots("f1 slots=2\\n# spare\\nf2:4\\nf3\\n", "hosts.txt")
    7
    """
    total = 0
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        match = _HOST.fullmatch(words[0])
        options = [re.fullmatch(r"(slots|max_slots|max-slots)=([0-9]+)", word) for word in words[1:]]
        if not match or not all(options) or (match.group(2) and any(options)):
            raise UserError.at(
                f"{where}:{number}", "", f"{clip(line, 24)} is not a hostfile line", "write `host slots=N` or `host:N`"
            )
        slots = next((option.group(2) for option in options if option and option.group(1) == "slots"), None)
        total += _slots(slots or match.group(2), f"{where}:{number}", "slots")
    if not total:
        raise UserError.at(where, "", "names no host", "write one `host slots=N` or `host:N` line per node")
    return total
