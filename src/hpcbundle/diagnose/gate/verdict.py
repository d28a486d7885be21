"""The launch gate's judgement: which transport each layer really used, busbw, and PASS/FAIL vs the site.

Pure and stdlib-only on purpose: diagnose/gate/probe.py sends this module's source with its own
as `python -c CODE` (so rank 0 judges on the node, in any image, without hpcbundle installed), and
the tests check it with exact expectations on captured logs. Inputs are log lines and the
numbers the probe measured; nothing here reads the machine.

    >>> nccl_transport(["c:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0"])
    'IB'
    >>> round(busbw_gbps(nbytes=125_000_000, seconds=1.0, ranks=4), 3)
    1.5
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# Fabrics on which the data must not go over TCP sockets (NCCL NET/Socket, Open MPI's tcp btl).
RDMA_FABRICS = ("infiniband", "roce", "omnipath")
DEFAULT_THRESHOLD = 0.5

_NCCL_CHANNEL = re.compile(r"NCCL INFO (?:Channel|Ring) \d+(?:/\d+)? : .* via (\S+)")
_NCCL_NETWORK = re.compile(r"NCCL INFO Using network (\w+)")
_NCCL_NET_INIT = re.compile(r"NCCL INFO NET/(\w+) ?: Using (\[.*)$")
_NCCL_NODES = re.compile(r"NCCL INFO comm \S+ rank \d+ nRanks \d+ nNodes (\d+)")
_NCCL_DEVICE = re.compile(r"\[\d+\]([^\s:\[]+(?::\d+/\w+)?)")
_OMPI_PML = re.compile(r"select: component (\w+) selected")
_OMPI_BML = re.compile(r"mca: bml: Using (\w+) btl for send to \[\[\d+,\d+\],(\d+)\] on node (\S+)")


@dataclass(frozen=True)
class Expect:
    """What the site says the gate must see (built from a site by probe.expect; JSON on the wire).

    `where` is the site file for messages; `interfaces` the data interfaces the site names, in the site
    keys `interface_keys`; `link_gbps` None means busbw is reported, not judged; `torch`: the ranks meet by
    torch.distributed (--torch, --torchrun): Gloo over TCP on CPUs, NCCL on GPUs, no MPI between them.
    """

    where: str
    fabric: str
    interfaces: tuple[str, ...] = ()
    interface_keys: tuple[str, ...] = ("network.interfaces",)
    link_gbps: float | None = None
    threshold: float = DEFAULT_THRESHOLD
    gpu: bool = False
    nccl_sockets: str = ""
    torch: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Expect:
        """The expectations from their JSON form (lists become tuples)."""
        lists = {name: tuple(data[name]) for name in ("interfaces", "interface_keys") if name in data}
        return cls(**{**data, **lists})


@dataclass(frozen=True)
class RankReport:
    """What one rank saw: its host, its MPI and NCCL log lines, bytes each interface sent meanwhile; a torch
    rank also its RANK, LOCAL_RANK and device (the rank table)."""

    host: str
    mpi_lines: tuple[str, ...] = ()
    nccl_lines: tuple[str, ...] = ()
    tx_bytes: dict[str, int] = field(default_factory=dict)
    rank: int = -1
    local_rank: int = -1
    device: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RankReport:
        """A rank's report from its JSON form."""
        return cls(
            data["host"],
            tuple(data.get("mpi_lines", ())),
            tuple(data.get("nccl_lines", ())),
            data.get("tx_bytes", {}),
            data.get("rank", -1),
            data.get("local_rank", -1),
            data.get("device", ""),
        )


def rank_table_problem(ranks: list[RankReport]) -> tuple[str, str, str] | None:
    """What is wrong with a torch job's ranks, as (problem, site key, fix), or None: every RANK once, and on
    each node one LOCAL_RANK and one device per rank.

    >>> rank_table_problem([RankReport("n1", rank=0, local_rank=0, device="cpu"), RankReport("n2", rank=0)])[0]
    'RANK 0 twice, where 2 ranks need 0 to 1 once each'
    >>> rank_table_problem([RankReport("n1", rank=0, local_rank=0, device="cuda:0"),
    ...                     RankReport("n1", rank=1, local_rank=1, device="cuda:0")])[0]
    'two ranks on n1 use cuda:0'
    """
    numbers = sorted(rank.rank for rank in ranks)
    if numbers != list(range(len(ranks))):
        twice = sorted({n for n in numbers if numbers.count(n) > 1}) or [n for n in numbers if n >= len(ranks)]
        shown = " and ".join(str(n) for n in twice[:3])
        problem = f"RANK {shown} {'twice' if numbers.count(twice[0]) > 1 else 'out of range'}, where {len(ranks)} "
        fix = "the launcher's rank variables reach hpcbundle-torchenv unchanged: check launcher.name and env"
        return problem + f"ranks need 0 to {len(ranks) - 1} once each", "launcher.name", fix
    for host in sorted({rank.host for rank in ranks}):
        mine = [rank for rank in ranks if rank.host == host]
        for what, values in (("LOCAL_RANK", [r.local_rank for r in mine]), ("", [r.device for r in mine])):
            taken = next((v for v in values if values.count(v) > 1 and v != "cpu"), None)
            if taken is not None:
                fix = "one rank per GPU: each takes cuda:LOCAL_RANK; give each host as many slots as GPUs"
                shown = f"{what} {taken}" if what else taken
                return f"two ranks on {host} {'have' if what else 'use'} {shown}", "node.gpus", fix
    return None


@dataclass(frozen=True)
class Measured:
    """The timed allreduce: bytes per rank, seconds per allreduce (slowest rank), the backend used."""

    nbytes: int
    seconds: float
    backend: str
    correct: bool = True


@dataclass(frozen=True)
class GateVerdict:
    """The gate's answer: PASS or FAIL, one line saying why (with the site key and the fix on FAIL)."""

    status: str
    line: str
    facts: dict[str, Any]


def nccl_transport(lines: list[str] | tuple[str, ...]) -> str | None:
    """The network NCCL really used: 'IB', 'Socket' (or a plugin's name), None if it used none.

    The channel lines (`Channel 00/0 : 0[0] -> 2[0] [send] via NET/IB/0`; `Ring 00 : ...` before
    NCCL 2.5) say what carried the data: NET/<name>, or none when every ring stays in the node
    (P2P, SHM), whatever network NCCL set up. Without channel lines, `Using network IB`; then the
    `NET/IB : Using [0]mlx5_0:1/IB` init lines, where a transport that found devices wins over
    Socket (NCCL before 2.5 set up the socket transport in any case). A communicator NCCL reports as
    `nNodes 1` (one rank, or the GPUs of one node) logs no `via` line and used no network, whatever
    `Using network` it set up (NCCL 2.28 on one H200: `Using network Socket`, `nRanks 1 nNodes 1`).
    """
    channels = [m.group(1) for line in lines if (m := _NCCL_CHANNEL.search(line))]
    if channels:
        nets = [via.split("/")[1] for via in channels if via.startswith("NET/")]
        return nets[0] if nets else None
    nodes = [int(m.group(1)) for line in lines if (m := _NCCL_NODES.search(line))]
    if nodes and max(nodes) == 1:
        return None
    used = [m.group(1) for line in lines if (m := _NCCL_NETWORK.search(line))]
    if used:
        return used[0]
    found = [m.group(1) for line in lines if (m := _NCCL_NET_INIT.search(line))]
    return next((name for name in found if name != "Socket"), found[0] if found else None)


def nccl_devices(lines: list[str] | tuple[str, ...], transport: str) -> list[str]:
    """The devices NCCL's `NET/<transport> : Using [0]dev ...` line names, e.g. ['mlx5_0:1/IB'] or ['eth0']."""
    for line in lines:
        m = _NCCL_NET_INIT.search(line)
        if m and m.group(1) == transport:
            return _NCCL_DEVICE.findall(m.group(2).split(";")[0])
    return []


@dataclass(frozen=True)
class OpenMpiTransport:
    """Open MPI's point-to-point path: the pml selected, and the btl used to each peer on another node."""

    pml: str | None
    remote_btls: dict[str, list[str]]  # btl -> peer nodes it sends to (sorted)

    def describe(self) -> str:
        """e.g. 'ob1/tcp', 'ucx', 'unknown'."""
        if self.pml is None:
            return "unknown"
        btls = ",".join(sorted(self.remote_btls))
        return f"{self.pml}/{btls}" if btls else self.pml


def openmpi_transport(ranks: list[RankReport]) -> OpenMpiTransport:
    """The pml and the per-peer btls from Open MPI's pml/btl base verbose lines of every rank.

    `select: component ob1 selected` names the pml; `mca: bml: Using tcp btl for send to
    [[4242,1],1] on node node2` the btl one rank uses for one peer (ob1 only: ucx and cm
    bypass the btls). Peers on the rank's own node are left out: only the network matters here.
    """
    pmls = [m.group(1) for rank in ranks for line in rank.mpi_lines if (m := _OMPI_PML.search(line))]
    remote: dict[str, set[str]] = {}
    for rank in ranks:
        for line in rank.mpi_lines:
            m = _OMPI_BML.search(line)
            if m and m.group(3) != rank.host:
                remote.setdefault(m.group(1), set()).add(m.group(3))
    return OpenMpiTransport(pmls[0] if pmls else None, {btl: sorted(nodes) for btl, nodes in remote.items()})


def busbw_gbps(nbytes: int, seconds: float, ranks: int) -> float:
    """Bus bandwidth in Gbit/s as nccl-tests defines it for allreduce: algbw * 2(n-1)/n.

    algbw is bytes per rank over time; the factor makes it comparable with the link speed,
    whatever the number of ranks (a ring sends 2(n-1)/n of the buffer over each link).
    """
    return nbytes * 8 / seconds / 1e9 * 2 * (ranks - 1) / ranks


def busiest_interface(ranks: list[RankReport]) -> str | None:
    """The interface (not loopback) that sent the most bytes during the allreduce, summed over ranks."""
    totals: dict[str, int] = {}
    for rank in ranks:
        for name, sent in rank.tx_bytes.items():
            if name != "lo":
                totals[name] = totals.get(name, 0) + sent
    return max(sorted(totals), key=lambda name: totals[name]) if totals and max(totals.values()) > 0 else None


def judge(expect: Expect, ranks: list[RankReport], measured: Measured) -> GateVerdict:
    """PASS or FAIL for the site: the transport must be the site's fabric, the bytes must go over the
    site's interfaces, and busbw must reach gate.threshold x network.link_gbps.

    One node (or one rank) exercises no network: it passes, saying the fabric was not judged.
    """
    nodes = sorted({rank.host for rank in ranks})
    nccl = nccl_transport([line for rank in ranks for line in rank.nccl_lines]) if expect.gpu else None
    mpi = openmpi_transport(ranks)
    iface = busiest_interface(ranks)
    busbw = busbw_gbps(measured.nbytes, measured.seconds, len(ranks)) if len(ranks) > 1 else 0.0
    fraction = busbw / expect.link_gbps if expect.link_gbps else None
    facts: dict[str, Any] = {
        "ranks": len(ranks),
        "nodes": len(nodes),
        "backend": measured.backend,
        "bytes": measured.nbytes,
        "seconds": round(measured.seconds, 6),
        "busbw_gbps": round(busbw, 4),
        "link_gbps": expect.link_gbps,
        "fraction": None if fraction is None else round(fraction, 4),
        "nccl": nccl,
        "nccl_devices": nccl_devices([line for rank in ranks for line in rank.nccl_lines], nccl) if nccl else [],
        "openmpi": mpi.describe(),
        "interface": iface,
        "nccl_sockets": expect.nccl_sockets if nccl == "Socket" else "",
    }
    if expect.torch:
        facts["ranks_table"] = [[r.rank, r.host, r.local_rank, r.device] for r in sorted(ranks, key=lambda r: r.rank)]
    seen = _seen(facts)
    table = rank_table_problem(ranks) if expect.torch else None
    if table is not None:
        problem = table
    elif not measured.correct:
        problem = (
            "the allreduce gave a wrong sum",
            "network.fabric",
            "data is corrupted on the way: check the nodes' NICs",
        )
    elif len(nodes) < 2:
        return GateVerdict("PASS", f"hpcbundle gate: PASS (one node: the network was not exercised); {seen}", facts)
    else:
        problem = _network_problem(expect, nccl, mpi, iface, busbw, fraction)
    if problem is not None:
        what, key, fix = problem
        return GateVerdict("FAIL", f"hpcbundle gate: FAIL: {what}: {expect.where}: {key} ({fix}); {seen}", facts)
    note = "" if fraction is not None else " (busbw not judged: set network.link_gbps)"
    return GateVerdict("PASS", f"hpcbundle gate: PASS{note}; {seen}", facts)


def _network_problem(
    expect: Expect, nccl: str | None, mpi: OpenMpiTransport, iface: str | None, busbw: float, fraction: float | None
) -> tuple[str, str, str] | None:
    """What is wrong with how the allreduce crossed the network, as (problem, site key, fix), or None:
    a transport that is not the site's fabric, bytes over another interface, busbw below the threshold."""
    rdma = expect.fabric in RDMA_FABRICS
    if expect.gpu and rdma and nccl == "Socket":
        return (
            f"NCCL used NET/Socket, but network.fabric is {expect.fabric}",
            "network.fabric",
            "the image needs the RDMA user space (libibverbs1, ibverbs-providers) and NCCL_IB_HCA "
            "must name an active HCA; set network.fabric: ethernet if the nodes have none",
        )
    tcp_to = mpi.remote_btls.get("tcp")
    if not expect.gpu and rdma and tcp_to:
        return (
            f"Open MPI sent to {','.join(tcp_to)} over the tcp btl, but network.fabric is {expect.fabric}",
            "network.fabric",
            "use pml ucx with an image built with UCX (or the openib btl of an image with verbs); "
            "set network.fabric: ethernet if the nodes have no RDMA",
        )
    over_tcp = tcp_to or (expect.gpu and nccl == "Socket") or (expect.torch and not expect.gpu)  # Gloo: TCP
    if over_tcp and expect.interfaces and iface is not None and iface not in expect.interfaces:
        keys = ", ".join(expect.interface_keys)
        return (
            f"the allreduce went over {iface}, not {keys} ({','.join(expect.interfaces)})",
            expect.interface_keys[0],
            "name the interface the data should use, and check btl_tcp_if_include/NCCL_SOCKET_IFNAME",
        )
    if fraction is not None and fraction < expect.threshold:
        return (
            f"busbw {busbw:.3g} Gbit/s is {fraction:.2f} of network.link_gbps {expect.link_gbps:g}, "
            f"below gate.threshold {expect.threshold:g}",
            "network.interfaces",
            f"point it at the {expect.link_gbps:g} Gbit/s data link, "
            + (
                f"raise NCCL_SOCKET_NTHREADS/NCCL_NSOCKS_PERTHREAD in env (now {expect.nccl_sockets or '1 x 1'}), "
                if nccl == "Socket"
                else ""
            )
            + "let hpcbundle tune pick the allreduce algorithm, or set network.link_gbps to what this link is rated",
        )
    return None


STARTED = "hpcbundle gate: rank started on"
"""The line each probe rank prints first: a gate that timed out tells a slow start from a hung transfer."""


def hang_line(where: str, timeout: int, started: bool) -> str:
    """The verdict when the gate did not answer within gate.timeout s. `started`: a rank printed STARTED,
    so the transfer hung (ranks that cannot reach each other over the site's interface wait rather than
    fail); else no rank started in time: the launcher's own wire-up hung on the interface (mpirun's daemons
    over a decoy), or the start is slow (containers unpacked on each node, a slow file system)."""
    if not started:
        return (
            f"hpcbundle gate: FAIL: no rank started within {timeout} s: {where}: network.interfaces or gate.timeout "
            f"(the launcher did not get its ranks running: its wire-up hangs on an interface that does not route "
            f"between the nodes, or the start is slower than gate.timeout allows: an image unpacked on every node, "
            f"a slow shared file system; check network.interfaces against ip -br addr on the nodes, and time the "
            f"launch line alone before raising gate.timeout)"
        )
    return (
        f"hpcbundle gate: FAIL: no answer within {timeout} s: {where}: network.interfaces (the ranks started "
        f"but their allreduce never finished: they cannot reach each other over it: check it, "
        f"btl/oob_tcp_if_include and NCCL_SOCKET_IFNAME against what ip -br addr shows on the nodes, "
        f"or raise gate.timeout)"
    )


def _seen(facts: dict[str, Any]) -> str:
    """What the gate saw, in one clause: ranks, nodes, transports, interface, busbw."""
    devices = f" ({','.join(facts['nccl_devices'])})" if facts["nccl_devices"] else ""
    mpi = "MPI transport not reported" if facts["openmpi"] == "unknown" else f"Open MPI {facts['openmpi']}"
    if "ranks_table" in facts:  # torch: no MPI between the ranks; Gloo on CPUs
        gloo = facts["backend"].endswith("gloo")  # NCCL at one rank names no transport: it opened none
        mpi = f"RANK 0 to {facts['ranks'] - 1} once each" + (", Gloo over TCP" if gloo else "")
    sockets = f" with {facts['nccl_sockets']}" if facts["nccl_sockets"] else ""
    layers = [mpi] + ([f"NCCL NET/{facts['nccl']}{devices}{sockets}"] if facts["nccl"] else [])
    via = f" via {facts['interface']}" if facts["interface"] else ""
    link = f" of {facts['link_gbps']:g}" if facts["link_gbps"] else ""
    return (
        f"{facts['ranks']} ranks on {facts['nodes']} nodes, {facts['backend']}, {', '.join(layers)}{via}, "
        f"busbw {facts['busbw_gbps']:.3g}{link} Gbit/s at {facts['bytes']} bytes"
    )
