"""Rules for the nodes themselves: every node answered the probe, and the planned ranks fit each node."""

from __future__ import annotations

from typing import Any, Mapping

from .engine import Facts, Verdict, rule
from .knowledge import KnowledgeBase


@rule("node-probe", needs=("nodes", "observed"))
def node_probe(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """Every node answered the probe (through the site's rsh agent or ssh)."""
    bad = {host: node["error"] for host, node in (facts.nodes or {}).items() if "error" in node}
    if bad:
        return Verdict(
            "FAIL",
            "; ".join(f"{h}: {e}" for h, e in bad.items()),
            "check that the host name resolves and the launcher's agent (plm_rsh_agent or ssh) reaches it",
        )
    return Verdict("PASS", f"answered: {', '.join(facts.nodes or {})}")


@rule("oversubscription", needs=("site", "nodes", "hosts"))
def oversubscription(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """Ranks per node fit the node's GPUs (NCCL refuses two ranks on one GPU) and cores."""
    hosts, site, nodes = facts.hosts or {}, facts.site, facts.nodes or {}
    if not hosts:
        return [Verdict("SKIP", "no --hosts: ranks per node unknown")]
    verdicts = []
    gpus = {h: _gpus(nodes.get(h, {}), site.node.gpus) for h in hosts}
    over = {h: r for h, r in hosts.items() if gpus[h] and r > gpus[h]}
    if over:
        verdicts.append(
            Verdict(
                "FAIL",
                ", ".join(f"{r} ranks on {h} but {gpus[h]} GPUs there" for h, r in over.items())
                + " (NCCL refuses two ranks on one GPU: ncclCommInitRank failed: invalid usage)",
                f"at most {min(gpus[h] for h in over)} ranks per node (one per GPU)",
            )
        )
    cores = {h: r for h, r in hosts.items() if "cpus" in nodes.get(h, {}) and r > nodes[h]["cpus"]}
    if cores:
        evidence = ", ".join(f"{r} ranks on {h} ({nodes[h]['cpus']} CPUs)" for h, r in cores.items())
        if site.launcher.oversubscribe:
            verdicts.append(
                Verdict("WARN", evidence + "; launcher.oversubscribe is on", "fewer ranks per node run faster")
            )
        else:
            verdicts.append(
                Verdict(
                    "FAIL",
                    evidence + "; mpirun refuses more ranks than slots",
                    "lower the slots in --hosts or set launcher.oversubscribe",
                )
            )
    return verdicts or [Verdict("PASS", ", ".join(f"{r} ranks on {h}" for h, r in hosts.items()) + ": they fit")]


def _gpus(node: Mapping[str, Any], declared: int) -> int:
    """GPUs on a node: the ones observed there, else the ones the site declares."""
    gpu = node.get("gpu") or {}
    return len(gpu.get("gpus", [])) if gpu.get("present") else declared
