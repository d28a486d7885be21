"""Rules for the fabric: the interfaces a site names exist and carry TCP between the nodes, verbs where asked for,
and the Open MPI transport the site selects exists in the image."""

from __future__ import annotations

from ..config.fields import parse_version
from ..config.sites import Site, interface_settings
from .engine import Facts, Verdict, rule
from .knowledge import KnowledgeBase


def named_interfaces(site: Site) -> dict[str, list[str]]:
    """Interface name -> the site keys it comes from (see interface_settings: set, or derived from
    network.interfaces). Exclusion lists (^lo,docker0) and subnets are not names."""
    found: dict[str, list[str]] = {}
    for value, source in interface_settings(site).values():
        if not value or value.startswith("^"):
            continue
        for name in value.lstrip("=").split(","):
            name = name.strip()
            if name and "/" not in name and source not in found.get(name, []):
                found.setdefault(name, []).append(source)
    return found


@rule("openib-ucx", needs=("image", "site"))
def openib_ucx(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """A site that selects the openib btl needs an image whose Open MPI has it."""
    site, image = facts.site, facts.image
    if "openib" not in site.mca.get("btl", "").split(",") or image.get("mpi.flavour") != "openmpi":
        return Verdict("SKIP", "the site does not select the openib btl")
    version = image.get("mpi.version", "")
    if parse_version(version).major >= 5:
        return Verdict(
            "FAIL", f"the site selects the openib btl, which Open MPI {version} no longer has", "use pml ucx"
        )
    if image.get("ucx"):
        return Verdict(
            "WARN",
            "the site selects the openib btl but the image's Open MPI is built for UCX (no verbs btl)",
            "set the site's mca to pml: ucx and drop btl: openib",
        )
    return Verdict("PASS", "the image's Open MPI 4 keeps the openib btl")


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

    Verbs are asked for by the openib btl, UCX, NCCL_IB_HCA or fabric: infiniband.
    """
    site = facts.site
    asks = [
        k
        for k, on in (
            ("mca.btl=openib", "openib" in site.mca.get("btl", "").split(",")),
            ("mca.pml=ucx", site.mca.get("pml") == "ucx"),
            ("env.NCCL_IB_HCA", "NCCL_IB_HCA" in site.env),
            ("network.fabric=infiniband", site.network.fabric == "infiniband"),
        )
        if on
    ]
    if not asks:
        return Verdict("SKIP", "the site does not ask for verbs (openib, UCX, NCCL_IB_HCA, fabric infiniband)")
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
