"""Rules for the fabric: the interfaces a site names exist and carry TCP between the nodes, verbs where asked for,
the Open MPI transport the site selects exists in the image, and the image carries the fabric's user space."""

from __future__ import annotations

import re

from ..config.fields import parse_version
from ..config.sites import Site
from ..knowledge.compat import KnowledgeBase
from ..knowledge.labels import listed
from ..knowledge.launching import LAUNCHERS_KNOWN
from ..knowledge.network import MAX_SOCKET_THREADS, MAX_SOCKETS, SOCKET_KEYS, interface_settings, named_interfaces
from .engine import Facts, Verdict, refusal, rule

RDMA_FABRICS = ("infiniband", "roce")
TCP_FABRICS = ("ethernet", "loopback")
RDMA_ENV = ("NCCL_IB_", "UCX_IB_", "UCX_RC_", "UCX_DC_", "UCX_UD_")
RDMA_MCA = ("btl_openib_",)


@rule("rdma-on-tcp", needs=("site",), on_load=True)
def rdma_on_tcp(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A site on a TCP fabric sets nothing of an RDMA fabric (verbs adapters, the openib btl).

    NCCL_IB_DISABLE is the one NCCL_IB_* variable that fits a TCP fabric; UCX_NET_DEVICES may name
    a TCP interface (eth0) there, never an adapter port (mlx5_0:1).
    """
    site = facts.site
    fabric = site.network.fabric
    if fabric not in TCP_FABRICS:
        return [Verdict("SKIP", f"network.fabric is {fabric}, not a TCP fabric")]
    but = f"but network.fabric is {fabric}"
    fix = "drop it, or set network.fabric to infiniband or roce if the nodes have that fabric"
    found = [
        refusal(f"env.{name}", f"is an InfiniBand/RoCE adapter setting, {but}", fix)
        for name in site.env
        if name.startswith(RDMA_ENV) and name != "NCCL_IB_DISABLE"
    ]
    ports = [d.strip() for d in site.env.get("UCX_NET_DEVICES", "").split(",") if re.fullmatch(r"\w+:\d+", d.strip())]
    if ports:
        found.append(
            refusal(
                "env.UCX_NET_DEVICES",
                f"names the adapter port {ports[0]}, {but}",
                f"name a TCP interface such as eth0, or {fix}",
            )
        )
    found += [
        refusal(f"mca.{name}", f"is a setting of the openib btl (InfiniBand verbs), {but}", fix)
        for name in site.mca
        if name.startswith(RDMA_MCA)
    ]
    if "openib" in site.mca.get("btl", "").split(","):
        found.append(
            refusal("mca.btl", f"selects the openib btl (InfiniBand verbs), {but}", f"use self,vader,tcp, or {fix}")
        )
    return found


def _open_mpi_build(facts: Facts, selected: bool, what: str) -> tuple[set[str], str] | Verdict:
    """The image's Open MPI transports and version, or the SKIP when the site does not select `what` or the
    image does not say how its Open MPI was built."""
    image = facts.image
    if not selected or image.get("mpi.flavour") != "openmpi":
        return Verdict("SKIP", f"the site does not select {what}")
    transports = listed(image, "mpi.transports")
    if transports is None:
        return Verdict("SKIP", f"{facts.image_source} does not say how its Open MPI was built (an older image)")
    return transports, image.get("mpi.version", "")


@rule("openib-btl", needs=("image", "site"))
def openib_btl(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """A site that selects the openib btl needs an Open MPI 4 built with verbs (recipes that build one carry
    the RDMA user space), and on InfiniBand btl_openib_allow_ib (Open MPI >= 4.0 leaves those ports to UCX)."""
    site = facts.site
    built = _open_mpi_build(facts, "openib" in site.mca.get("btl", "").split(","), "the openib btl")
    if isinstance(built, Verdict):
        return built
    transports, version = built
    if parse_version(version).major >= 5:
        return Verdict(
            "FAIL", f"the site selects the openib btl, which Open MPI {version} no longer has", "use pml ucx"
        )
    if "openib" not in transports:
        return Verdict(
            "FAIL",
            f"the site selects the openib btl but the image's Open MPI {version} was built without verbs "
            "(no openib btl): MPI_Init finds no transport between nodes",
            "use an image built --with-verbs (e.g. recipe cuda11.8-tf2.14-torch2.1), or set the site to pml: ucx "
            "with a UCX image",
        )
    allow = site.mca.get("btl_openib_allow_ib", "").lower() in ("1", "true", "yes")
    if site.network.fabric == "infiniband" and not allow:
        return Verdict(
            "FAIL",
            f"Open MPI {version} disables the openib btl on InfiniBand ports unless btl_openib_allow_ib is set "
            "(it leaves them to UCX), so ranks on different nodes cannot reach each other",
            'add btl_openib_allow_ib: "1" to the site\'s mca',
        )
    return Verdict("PASS", f"the image's Open MPI {version} has the openib btl and the RDMA user space")


@rule("pml-ucx", needs=("image", "site"))
def pml_ucx(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """A site that selects pml ucx needs an Open MPI built with UCX, and on InfiniBand/RoCE UCX's ib transport."""
    site = facts.site
    built = _open_mpi_build(facts, site.mca.get("pml") == "ucx", "pml ucx")
    if isinstance(built, Verdict):
        return built
    transports, version = built
    if "ucx" not in transports:
        return Verdict(
            "FAIL",
            f"the site selects pml ucx but the image's Open MPI {version} has no UCX: MPI_Init fails "
            "(no pml component)",
            "use a recipe with ucx (e.g. cuda12.2-tf2.15-torch2.1-ucx, cuda13.0-torch2.11-ompi5)",
        )
    ucx = listed(facts.image, "ucx.transports") or set()
    if site.network.fabric in RDMA_FABRICS and not {"ib"} <= ucx:
        return Verdict(
            "FAIL",
            f"the image's UCX has no ib transport ({', '.join(sorted(ucx)) or 'none'}), so it cannot drive the "
            f"{site.network.fabric} adapters the site names",
            "build UCX --with-verbs --with-rdmacm with fabric_libs: [verbs]",
        )
    return Verdict("PASS", f"the image's Open MPI {version} has pml ucx (UCX transports {', '.join(sorted(ucx))})")


@rule("fabric-libs", needs=("image", "site"))
def fabric_libs(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """The image carries the user space of the site's fabric: verbs for NCCL on InfiniBand/RoCE, psm2 on Omni-Path.

    Without libibverbs and the adapter's provider NCCL finds no IB device and silently moves
    every allreduce over TCP sockets (NCCL_DEBUG=INFO says NET/Socket, not NET/IB).
    """
    site, image = facts.site, facts.image
    fabric, libs = site.network.fabric, listed(image, "fabric-libs")
    nccl_ib = "nccl" in image and site.env.get("NCCL_IB_DISABLE") != "1"
    if fabric in RDMA_FABRICS and nccl_ib:
        if libs is None:
            return Verdict("SKIP", f"{facts.image_source} does not list its fabric libraries (an older image)")
        if "verbs" not in libs:
            return Verdict(
                "FAIL",
                f"the site's fabric is {fabric} but the image has no RDMA user space (libibverbs1, "
                "ibverbs-providers): NCCL falls back to TCP sockets (NET/Socket)",
                "use a recipe with fabric_libs: [verbs] (e.g. cuda12.2-tf2.15-torch2.1-ucx), or set "
                'env NCCL_IB_DISABLE: "1" if sockets are meant',
            )
        return Verdict("PASS", f"verbs in the image for NCCL over {fabric}")
    if fabric == "omnipath" and image.get("mpi.flavour") == "intelmpi" and libs is not None:
        if "psm2" not in libs:
            return Verdict(
                "WARN",
                "the site's fabric is omnipath but the image has no libpsm2: Intel MPI's libfabric cannot use "
                "its psm2 provider and falls back to a slower one",
                "add fabric_libs: [psm2] to the recipe",
            )
        return Verdict("PASS", "libpsm2 in the image for libfabric's psm2 provider (Omni-Path)")
    return Verdict("SKIP", f"nothing in the image needs a fabric library on {fabric}")


@rule("interface", needs=("site", "nodes", "observed"))
def interfaces(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """Every interface the site names exists and is up on every node, and carries TCP between the nodes."""
    named = named_interfaces(facts.site)
    if not named:
        return [
            Verdict(
                "SKIP",
                "the site names no interface (network.interfaces, btl/oob_tcp_if_include, "
                "NCCL_SOCKET_IFNAME, HOROVOD_GLOO_IFACE)",
                subject="names",
            )
        ]
    if facts.scope == "login":
        return [
            Verdict(
                "SKIP",
                f"{', '.join(named)}: checked on the compute nodes only "
                "(run `hpcbundle doctor --hosts ...` in the job)",
                subject="names",
            )
        ]
    verdicts = []
    nodes = facts.ok_nodes()
    for name, keys in named.items():
        missing, down, noaddr, addrs = [], [], [], []
        for host, node in nodes.items():
            link = next((i for i in node.get("interfaces", []) if i["name"] == name), None)
            if link is None:
                missing.append(host)
            elif not link["up"]:
                down.append(host)
            elif not link["ipv4"]:
                noaddr.append(host)
            else:
                addrs.append(f"{host} {link['ipv4'][0]}")
        if missing:
            have = sorted({i["name"] for n in nodes.values() for i in n.get("interfaces", []) if i["name"] != "lo"})
            verdicts.append(
                Verdict(
                    "FAIL",
                    f"no interface {name} on {', '.join(missing)} (named by {', '.join(keys)}; "
                    f"the nodes have {', '.join(have)})",
                    f"name an interface the nodes have in {keys[0]} (`ip -br addr` on a node; "
                    "`hpcbundle site detect` proposes one)",
                    name,
                )
            )
            continue
        if down or noaddr:
            what = f"down on {', '.join(down)}" if down else f"no IPv4 address on {', '.join(noaddr)}"
            verdicts.append(
                Verdict("FAIL", f"{name} is {what}", f"bring it up or name another interface in {keys[0]}", name)
            )
            continue
        verdicts.append(Verdict("PASS", f"up on {'; '.join(addrs)}", subject=name))
        verdicts += _reach(facts, name, keys, len(nodes))
    return verdicts


def _reach(facts: Facts, name: str, keys: list[str], nodes: int) -> list[Verdict]:
    """The TCP probe's outcome over one interface (every ordered pair of nodes)."""
    probes = facts.reach.get(name)
    subject = f"{name} reach"
    if probes is None:
        return [Verdict("SKIP", "TCP probe not run", subject=subject)] if nodes > 1 else []
    failed = [(a, b, addr, why) for a, b, addr, why in probes if why != "ok"]
    if not failed:
        return [
            Verdict(
                "PASS",
                f"{len(probes)} of {len(probes)} TCP connections between {nodes} nodes over {name}",
                subject=subject,
            )
        ]
    shown = "; ".join(f"{a} -> {b} {addr}: {why}" for a, b, addr, why in failed[:4])
    more = f" (+{len(failed) - 4} more)" if len(failed) > 4 else ""
    return [
        Verdict(
            "FAIL",
            f"{len(failed)} of {len(probes)} TCP connections over {name} failed: {shown}{more}; MPI would hang here",
            f"{name} does not carry traffic between the nodes: name the data interface in {', '.join(keys)}",
            subject,
        )
    ]


@rule("infiniband", needs=("site", "nodes", "observed"))
def infiniband(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """InfiniBand devices are present where the site asks for verbs.

    Verbs are asked for by the openib btl, UCX, NCCL_IB_HCA or fabric: infiniband/roce (where NCCL_NET=IB
    makes NCCL fail without them).
    """
    site = facts.site
    asks = [
        k
        for k, on in (
            ("mca.btl=openib", "openib" in site.mca.get("btl", "").split(",")),
            ("mca.pml=ucx", site.mca.get("pml") == "ucx"),
            ("env.NCCL_IB_HCA", "NCCL_IB_HCA" in site.env),
            ("network.fabric=infiniband", site.network.fabric == "infiniband"),
            ("network.fabric=roce", site.network.fabric == "roce"),
        )
        if on
    ]
    if not asks:
        return Verdict("SKIP", "the site does not ask for verbs (openib, UCX, NCCL_IB_HCA, fabric infiniband/roce)")
    if facts.scope == "login":
        return Verdict("SKIP", "checked on the compute nodes only")
    nodes = facts.ok_nodes()
    without = [h for h, n in nodes.items() if not n.get("infiniband")]
    if without:
        return Verdict(
            "FAIL",
            f"{', '.join(asks)} but /sys/class/infiniband is empty on {', '.join(without)}",
            "run on nodes with HCAs (partition/constraint) or switch the site to TCP (btl self,tcp)",
        )
    devices = sorted({d for n in nodes.values() for d in n["infiniband"]})
    return Verdict("PASS", f"{', '.join(devices)} on every node ({', '.join(asks)})")


# Interfaces NCCL's own default skips or that carry the same address on every node (Docker's and
# libvirt's bridges): an exclusion list in NCCL_SOCKET_IFNAME replaces NCCL's default, so it must
# exclude them itself (NCCL's environment variables doc: `^` excludes interfaces by prefix).
BRIDGE_PREFIXES = ("docker", "virbr")


def _open_bridges(facts: Facts) -> tuple[str, list[str], tuple[str, ...]] | None:
    """(the NCCL_SOCKET_IFNAME exclusion list, the bridge prefixes it leaves selectable, what it excludes);
    None for no such list. An exact entry (=docker0) excludes one name, so it leaves the prefix open."""
    setting = interface_settings(facts.site).get("env.NCCL_SOCKET_IFNAME")
    if setting is None or not setting.value.startswith("^"):
        return None
    excluded = tuple(prefix.strip() for prefix in setting.value[1:].split(",") if prefix.strip())
    prefixes = [e for e in excluded if not e.startswith("=")]
    return setting.value, [p for p in BRIDGE_PREFIXES if not p.startswith(tuple(prefixes))], excluded


def _excluded(name: str, excluded: tuple[str, ...]) -> bool:
    """Whether NCCL's exclusion entries (prefixes, or =exact names) leave interface `name` out."""
    return any(name == e[1:] if e.startswith("=") else name.startswith(e) for e in excluded)


BRIDGE_FIX = (
    "name the data interface (env.NCCL_SOCKET_IFNAME: ib0, or network.interfaces) or exclude the bridges too "
    f"(^{','.join(BRIDGE_PREFIXES)},lo)"
)


@rule("nccl-socket-exclusion", needs=("site",))
def nccl_socket_exclusion(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """An exclusion list in NCCL_SOCKET_IFNAME (^virbr0,lo) must also exclude docker*/virbr* bridges."""
    found = _open_bridges(facts)
    if found is None:
        return Verdict("SKIP", "NCCL_SOCKET_IFNAME is no exclusion list")
    value, open_prefixes, _ = found
    if not open_prefixes:
        return Verdict("PASS", f"NCCL_SOCKET_IFNAME={value} excludes {', '.join(BRIDGE_PREFIXES)}*")
    return Verdict(
        "WARN",
        f"NCCL_SOCKET_IFNAME={value} leaves {', '.join(p + '*' for p in open_prefixes)} selectable (NCCL's "
        "default, which skips docker*, no longer applies): NCCL may bootstrap over a bridge with the same "
        "address on every node and hang",
        BRIDGE_FIX,
    )


@rule("nccl-socket-bridges", needs=("site", "nodes", "observed"))
def nccl_socket_bridges(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """No docker*/virbr* bridge on the nodes is left selectable by an NCCL_SOCKET_IFNAME exclusion list."""
    found = _open_bridges(facts)
    if found is None or not found[1]:
        return Verdict("SKIP", "no NCCL_SOCKET_IFNAME exclusion list that leaves bridges selectable")
    if facts.scope == "login":
        return Verdict("SKIP", "interfaces are checked on the compute nodes only")
    value, open_prefixes, excluded = found
    bridges = sorted(
        f"{link['name']} on {host}"
        for host, node in facts.ok_nodes().items()
        for link in node.get("interfaces", [])
        if link["name"].startswith(tuple(open_prefixes)) and not _excluded(link["name"], excluded)
    )
    if bridges:
        return Verdict(
            "FAIL",
            f"NCCL_SOCKET_IFNAME={value} leaves {', '.join(bridges)} selectable: NCCL can bootstrap over it "
            "(the same address on every node) and hang",
            BRIDGE_FIX,
        )
    return Verdict("PASS", f"no {', '.join(p + '*' for p in open_prefixes)} interface on the nodes")


# NCCL picks the RoCE v2 GID of a port itself from 2.21 on (NCCL's release notes and environment
# variables doc: NCCL_IB_GID_INDEX defaults to -1, dynamic selection); UCX's UCX_IB_GID_INDEX
# defaults to auto (src/uct/ib/base/ib_md.c).
NCCL_GID_AUTO = "2.21"


@rule("gid-index", needs=("site", "image"))
def gid_index(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A forced NCCL_IB_GID_INDEX on NCCL >= 2.21 (or UCX_IB_GID_INDEX): the library picks the RoCE v2 GID itself."""
    env, nccl = facts.site.env, facts.image.get("nccl")
    verdicts = []
    if "NCCL_IB_GID_INDEX" in env and nccl and parse_version(nccl) >= parse_version(NCCL_GID_AUTO):
        verdicts.append(
            Verdict(
                "WARN",
                f"NCCL_IB_GID_INDEX={env['NCCL_IB_GID_INDEX']} is forced, but NCCL {nccl} (>= {NCCL_GID_AUTO}) "
                "picks the RoCE v2 GID itself: a node whose GID table differs fails",
                "drop env.NCCL_IB_GID_INDEX (pin it only where `show_gids` shows the same index on every node)",
                "NCCL",
                "env.NCCL_IB_GID_INDEX",
            )
        )
    if "UCX_IB_GID_INDEX" in env:
        verdicts.append(
            Verdict(
                "WARN",
                f"UCX_IB_GID_INDEX={env['UCX_IB_GID_INDEX']} is forced, but UCX's default (auto) picks the "
                "RoCE v2 GID itself: a node whose GID table differs fails",
                "drop env.UCX_IB_GID_INDEX (pin it only where `show_gids` shows the same index on every node)",
                "UCX",
                "env.UCX_IB_GID_INDEX",
            )
        )
    return verdicts or [Verdict("SKIP", "no GID index forced where the library would pick it")]


@rule("omnipath-provider", needs=("site",))
def omnipath_provider(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """Intel MPI on Omni-Path names its libfabric provider (FI_PROVIDER=psm2): else a missing psm2 falls back to TCP."""
    site = facts.site
    if site.network.fabric != "omnipath" or site.mpi.flavour != "intelmpi":
        return Verdict("SKIP", "no Intel MPI on Omni-Path")
    named = [name for name in ("FI_PROVIDER", "I_MPI_OFI_PROVIDER") if name in site.env]
    if named:
        return Verdict("PASS", f"libfabric provider {site.env[named[0]]} named by env.{named[0]}")
    return Verdict(
        "WARN",
        "Intel MPI on Omni-Path with no libfabric provider named: without a working psm2 provider libfabric "
        "silently picks another one (tcp or sockets) and every message crawls",
        "set env FI_PROVIDER: psm2 (then a missing provider is an error at MPI_Init)",
    )


@rule("nccl-socket-threads", needs=("site",))
def nccl_socket_threads(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """NCCL's socket transport runs at most 16 threads and 64 sockets in all: beyond that it lowers
    the site's NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD itself (net_socket.cc, a WARN in its log
    only), so the site says one thing and NCCL does another."""
    site = facts.site
    given = {name: site.env.get(name) for name in (k.split(".", 1)[1] for k in SOCKET_KEYS)}
    if not any(given.values()):
        return Verdict("SKIP", "the site leaves NCCL's socket threads to their defaults (or to network.link_gbps)")
    bad = [f"{name}={value}" for name, value in given.items() if value is not None and not _positive(value)]
    if bad:
        return Verdict(
            "WARN",
            f"{', '.join(bad)}: no positive whole number, so NCCL does not take it",
            "set NCCL_SOCKET_NTHREADS to 1-16 and NCCL_NSOCKS_PERTHREAD so that their product is at most 64",
        )
    threads, sockets = (int(value or 1) for value in given.values())
    runs = min(threads, MAX_SOCKET_THREADS)
    runs_sockets = sockets if runs * sockets <= MAX_SOCKETS else MAX_SOCKETS // runs
    if (runs, runs_sockets) == (threads, sockets):
        return Verdict("PASS", f"{threads} threads x {sockets} sockets, within NCCL's 16 threads and 64 sockets")
    return Verdict(
        "WARN",
        f"NCCL_SOCKET_NTHREADS={threads} x NCCL_NSOCKS_PERTHREAD={sockets} is over NCCL's limits "
        f"(16 threads, 64 sockets in all): NCCL runs {runs} x {runs_sockets} instead",
        f"set NCCL_SOCKET_NTHREADS={runs} and NCCL_NSOCKS_PERTHREAD={runs_sockets} (or fewer)",
    )


def _positive(value: str) -> bool:
    return value.isascii() and value.isdigit() and len(value) <= 9 and int(value) > 0


@rule("omnipath-open-mpi", needs=("image", "site"))
def omnipath_open_mpi(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """Open MPI on Omni-Path reaches the fabric through its psm2 mtl (or libfabric's psm2 provider, the ofi mtl)
    and libpsm2: without them MPI silently falls back to TCP."""
    site, image = facts.site, facts.image
    built = _open_mpi_build(facts, site.network.fabric == "omnipath", "Omni-Path")
    if isinstance(built, Verdict):
        return built
    transports, version = built
    libs = listed(image, "fabric-libs") or set()
    if transports & {"psm2", "ofi"} and "psm2" in libs:
        return Verdict("PASS", f"the image's Open MPI {version} reaches Omni-Path ({', '.join(sorted(transports))})")
    lacks = "libpsm2" if transports & {"psm2", "ofi"} else "the psm2 mtl (--with-psm2) or libfabric (--with-ofi)"
    return Verdict(
        "WARN",
        f"the site's fabric is omnipath but the image's Open MPI {version} lacks {lacks}: MPI falls back to TCP",
        "build Open MPI --with-psm2 with fabric_libs: [psm2] in the recipe",
    )


@rule("nccl-hca-names", needs=("site",))
def nccl_hca_names(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """NCCL_IB_HCA names the adapters exactly (=mlx5_0,mlx5_1): a bare prefix (mlx5) matches every adapter whose
    name starts with it, storage and management ports too (NCCL's environment variables doc: `=` matches exactly)."""
    value = facts.site.env.get("NCCL_IB_HCA")
    if value is None:
        return Verdict("SKIP", "the site leaves NCCL's adapter choice to NCCL (no NCCL_IB_HCA)")
    if value.startswith(("=", "^")):
        return Verdict("PASS", f"NCCL_IB_HCA={value} names its adapters exactly or excludes some")
    return Verdict(
        "WARN",
        f"NCCL_IB_HCA={value} is a prefix: NCCL also takes any other adapter whose name starts with it "
        "(a storage or management port), and its traffic then shares that port",
        f"name the compute adapters exactly: ={value}_0,{value}_1,... (`ibdev2netdev` lists them)",
    )


@rule("roce-traffic-class", needs=("site",))
def roce_traffic_class(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """NCCL on RoCE names its traffic class (NCCL_IB_TC, NCCL_IB_SL), and MPI over UCX uses the same one.

    NCCL's default 0 puts RDMA in the lossy best-effort class, where a congested switch drops packets and every drop
    costs a retransmit timeout. UCX writes UCX_IB_TRAFFIC_CLASS into the same header field (the GRH traffic class,
    as NCCL_IB_TC) and UCX_IB_SL as NCCL_IB_SL: left to UCX's defaults (SL 0; class 0, or 106 where it picks by
    itself) MPI's RDMA can sit in another class, with no PFC behind it."""
    site = facts.site
    if site.network.fabric != "roce" or not site.node.gpus or site.env.get("NCCL_IB_DISABLE") == "1":
        return Verdict("SKIP", "no NCCL over RoCE")
    if "NCCL_IB_TC" not in site.env:
        return Verdict(
            "WARN",
            "NCCL on RoCE with no traffic class (NCCL_IB_TC, default 0): its RDMA goes in the lossy best-effort class",
            "set env NCCL_IB_TC (DSCP x 4, e.g. 106 for DSCP 26) and NCCL_IB_SL to the lossless class the switches use",
        )
    nccl = (site.env["NCCL_IB_TC"], site.env.get("NCCL_IB_SL", "0"))
    shown = f"NCCL_IB_TC={nccl[0]}, NCCL_IB_SL={nccl[1]}"
    if site.mca.get("pml") != "ucx":
        return Verdict("PASS", shown)
    ucx = (site.env.get("UCX_IB_TRAFFIC_CLASS"), site.env.get("UCX_IB_SL"))
    if ucx == nccl:
        return Verdict("PASS", f"{shown}, and UCX (pml ucx) the same")
    unset = " and ".join(n for n, v in zip(("UCX_IB_TRAFFIC_CLASS", "UCX_IB_SL"), ucx, strict=True) if v is None)
    return Verdict(
        "WARN",
        f"MPI's RDMA over UCX (pml ucx) is not in NCCL's class ({shown}): "
        + (f"{unset} unset, left to UCX's defaults" if unset else f"UCX_IB_TRAFFIC_CLASS={ucx[0]}, UCX_IB_SL={ucx[1]}"),
        f"set env UCX_IB_TRAFFIC_CLASS: {nccl[0]} and UCX_IB_SL: {nccl[1]}",
    )


@rule("ethernet-gpu-interface", needs=("site",))
def ethernet_gpu_interface(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """A GPU site on Ethernet names NCCL's interface: NCCL otherwise takes the first one up that is not lo or
    docker*, which may be the slow management network (or a libvirt bridge with the same address everywhere)."""
    site = facts.site
    if site.network.fabric != "ethernet" or not site.node.gpus:
        return Verdict("SKIP", "no GPU site on Ethernet")
    return _names_interface(
        site,
        "env.NCCL_SOCKET_IFNAME",
        "a GPU site on Ethernet names no interface: NCCL moves the gradients over the first one it finds up",
        "set network.interfaces to the data network (`ip -br addr` on a node; `hpcbundle site detect` proposes one)",
    )


@rule("oob-interfaces", needs=("site",))
def oob_interfaces(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """mpirun's daemons talk over named interfaces (oob_tcp_if_include, or network.interfaces): unconfined they
    try every interface up, and a libvirt/Docker bridge or an unrouted one hangs the job's wire-up.

    Which launchers start them is their row's openmpi_daemons (knowledge/launching.py)."""
    site = facts.site
    daemons = getattr(LAUNCHERS_KNOWN.get(site.launcher.name), "openmpi_daemons", False)
    if site.mpi.flavour != "openmpi" or not daemons or site.network.fabric == "loopback":
        return Verdict("SKIP", "no Open MPI daemons between nodes")
    return _names_interface(
        site,
        "mca.oob_tcp_if_include",
        "mpirun's daemons (oob) may use any interface: a bridge or an unrouted network hangs the wire-up",
        "set network.interfaces (it derives oob_tcp_if_include and btl_tcp_if_include)",
    )


def _names_interface(site: Site, key: str, unnamed: str, fix: str) -> Verdict:
    """PASS naming the interface setting `key` ('env.X' or 'mca.x') and where it came from, else WARN."""
    setting = interface_settings(site).get(key)
    if setting is None:
        return Verdict("WARN", unnamed, fix)
    return Verdict("PASS", f"{key.split('.', 1)[1]}={setting.value} (from {setting.source})")


@rule("nccl-hca-present", needs=("site", "nodes", "observed"))
def nccl_hca_present(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """The adapters NCCL_IB_HCA names exist on every node; a prefix is shown with what it matches there."""
    value = facts.site.env.get("NCCL_IB_HCA")
    if value is None or value.startswith("^"):
        return Verdict("SKIP", "no NCCL_IB_HCA list of adapters")
    if facts.scope == "login":
        return Verdict("SKIP", "checked on the compute nodes only")
    exact, names = value.startswith("="), [n.split(":")[0].strip() for n in value.lstrip("=").split(",") if n.strip()]
    devices = {host: node.get("infiniband", []) for host, node in facts.ok_nodes().items()}
    matched = {
        host: sorted(d for d in found if d in names or not exact and d.startswith(tuple(names)))
        for host, found in devices.items()
    }
    if exact:
        missing = {host: [n for n in names if n not in found] for host, found in devices.items()}
    else:
        missing = {host: names for host, found in matched.items() if not found}
    missing = {host: gone for host, gone in missing.items() if gone}
    if missing:
        shown = "; ".join(f"{host}: {', '.join(gone)}" for host, gone in missing.items())
        return Verdict(
            "FAIL",
            f"NCCL_IB_HCA={value} names adapters a node lacks ({shown}): NCCL_NET=IB fails there",
            "name the adapters `ibdev2netdev` lists on every node",
        )
    shown = "; ".join(f"{host}: {', '.join(found)}" for host, found in matched.items())
    if exact:
        return Verdict("PASS", f"NCCL_IB_HCA={value} on every node")
    return Verdict(
        "WARN",
        f"NCCL_IB_HCA={value} is a prefix and matches {shown}: a storage port among them carries NCCL's traffic too",
        f"name the compute adapters exactly: ={','.join(names)}_0,... (`ibdev2netdev` lists them)",
    )
