"""`hpcbundle doctor`: judge observed facts against a site and an image, one check per rule (pure).

The facts come from hpcbundle.diagnose.probes (run on every node); each registered check turns them into
Results with PASS / WARN / FAIL / SKIP, the evidence seen and the fix. For example::

    >>> results = diagnose(Facts(site=site, nodes={"node1": probe}, reach={}))      # doctest: +SKIP
    >>> [r.line() for r in results if r.status == "FAIL"]                          # doctest: +SKIP
    ['FAIL  interface mgmt0 reach  node2 -> node1 10.78.0.1: no answer within 3 s  (...)']

Exit status of the command: 0 when nothing warns or fails, 1 with a WARN, 2 with a FAIL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from ..config.fields import major_minor, parse_version
from ..config.sites import Site
from ..launch import RUNTIMES
from ..rules.knowledge import KnowledgeBase, knowledge_base

Status = Literal["PASS", "WARN", "FAIL", "SKIP"]
_RANK = {"PASS": 0, "SKIP": 0, "WARN": 1, "FAIL": 2}
# Site keys that name network interfaces, and how each lists them.
IFACE_KEYS = ("network.interfaces", "mca.btl_tcp_if_include", "mca.oob_tcp_if_include",
              "env.NCCL_SOCKET_IFNAME", "env.GLOO_SOCKET_IFNAME", "env.HOROVOD_GLOO_IFACE")


@dataclass(frozen=True)
class Result:
    """One check's outcome: Result('interface data0', 'PASS', 'up on node1, node2 (10.77.0.1, ...)')."""

    check: str
    status: Status
    evidence: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.status:<4}  {self.check:<24} {self.evidence}" + (f"  ({self.fix})" if self.fix else "")


@dataclass
class Facts:
    """What was observed. `nodes`: host -> probes.facts() output (or {'error': why});
    `reach`: interface -> list of (from_host, to_host, address, 'ok' or the error);
    `hosts`: the --hosts slots (host -> ranks) when given."""

    site: Site
    nodes: dict[str, dict[str, Any]]
    reach: dict[str, list[tuple[str, str, str, str]]] = field(default_factory=dict)
    image: str | None = None
    hosts: dict[str, int] = field(default_factory=dict)
    checksum: bool = False
    scope: Literal["nodes", "login"] = "nodes"


Check = Callable[[Facts, KnowledgeBase], list[Result]]
CHECKS: list[Check] = []


def check(function: Check) -> Check:
    """Register a check (runs in registration order)."""
    CHECKS.append(function)
    return function


def diagnose(facts: Facts, kb: KnowledgeBase | None = None, only: set[str] | None = None) -> list[Result]:
    """Run every registered check (or those whose function name is in `only`)."""
    kb = kb or knowledge_base()
    return [result for fn in CHECKS if only is None or fn.__name__ in only for result in fn(facts, kb)]


def exit_status(results: list[Result]) -> int:
    """0 all PASS/SKIP, 1 any WARN, 2 any FAIL."""
    return max((_RANK[r.status] for r in results), default=0)


def named_interfaces(site: Site) -> dict[str, list[str]]:
    """Interface name -> the site keys naming it. Exclusion lists (^lo,docker0) and subnets are not names."""
    values = {"network.interfaces": ",".join(site.network.interfaces)}
    values |= {f"mca.{k}": v for k, v in site.mca.items() if f"mca.{k}" in IFACE_KEYS}
    values |= {f"env.{k}": v for k, v in site.env.items() if f"env.{k}" in IFACE_KEYS}
    found: dict[str, list[str]] = {}
    for key, value in values.items():
        if not value or value.startswith("^"):
            continue
        for name in value.lstrip("=").split(","):
            name = name.strip()
            if name and "/" not in name:
                found.setdefault(name, []).append(key)
    return found


def _ok_nodes(facts: Facts) -> dict[str, dict[str, Any]]:
    return {host: node for host, node in facts.nodes.items() if "error" not in node}


def image_metadata(facts: Facts) -> tuple[dict[str, str] | None, str]:
    """The image's labels (from its manifest) as seen on the first node that has them, and where from."""
    for host, node in _ok_nodes(facts).items():
        img = node.get("image") or {}
        manifest = img.get("manifest")
        if manifest:
            labels = dict(manifest.get("labels") or {})
            recipe = manifest.get("recipe") or {}
            mpi, gpu = recipe.get("mpi") or {}, recipe.get("gpu") or {}
            labels.setdefault("org.hpcbundle.mpi.flavour", mpi.get("flavour", ""))
            labels.setdefault("org.hpcbundle.mpi.version", mpi.get("version", ""))
            if gpu:
                labels.setdefault("org.hpcbundle.cuda", gpu.get("cuda", ""))
                labels.setdefault("org.hpcbundle.gpu-archs", ",".join(gpu.get("archs", [])))
            return {k.removeprefix("org.hpcbundle."): str(v) for k, v in labels.items()}, f"{img['path']}/etc/hpcbundle/manifest.json on {host}"
    return None, ""


# ----------------------------------------------------------------------------------- checks
@check
def probes(facts: Facts, kb: KnowledgeBase) -> list[Result]:
    """Every node answered the probe (through the site's rsh agent or ssh)."""
    bad = {host: node["error"] for host, node in facts.nodes.items() if "error" in node}
    if bad:
        return [Result("node probe", "FAIL", "; ".join(f"{h}: {e}" for h, e in bad.items()),
                       "check that the host name resolves and the launcher's agent (plm_rsh_agent or ssh) reaches it")]
    return [Result("node probe", "PASS", f"answered: {', '.join(facts.nodes)}")]


@check
def runtime(facts: Facts, kb: KnowledgeBase) -> list[Result]:
    """The site's container runtime is installed on every node."""
    name = facts.site.container.runtime
    if name == "none":
        return [Result("container runtime", "SKIP", "container.runtime: none (the host's own software)")]
    command = facts.site.container.command or getattr(RUNTIMES.get(name), "command", name)
    missing = [h for h, n in _ok_nodes(facts).items() if name not in n.get("runtimes", {})]
    if missing:
        return [Result("container runtime", "WARN" if facts.scope == "login" else "FAIL", f"`{command} --version` fails or is not on PATH on {', '.join(missing)}",
                       f"install {name} there or set container.runtime/command in the site")]
    versions = sorted({n["runtimes"][name] for n in _ok_nodes(facts).values()})
    return [Result("container runtime", "PASS" if len(versions) == 1 else "WARN", f"{name}: {' | '.join(versions)}",
                   "" if len(versions) == 1 else "install the same version on every node")]


@check
def image(facts: Facts, kb: KnowledgeBase) -> list[Result]:
    """The image exists at the same path on every node, with the same checksum."""
    if not facts.image:
        return [Result("image present", "SKIP", "no --image: the program runs on the host")]
    seen = {h: n.get("image") or {} for h, n in _ok_nodes(facts).items()}
    engine = facts.site.container.runtime in ("docker", "podman")
    if seen and (engine and not any(i.get("exists") for i in seen.values()) or all(i.get("kind") == "name" for i in seen.values())):
        return [Result("image present", "SKIP", f"{facts.image} is not a path (a registry/Docker name): not checked")]
    missing = [h for h, i in seen.items() if not i.get("exists")]
    if missing:
        return [Result("image present", "WARN" if facts.scope == "login" else "FAIL", f"{facts.image} does not exist on {', '.join(missing)}",
                       "copy the image to the same path on every node (or put it on a shared file system)")]
    if not facts.checksum:
        return [Result("image present", "PASS", f"{facts.image} exists on {', '.join(seen)} (checksum not compared)")]
    sums: dict[str, list[str]] = {}
    for host, info in seen.items():
        sums.setdefault(info.get("sha256", "?"), []).append(host)
    if len(sums) > 1:
        detail = "; ".join(f"sha256 {s[:12]}… on {', '.join(h)}" for s, h in sums.items())
        return [Result("image checksum", "FAIL", f"{facts.image} differs between nodes: {detail}",
                       "copy the same image to every node (rsync/cp from one source) and compare with sha256sum")]
    return [Result("image checksum", "PASS", f"{facts.image}: sha256 {next(iter(sums))[:12]}… on {', '.join(seen)}")]


@check
def metadata(facts: Facts, kb: KnowledgeBase) -> list[Result]:
    """The image's recipe metadata can be read (directory images hold /etc/hpcbundle/manifest.json)."""
    if not facts.image:
        return []
    labels, where = image_metadata(facts)
    if labels is not None:
        return [Result("image metadata", "PASS", f"read {where}")]
    infos = [n.get("image") or {} for n in _ok_nodes(facts).values()]
    kinds = {i.get("kind") for i in infos if i.get("exists")}
    errors = [i["manifest_error"] for i in infos if i.get("manifest_error")]
    if "file" in kinds:
        return [Result("image metadata", "WARN", f"{facts.image} is a file image (.sif/SquashFS) that doctor cannot open here: MPI and CUDA of the image unchecked",
                       "run `singularity inspect --labels IMAGE` (org.hpcbundle.* labels) or give the image as a directory")]
    if errors:
        return [Result("image metadata", "WARN", errors[0], "the image was not built by hpcbundle, or its manifest is damaged")]
    return []


@check
def host_mpi(facts: Facts, kb: KnowledgeBase) -> list[Result]:
    """The host MPI on every node is the one the site names."""
    site = facts.site.mpi
    found = {h: n.get("mpi") for h, n in _ok_nodes(facts).items()}
    absent = [h for h, m in found.items() if not m]
    if absent and facts.scope == "login":
        return [Result("host MPI", "SKIP", "no mpirun/mpiexec on this login node: checked in the job (after its modules load)")]
    if absent:
        return [Result("host MPI", "FAIL", f"no mpirun/mpiexec on PATH on {', '.join(absent)}",
                       f"load the MPI module or install {site.flavour} {site.version}")]
    wrong = {h: m for h, m in found.items() if m["flavour"] != site.flavour}
    if wrong:
        h, m = next(iter(wrong.items()))
        return [Result("host MPI", "FAIL", f"{h}: {m['evidence']}; the site says {site.flavour} {site.version}",
                       "fix mpi.flavour/version in the site or put the right MPI first on PATH")]
    versions = sorted({m["version"] for m in found.values()})
    if versions != [site.version]:
        return [Result("host MPI", "WARN", f"{', '.join(versions)} found; the site says {site.flavour} {site.version}",
                       f"set mpi.version: \"{versions[0]}\" in the site (or load that version)")]
    return [Result("host MPI", "PASS", f"{site.flavour} {site.version} on {', '.join(found)}")]


@check
def mpi_abi(facts: Facts, kb: KnowledgeBase) -> list[Result]:
    """The host MPI launches ranks that load the image's MPI: same ABI family (Open MPI: same major.minor)."""
    if not facts.image:
        return []
    labels, where = image_metadata(facts)
    if not labels or not labels.get("mpi.flavour"):
        return [Result("MPI ABI host/image", "SKIP", "image MPI unknown (see image metadata)")]
    host_nodes = [n["mpi"] for n in _ok_nodes(facts).values() if n.get("mpi")]
    host = host_nodes[0] if host_nodes else {"flavour": facts.site.mpi.flavour, "version": facts.site.mpi.version}
    iflav, iver = labels["mpi.flavour"], labels.get("mpi.version", "")
    habi, iabi = kb.mpi_abi.get(host["flavour"]), kb.mpi_abi.get(iflav)
    evidence = f"host {host['flavour']} {host['version']}; image {iflav} {iver} ({where})"
    if habi is None or iabi is None or habi.family != iabi.family:
        return [Result("MPI ABI host/image", "FAIL", f"{evidence}: different ABI families",
                       "use an image built with the host's MPI family, or a site whose host MPI matches the image")]
    if habi.family == "by_major_minor" and major_minor(host["version"]) != major_minor(iver):
        return [Result("MPI ABI host/image", "FAIL", f"{evidence}: Open MPI {major_minor(host['version'])} and {major_minor(iver)} are different series",
                       f"rebuild the image with Open MPI {major_minor(host['version'])}.x (recipe mpi.version) or load Open MPI {major_minor(iver)} on the host")]
    return [Result("MPI ABI host/image", "PASS", f"{evidence}: one ABI")]


@check
def interfaces(facts: Facts, kb: KnowledgeBase) -> list[Result]:
    """Every interface the site names exists and is up on every node, and carries TCP between the nodes."""
    named = named_interfaces(facts.site)
    if not named:
        return [Result("interfaces", "SKIP", "the site names no interface (network.interfaces, btl/oob_tcp_if_include, NCCL_SOCKET_IFNAME, HOROVOD_GLOO_IFACE)")]
    if facts.scope == "login":
        return [Result("interfaces", "SKIP", f"{', '.join(named)}: checked on the compute nodes only (run `hpcbundle doctor --hosts ...` in the job)")]
    results = []
    for name, keys in named.items():
        label, nodes = f"interface {name}", _ok_nodes(facts)
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
            results.append(Result(label, "FAIL", f"no interface {name} on {', '.join(missing)} (named by {', '.join(keys)}; the nodes have {', '.join(have)})",
                                  f"name an interface the nodes have in {keys[0]} (`ip -br addr` on a node; `hpcbundle site detect` proposes one)"))
            continue
        if down or noaddr:
            what = f"down on {', '.join(down)}" if down else f"no IPv4 address on {', '.join(noaddr)}"
            results.append(Result(label, "FAIL", f"{name} is {what}", f"bring it up or name another interface in {keys[0]}"))
            continue
        results.append(Result(label, "PASS", f"up on {'; '.join(addrs)}"))
        probes_ = facts.reach.get(name)
        if probes_ is None:
            if len(nodes) > 1:
                results.append(Result(f"{label} reach", "SKIP", "TCP probe not run"))
            continue
        failed = [(a, b, addr, why) for a, b, addr, why in probes_ if why != "ok"]
        if failed:
            shown = "; ".join(f"{a} -> {b} {addr}: {why}" for a, b, addr, why in failed[:4])
            more = f" (+{len(failed) - 4} more)" if len(failed) > 4 else ""
            results.append(Result(f"{label} reach", "FAIL",
                                  f"{len(failed)} of {len(probes_)} TCP connections over {name} failed: {shown}{more}; MPI would hang here",
                                  f"{name} does not carry traffic between the nodes: name the data interface in {', '.join(keys)}"))
        else:
            results.append(Result(f"{label} reach", "PASS", f"{len(probes_)} of {len(probes_)} TCP connections between {len(nodes)} nodes over {name}"))
    return results


@check
def infiniband(facts: Facts, kb: KnowledgeBase) -> list[Result]:
    """InfiniBand devices are present where the site asks for verbs (openib btl, UCX, NCCL_IB_HCA, fabric infiniband)."""
    site = facts.site
    asks = [k for k, on in (("mca.btl=openib", "openib" in site.mca.get("btl", "").split(",")),
                            ("mca.pml=ucx", site.mca.get("pml") == "ucx"),
                            ("env.NCCL_IB_HCA", "NCCL_IB_HCA" in site.env),
                            ("network.fabric=infiniband", site.network.fabric == "infiniband")) if on]
    if not asks:
        return [Result("InfiniBand", "SKIP", "the site does not ask for verbs (openib, UCX, NCCL_IB_HCA, fabric infiniband)")]
    if facts.scope == "login":
        return [Result("InfiniBand", "SKIP", "checked on the compute nodes only")]
    without = [h for h, n in _ok_nodes(facts).items() if not n.get("infiniband")]
    if without:
        return [Result("InfiniBand", "FAIL", f"{', '.join(asks)} but /sys/class/infiniband is empty on {', '.join(without)}",
                       "run on nodes with HCAs (partition/constraint) or switch the site to TCP (btl self,tcp)")]
    devices = sorted({d for n in _ok_nodes(facts).values() for d in n["infiniband"]})
    return [Result("InfiniBand", "PASS", f"{', '.join(devices)} on every node ({', '.join(asks)})")]


def _gpu_nodes(facts: Facts) -> tuple[dict[str, dict], list[Result]]:
    nodes = _ok_nodes(facts)
    with_gpu = {h: n["gpu"] for h, n in nodes.items() if (n.get("gpu") or {}).get("present")}
    if not with_gpu:
        notes = sorted({(n.get("gpu") or {}).get("note", "") for n in nodes.values()} - {""})
        return {}, [Result("GPU", "SKIP" if not facts.site.node.gpus else "FAIL",
                           f"no GPU on {', '.join(nodes) or 'this node'} ({'; '.join(notes) or 'nvidia-smi reports none'})",
                           "" if not facts.site.node.gpus else f"the site says node.gpus: {facts.site.node.gpus}: run on GPU nodes")]
    return with_gpu, []


@check
def gpu_driver(facts: Facts, kb: KnowledgeBase) -> list[Result]:
    """The node's NVIDIA driver is new enough for the image's CUDA."""
    with_gpu, skip = _gpu_nodes(facts)
    if skip:
        return skip
    labels, _ = image_metadata(facts)
    cuda = (labels or {}).get("cuda")
    if not cuda:
        return [Result("GPU driver/CUDA", "SKIP", "image CUDA unknown (no image, a CPU image, or no metadata)")]
    floor = kb.cuda_driver.get(major_minor(cuda))
    if floor is None:
        return [Result("GPU driver/CUDA", "WARN", f"CUDA {cuda} is not in the knowledge base", "add it to compat.yaml cuda_driver")]
    old = {h: g["driver"] for h, g in with_gpu.items() if parse_version(g["driver"]) < parse_version(floor.minor_compat)}
    if old:
        return [Result("GPU driver/CUDA", "FAIL", f"driver {', '.join(f'{v} on {h}' for h, v in old.items())} < {floor.minor_compat} needed by CUDA {cuda}",
                       "update the driver or use an image with an older CUDA")]
    return [Result("GPU driver/CUDA", "PASS", f"driver {', '.join(sorted({g['driver'] for g in with_gpu.values()}))} runs CUDA {cuda} (>= {floor.minor_compat})")]


@check
def gpu_arch(facts: Facts, kb: KnowledgeBase) -> list[Result]:
    """The GPU's compute capability is among the image's archs (same major, minor >= built)."""
    with_gpu, skip = _gpu_nodes(facts)
    if skip:
        return []
    labels, _ = image_metadata(facts)
    archs = [a for a in (labels or {}).get("gpu-archs", "").split(",") if a]
    if not archs:
        return [Result("GPU arch", "SKIP", "image GPU archs unknown")]
    caps = sorted({g["capability"] for n in with_gpu.values() for g in n["gpus"] if g.get("capability")})
    bad = [c for c in caps if not any(a.split(".")[0] == c.split(".")[0] and int(a.split(".")[1]) <= int(c.split(".")[1]) for a in archs)]
    if bad:
        return [Result("GPU arch", "FAIL", f"GPU compute capability {', '.join(bad)}; the image builds {', '.join(archs)}", f"rebuild with {bad[0]} in gpu.archs")]
    return [Result("GPU arch", "PASS", f"compute capability {', '.join(caps)} covered by {', '.join(archs)}")]


@check
def userns_cma(facts: Facts, kb: KnowledgeBase) -> list[Result]:
    """Open MPI 4 vader single-copy (CMA) hangs across user namespaces unless switched off."""
    site = facts.site
    rt = RUNTIMES.get(site.container.runtime)
    labels, _ = image_metadata(facts)
    flavour = (labels or {}).get("mpi.flavour") or site.mpi.flavour
    version = (labels or {}).get("mpi.version") or site.mpi.version
    if rt is None or not rt.in_user_namespace(site) or flavour != "openmpi" or parse_version(version).major >= 5:
        return [Result("userns + CMA", "SKIP", "no Open MPI 4 inside a user-namespace runtime")]
    if site.mca.get("btl_vader_single_copy_mechanism") == "none":
        return [Result("userns + CMA", "PASS", f"{rt.name} uses user namespaces; the site sets btl_vader_single_copy_mechanism none")]
    return [Result("userns + CMA", "WARN", f"{rt.name} runs each rank in its own user namespace; Open MPI {major_minor(version)}'s vader CMA single-copy hangs large messages there",
                   "add `btl_vader_single_copy_mechanism: none` to the site's mca")]


@check
def oversubscription(facts: Facts, kb: KnowledgeBase) -> list[Result]:
    """Ranks per node fit the node's cores (and GPUs)."""
    if not facts.hosts:
        return [Result("oversubscription", "SKIP", "no --hosts: ranks per node unknown")]
    results = []
    gpus = facts.site.node.gpus
    over = {h: r for h, r in facts.hosts.items() if gpus and r > gpus}
    if over:
        results.append(Result("oversubscription", "FAIL", f"{', '.join(f'{r} ranks on {h}' for h, r in over.items())} but {gpus} GPUs per node",
                              f"at most {gpus} ranks per node (one per GPU)"))
    nodes = facts.nodes
    cores = {h: r for h, r in facts.hosts.items() if "cpus" in nodes.get(h, {}) and r > nodes[h]["cpus"]}
    if cores:
        evidence = ", ".join(f"{r} ranks on {h} ({nodes[h]['cpus']} CPUs)" for h, r in cores.items())
        if facts.site.launcher.oversubscribe:
            results.append(Result("oversubscription", "WARN", evidence + "; launcher.oversubscribe is on", "fewer ranks per node run faster"))
        else:
            results.append(Result("oversubscription", "FAIL", evidence + "; mpirun refuses more ranks than slots", "lower the slots in --hosts or set launcher.oversubscribe"))
    return results or [Result("oversubscription", "PASS", ", ".join(f"{r} on {h}" for h, r in facts.hosts.items()) + " ranks fit")]
