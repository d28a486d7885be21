"""Rules for the nodes themselves: every node answered the probe, and the planned ranks fit each node."""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..config.sites import Site
from ..knowledge.bind import BIND_NAME, BIND_PATH, bind_place
from ..knowledge.compat import KnowledgeBase
from .engine import Facts, Status, Verdict, rule


@rule("node-reach", needs=("observed",))
def node_reach(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """Every node answered the probe (through the site's rsh agent or ssh); one FAIL per node that did not.

    How it failed comes from the agent (diagnose/fanout.py unreached): no route, connection refused,
    timed out, auth, name. The other rules judge the nodes that answered and SKIP the others.
    """
    verdicts = []
    for host, node in (facts.nodes or {}).items():
        if "error" not in node:
            continue
        if node.get("unreached"):
            fix = f"check that {host} is up and reachable: ssh -o BatchMode=yes {host} true"
        else:
            fix = f"{host} answered but the probe failed there: check python3 and hpcbundle on its PATH"
        verdicts.append(Verdict("FAIL", node["error"], fix, subject=host))
    return verdicts or [Verdict("PASS", f"answered: {', '.join(facts.nodes or {})}")]


@rule(
    "ranks-per-node",
    needs=("site", "nodes"),
    superseded_by=("hosts-launcher", "elastic-hosts", "elastic-np", "np-one-node"),
)
def ranks_per_node(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The ranks each node gets fit it: one per GPU (NCCL refuses two on one; fewer leave GPUs idle), and its CPUs.

    FAIL over the GPUs, WARN under them; FAIL over what a CPU node takes, WARN with launcher.oversubscribe.

    The ranks per node are the planned launch's (--hosts, a repeated host's slots added up, or --hostfile,
    filled by slot; every rank on this node; sbatch --tasks-per-node; doctor --hosts), else the site's
    node.ranks_per_node. A declared node takes node.ranks_per_node (where below node.cores), else
    node.cores ranks; an observed one its CPUs.
    """
    site, nodes = facts.site, facts.nodes or {}
    per_node = site.node.ranks_per_node
    hosts = facts.hosts or ({host: per_node for host in nodes} if per_node else {})
    if not hosts:
        return [Verdict("SKIP", "no hosts given and no node.ranks_per_node: the ranks per node are not known")]
    declared = next(iter(nodes.values()), {})
    node_of = {h: nodes.get(h, {}) if facts.observed else nodes.get(h, declared) for h in hosts}
    gpus = {h: _gpus(node_of[h], site.node.gpus) for h in hosts}
    flag = _ranks_flag(facts)
    there = {
        h: f"{gpus[h]} GPUs there" if facts.observed else f"site {site.name} nodes have {gpus[h]} GPUs" for h in hosts
    }
    over = [(h, r, there[h]) for h, r in hosts.items() if gpus[h] and r > gpus[h]]
    under = [(h, r, there[h]) for h, r in hosts.items() if gpus[h] and r < gpus[h]]
    cpus = {h: _cpu_limit(site, node_of[h], facts.observed) for h in hosts if not gpus[h]}
    crowded = [(h, r, cpus[h][1]) for h, r in hosts.items() if h in cpus and cpus[h][0] and r > cpus[h][0]]
    verdicts = []
    if over:
        most = min(gpus[h] for h, _, _ in over)
        consequence = 'NCCL refuses two ranks on one GPU (invalid usage: "Duplicate GPU detected")'
        verdicts.append(_mismatch("FAIL", over, consequence, f"give at most {most} ranks per node, one per GPU", flag))
    if crowded and site.launcher.oversubscribe:
        verdicts.append(_mismatch("WARN", crowded, "launcher.oversubscribe is on", "fewer ranks per node run faster"))
    elif crowded:
        most = min(cpus[h][0] or 0 for h, _, _ in crowded)
        fix = f"give at most {most} ranks per node, or raise node.ranks_per_node or set launcher.oversubscribe"
        verdicts.append(_mismatch("FAIL", crowded, "more ranks than the node takes", fix, flag))
    if under:
        fix = f"one rank per GPU: {max(gpus.values())} ranks per node"
        verdicts.append(_mismatch("WARN", under, "the other GPUs stay idle", fix))
    return verdicts or [Verdict("PASS", ", ".join(f"{r} ranks on {h}" for h, r in hosts.items()) + ": they fit")]


def _mismatch(status: Status, found: list[tuple[str, int, str]], consequence: str, fix: str, flag: str = "") -> Verdict:
    """One verdict over the hosts whose ranks do not fit: `N ranks on HOST but LIMIT, ...: consequence`."""
    limits = {limit for _, _, limit in found}
    if len(limits) == 1:  # declared nodes: one limit for all
        evidence = ", ".join(f"{ranks} ranks on {host}" for host, ranks, _ in found[:3])
        evidence += (", ..." if found[3:] else "") + f" but {limits.pop()}"
    else:
        evidence = ", ".join(f"{ranks} ranks on {host} but {limit}" for host, ranks, limit in found[:3])
        evidence += ", ..." if found[3:] else ""
    evidence += f": {consequence}"
    return Verdict(status, evidence, fix, key=flag, flag=bool(flag))


def _ranks_flag(facts: Facts) -> str:
    """The part of the request that placed the ranks, for the one line a refused launch prints."""
    request = facts.request
    if request is None:
        return "node.ranks_per_node" if facts.site.node.ranks_per_node else ""
    if request.hosts:
        return "--hosts " + ",".join(f"{host}:{slots}" for host, slots in request.hosts)
    if request.hostfile:
        return f"--hostfile {request.hostfile}"
    if request.tasks_per_node:
        return f"--tasks-per-node {request.tasks_per_node}"
    return f"--np {request.np}" if request.np else ""


def _cpu_limit(site: Site, node: Mapping[str, Any], observed: bool) -> tuple[int | None, str]:
    """The most ranks a CPU node takes and why (None: not judged: observed without a CPU count, or
    declared on a site that oversubscribes)."""
    if observed:
        return node.get("cpus"), f"{node.get('cpus')} CPUs there"
    declared = site.node
    if site.launcher.oversubscribe:
        return None, "launcher.oversubscribe"
    if declared.ranks_per_node and declared.ranks_per_node < declared.cores:
        return declared.ranks_per_node, f"site {site.name} runs node.ranks_per_node {declared.ranks_per_node}"
    return declared.cores, f"site {site.name} nodes have {declared.cores} cores (node.cores)"


def _gpus(node: Mapping[str, Any], declared: int) -> int:
    """GPUs on a node: the ones observed there, else the ones the site declares."""
    gpu = node.get("gpu") or {}
    return len(gpu.get("gpus", [])) if gpu.get("present") else declared


MAX_NUMA_NODES = 1024  # numactl node lists beyond this are not judged (a Linux kernel has at most 1024)
NUMACTL_MEMORY = {"-p": "--preferred", "-m": "--membind", "-i": "--interleave"}


def numactl_memory_nodes(wrapper: list[str]) -> list[tuple[str, list[int]]]:
    """The memory NUMA nodes a numactl wrapper asks for, as (option, nodes)::

    >>> numactl_memory_nodes(["numactl", "-p", "1"]), numactl_memory_nodes(["numactl", "--membind=0,2-3", "-C", "0"])
    ([('-p', [1])], [('--membind', [0, 2, 3])])

    Node lists numactl spells in other ways (all, +1, !0) are left out.
    """
    if not wrapper or wrapper[0].rsplit("/", 1)[-1] != "numactl":
        return []
    found, words = [], wrapper[1:]
    for index, word in enumerate(words):
        option, value = word, None
        if word.startswith("--") and "=" in word:
            option, value = word.split("=", 1)
        elif word[:2] in NUMACTL_MEMORY and len(word) > 2:
            option, value = word[:2], word[2:]
        if option not in NUMACTL_MEMORY and option not in NUMACTL_MEMORY.values():
            continue
        if value is None:
            value = words[index + 1] if index + 1 < len(words) else ""
        nodes = _node_list(value)
        if nodes:
            found.append((option, nodes))
    return found


def _node_list(text: str) -> list[int]:
    """'1' -> [1]; '0,2-3' -> [0, 2, 3]; anything else (or more than MAX_NUMA_NODES) -> []."""
    nodes: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if not re.fullmatch(r"[0-9]{1,4}", low) or (high and not re.fullmatch(r"[0-9]{1,4}", high)):
            return []
        nodes += range(int(low), int(high or low) + 1)
        if len(nodes) > MAX_NUMA_NODES:
            return []
    return nodes


@rule("numa-memory", needs=("site", "nodes"))
def numa_memory(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A numactl wrapper's memory nodes (-p/--preferred, -m/--membind, -i/--interleave) exist and have memory.

    On KNL in cache mode MCDRAM is a cache, not NUMA node 1, so `numactl -p 1` fails there
    ("node argument 1 is out of range"). The nodes come from /sys/devices/system/node (doctor) or
    node.numa_memory (check).
    """
    site = facts.site
    asked = [(i, option, nodes) for i, w in enumerate(site.wrappers) for option, nodes in numactl_memory_nodes(w)]
    if not asked:
        return [Verdict("SKIP", "no numactl memory policy in the site's wrappers")]
    if facts.scope == "login":
        return [Verdict("SKIP", "NUMA nodes are checked on the compute nodes only")]
    known = {h: n["numa"] for h, n in facts.ok_nodes().items() if n.get("numa")}
    verdicts = []
    for index, option, nodes in asked:
        wrapper = f"wrappers[{index}] numactl {option}"
        if not known:
            where = "the nodes did not report /sys/devices/system/node" if facts.observed else "no node.numa_memory"
            verdicts.append(Verdict("SKIP", f"{wrapper} {nodes}: {where}"))
            continue
        bad = {h: [n for n in nodes if numa.get(str(n), 0) == 0] for h, numa in known.items()}
        bad = {h: missing for h, missing in bad.items() if missing}
        if not bad:
            verdicts.append(Verdict("PASS", f"{wrapper}: NUMA node(s) {nodes} have memory{facts.on(known)}"))
            continue
        host, missing = next(iter(bad.items()))
        have = [int(n) for n, memory in sorted(known[host].items()) if memory != 0]
        source = facts.on(bad) or " (node.numa_memory)"
        verdicts.append(
            Verdict(
                "FAIL",
                f"{wrapper} asks for NUMA node {','.join(map(str, missing))}, but only node(s) "
                f"{','.join(map(str, have))} have memory{source}: numactl fails before the program starts "
                "(KNL in cache mode has no MCDRAM node)",
                "drop the numactl wrapper, or run in a partition whose nodes have that NUMA node "
                "(e.g. KNL flat-quadrant) and declare it in node.numa_memory",
            )
        )
    return verdicts


@rule("bind-tool", needs=("site", "nodes"))
def bind_tool(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """hpcbundle-bind (node.gpu_numa's wrapper) is where the line runs it: in the image, inline, or on each host.

    Inside an image built here (each carries it), as its own text inline (nothing installed), or on every node's
    host where node.host_bind says so: there doctor looks on every node (the batch script on its first), since a
    missing one fails every rank's exec.
    """
    site = facts.site
    if not site.node.gpu_numa:
        return Verdict("SKIP", "the site has no node.gpu_numa (no placement wrapper)")
    request = facts.request
    if request is not None and request.wiring == "torchrun":
        return Verdict("SKIP", "under --torchrun no placement wrapper runs (it would bind the node's one agent)")
    image = request.image is not None if request is not None else bool(facts.image_path or facts.recipe)
    place = bind_place(site, image)
    if place == "image":
        return Verdict("PASS", f"{BIND_NAME} runs inside the image, which carries it at {BIND_PATH}: hosts need none")
    if place == "inline":
        return Verdict("PASS", f"{BIND_NAME} runs as its own text inline (sh -c): nothing to install")
    if not facts.observed:
        return Verdict(
            "PASS",
            f"{BIND_NAME} runs on the host, which the site says every node has (node.host_bind): doctor looks on "
            "every node, the batch script on its first",
        )
    seen = {host: node.get("bind") for host, node in facts.ok_nodes().items()}
    missing = [host for host, path in seen.items() if not path]
    if missing:
        return Verdict(
            "WARN" if facts.scope == "login" else "FAIL",
            f"{BIND_NAME} is not on PATH on {', '.join(missing)}, where node.host_bind runs it on the host: "
            "every rank there fails to exec",
            f"run `make install-bind PREFIX=/usr/local` as root on those nodes, or drop node.host_bind from "
            f"{site.where} (the wrapper then runs inside the image)",
        )
    paths = sorted(set(filter(None, seen.values())))
    return Verdict("PASS", f"{BIND_NAME} on the host at {', '.join(paths)}{facts.on(seen)}")
