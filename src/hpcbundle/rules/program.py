"""Rules for the program's environment: every rank starts the same interpreter and modules as the launching node."""

from __future__ import annotations

from typing import Any, Mapping

from ..knowledge.compat import KnowledgeBase
from .engine import Facts, Verdict, rule


def _describe(facts: Mapping[str, Any]) -> str:
    """'/venv/bin/python3 (horovod 0.28.1, torch 2.13.0)', '/usr/bin/app', or 'python3 not found'."""
    if facts.get("kind") == "missing":
        return "not found on PATH"
    modules = facts.get("modules")
    if modules is None:
        return str(facts.get("executable"))
    shown = ", ".join(f"{m} {v}" if v else f"no {m}" for m, v in modules.items())
    return f"{facts.get('executable')} ({shown})"


def _same(node: Mapping[str, Any], here: Mapping[str, Any]) -> bool:
    keys = ("kind", "executable", "prefix", "modules")
    return all(node.get(k) == here.get(k) for k in keys)


@rule("program-env", needs=("site", "program", "observed"))
def program_env(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """Every rank, started by the launcher, finds the program's first word where the launching
    node does, and, for Python, the same interpreter with the same horovod and frameworks."""
    probe, site = facts.program or {}, facts.site
    argv0, here, reference = probe["argv0"], probe["launching"], probe.get("reference", "this node")
    if probe.get("error"):
        return Verdict("FAIL", f"the probe launch did not run: {probe['error']}", "check the launcher on this node")
    if "error" in here:
        return Verdict("FAIL", f"{reference}: {here['error']}", "run the job's launch line with --exec to see why")
    container = site.container.runtime != "none" and facts.image_path
    if here.get("kind") == "missing":
        return Verdict(
            "FAIL",
            f"{argv0} is not found on {reference} (PATH={here.get('path')})",
            "give the program's path in the image" if container else "give its path, or activate its venv first",
        )
    if container:
        fix = "use an image that has the program at that path, the same image on every node"
    elif "PATH" in site.export:
        fix = "install the same venv (or conda env) at the same path on every node, e.g. on a shared file system"
    else:
        fix = (
            f"add PATH (and VIRTUAL_ENV or CONDA_PREFIX) to export in {site.where} "
            "(`hpcbundle site detect` drafts it), with the same venv path on every node"
        )
    nodes = probe["nodes"]
    bad = {h: n for h, n in nodes.items() if "error" not in n and not _same(n, here)}
    silent = {h: n["error"] for h, n in nodes.items() if "error" in n}
    groups: dict[str, list[str]] = {}  # nodes that found the same thing are named together
    for host, node in bad.items():
        groups.setdefault(_describe(node), []).append(host)
    evidence = [f"{argv0} on {', '.join(hosts)}: {found}" for found, hosts in groups.items()]
    evidence += [f"{h}: {e}" for h, e in silent.items()]
    if evidence:
        seen = f"{reference}: {_describe(here)}"
        return Verdict("FAIL", "; ".join(evidence) + f" (as the launcher starts it; {seen})", fix)
    return Verdict("PASS", f"{argv0} -> {_describe(here)} on {', '.join(nodes)}, as on {reference}")
