"""The network: which site keys name interfaces, and every MPI/NCCL/gate setting derived from them.

A site names its data interfaces once (network.interfaces) or key by key (mca.btl_tcp_if_include,
env.NCCL_SOCKET_IFNAME, ...). This module is the one place that knows those keys: the launch
command asks it what network.interfaces derives, doctor which interfaces to probe, and the launch
gate which interfaces the data must use. Config holds only the data's shape.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..config.sites import Site

# Site keys that name network interfaces, in the order interface_settings reports them.
INTERFACE_KEYS = (
    "network.interfaces",
    "mca.btl_tcp_if_include",
    "mca.oob_tcp_if_include",
    "env.NCCL_SOCKET_IFNAME",
    "env.GLOO_SOCKET_IFNAME",
    "env.HOROVOD_GLOO_IFACE",
    "env.UCX_NET_DEVICES",
)
# The settings a launcher can take from network.interfaces (see derived_interfaces).
DERIVABLE_KEYS = frozenset({"mca.btl_tcp_if_include", "mca.oob_tcp_if_include", "env.NCCL_SOCKET_IFNAME"})
# Keys that name the interfaces of the launcher's daemons only, never the job's data.
CONTROL_KEYS = frozenset({"mca.oob_tcp_if_include"})
# NCCL's socket transport sized by the link (NCCL's environment variables doc: NCCL_SOCKET_NTHREADS
# 1-16, default 1, "for generic 100G networks, this value can be manually set to 4";
# NCCL_NSOCKS_PERTHREAD default 1; "the product of NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD
# cannot exceed 64"). (lowest link in Gbit/s, threads, sockets per thread), fastest first.
SOCKET_TUNING = ((100.0, 4, 4), (25.0, 2, 2))
SOCKET_KEYS = ("env.NCCL_SOCKET_NTHREADS", "env.NCCL_NSOCKS_PERTHREAD")
MAX_SOCKET_THREADS, MAX_SOCKETS = 16, 64  # net_socket.cc lowers the site's values to these
# An adapter port (mlx5_0:1) in UCX_NET_DEVICES: an RDMA device, not a TCP interface.
_ADAPTER_PORT = re.compile(r"\w+:\d+")


class Setting(NamedTuple):
    """An effective site value and the site key it came from: the key itself, or network.interfaces."""

    value: str
    source: str


def derived_interfaces(site: Site) -> dict[str, str]:
    """The settings network.interfaces gives a site that does not set them itself (key -> value).

    btl_tcp_if_include and oob_tcp_if_include on Open MPI sites only (Intel MPI and MPICH have
    no such parameters), NCCL_SOCKET_IFNAME on GPU sites only (NCCL runs nowhere else). The Gloo
    variables are never derived: horovodrun sets HOROVOD_GLOO_IFACE itself from its own flag.
    """
    names = ",".join(site.network.interfaces)
    derived: dict[str, str] = {}
    if names and site.mpi.flavour == "openmpi":
        derived |= {"mca.btl_tcp_if_include": names, "mca.oob_tcp_if_include": names}
    if names and site.node.gpus:
        derived["env.NCCL_SOCKET_IFNAME"] = names
    return derived


def nccl_over_sockets(site: Site) -> bool:
    """NCCL moves the data over TCP sockets: a GPU site on Ethernet, or one that disables NCCL's IB."""
    return bool(site.node.gpus) and (site.network.fabric == "ethernet" or site.env.get("NCCL_IB_DISABLE") == "1")


def derived_socket_threads(site: Site) -> dict[str, str]:
    """NCCL's socket threads and sockets per thread that network.link_gbps derives (key -> value), where
    NCCL goes over sockets; the site's own env wins over them (the launch command leaves these out then).

        >>> site = Site.model_validate({"name": "demo", "description": "4 GPUs on 100 GbE",
        ...     "mpi": {"flavour": "openmpi", "version": "4.1.6"}, "launcher": {"name": "mpirun"},
        ...     "node": {"cores": 64, "gpus": 4, "gpu_model": "A100"},
        ...     "network": {"fabric": "ethernet", "link_gbps": 100}})
        >>> derived_socket_threads(site)
        {'env.NCCL_SOCKET_NTHREADS': '4', 'env.NCCL_NSOCKS_PERTHREAD': '4'}
    """
    link = site.network.link_gbps
    if not nccl_over_sockets(site) or not link:
        return {}
    for lowest, threads, sockets in SOCKET_TUNING:
        if link >= lowest:
            return dict(zip(SOCKET_KEYS, (str(threads), str(sockets)), strict=True))
    return {}


def derived_nccl_net(site: Site) -> dict[str, str]:
    """NCCL_NET=IB on a GPU site on InfiniBand/RoCE (key -> value), unless the site opts out
    (network.nccl_require_ib: false), disables NCCL's IB or names NCCL_NET itself.

    NCCL's environment variables doc: NCCL_NET "forces NCCL to use a specific network", and fails
    when that network cannot be used; without it, a container that cannot see the HCAs silently
    moves every allreduce over TCP sockets (NET/Socket in NCCL_DEBUG=INFO). CSCS sets it the same way.
    """
    rdma = site.network.fabric in ("infiniband", "roce") and site.network.nccl_require_ib
    if not rdma or not site.node.gpus or "NCCL_NET" in site.env or site.env.get("NCCL_IB_DISABLE") == "1":
        return {}
    return {"env.NCCL_NET": "IB"}


def socket_threads(site: Site) -> str:
    """'4 threads x 4 sockets' as NCCL's socket transport will run on the site (its env, else derived);
    '' where NCCL does not go over sockets or keeps its defaults."""
    values = {key: site.env.get(key.split(".", 1)[1]) for key in SOCKET_KEYS} if nccl_over_sockets(site) else {}
    derived = derived_socket_threads(site)
    threads, sockets = (values.get(key) or derived.get(key) for key in SOCKET_KEYS)
    if not threads and not sockets:
        return ""
    return f"NCCL_SOCKET_NTHREADS={threads or 1} x NCCL_NSOCKS_PERTHREAD={sockets or 1}"


def interface_settings(site: Site) -> dict[str, Setting]:
    """Every interface setting of a site in INTERFACE_KEYS order, key -> (value, source).

    ONE source: a key the site sets itself (mca.*, env.*) wins and is its own source; otherwise
    it is derived from network.interfaces (see derived_interfaces) and says so. Keys that are
    neither set nor derived are left out. Launchers pass the derived ones they need (srun starts no
    daemons, so no oob_tcp_if_include; hydra and horovodrun have their own interface option), and
    `launch --explain` names the source of each. Example: a GPU site that moves only the
    launcher's daemons to another interface::

        >>> site = Site.model_validate({"name": "demo", "description": "2 GPU nodes on eth0",
        ...     "mpi": {"flavour": "openmpi", "version": "4.1.6"}, "launcher": {"name": "mpirun"},
        ...     "node": {"cores": 8, "gpus": 2, "gpu_model": "A100"},
        ...     "network": {"fabric": "ethernet", "interfaces": ["eth0"]},
        ...     "mca": {"oob_tcp_if_include": "eth1"}})
        >>> for key, (value, source) in interface_settings(site).items():
        ...     print(f"{key:23} {value}  <- {source}")
        network.interfaces      eth0  <- network.interfaces
        mca.btl_tcp_if_include  eth0  <- network.interfaces
        mca.oob_tcp_if_include  eth1  <- mca.oob_tcp_if_include
        env.NCCL_SOCKET_IFNAME  eth0  <- network.interfaces
    """
    explicit = {f"mca.{k}": v for k, v in site.mca.items()} | {f"env.{k}": v for k, v in site.env.items()}
    if site.network.interfaces:
        explicit["network.interfaces"] = ",".join(site.network.interfaces)
    derived = derived_interfaces(site)
    found: dict[str, Setting] = {}
    for key in INTERFACE_KEYS:
        if key in explicit:
            found[key] = Setting(explicit[key], key)
        elif key in derived:
            found[key] = Setting(derived[key], "network.interfaces")
    return found


def named_interfaces(site: Site, data_only: bool = False) -> dict[str, list[str]]:
    """Interface name -> the site keys it comes from (set, or derived from network.interfaces): what
    doctor probes on every node. Exclusion lists (^lo,docker0), subnets and adapter ports (mlx5_0:1)
    are not names. `data_only` leaves out keys that carry only the launcher's daemons (oob).

        >>> site = Site.model_validate({"name": "demo", "description": "d",
        ...     "mpi": {"flavour": "openmpi", "version": "4.1.6"}, "launcher": {"name": "mpirun"},
        ...     "node": {"cores": 8}, "network": {"fabric": "ethernet"},
        ...     "mca": {"btl_tcp_if_include": "eth1", "oob_tcp_if_include": "eth0"}})
        >>> named_interfaces(site), named_interfaces(site, data_only=True)
        ({'eth1': ['mca.btl_tcp_if_include'], 'eth0': ['mca.oob_tcp_if_include']}, {'eth1': ['mca.btl_tcp_if_include']})
    """
    found: dict[str, list[str]] = {}
    for key, (value, source) in interface_settings(site).items():
        if not value or value.startswith("^") or (data_only and key in CONTROL_KEYS):
            continue
        for name in value.lstrip("=").split(","):
            name = name.strip()
            if name and "/" not in name and not _ADAPTER_PORT.fullmatch(name) and source not in found.get(name, []):
                found.setdefault(name, []).append(source)
    return found


def gate_interfaces(site: Site) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(interfaces, the keys naming them): where the launch gate expects the job's data to go when it
    goes over TCP, whether the site names them in network.interfaces, in mca or in env."""
    named = named_interfaces(site, data_only=True)
    keys = tuple(dict.fromkeys(key for sources in named.values() for key in sources))
    return tuple(named), keys
