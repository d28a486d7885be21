"""Rules for the program's environment: every rank starts the same interpreter and modules as the launching
node, and every module the program imports resolves there."""

from __future__ import annotations

from typing import Any, Mapping

from ..knowledge.compat import KnowledgeBase
from ..knowledge.launching import in_container
from ..knowledge.stack import owned_by
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
    return _same_interpreter(node, here) and node.get("modules") == here.get("modules")


def _same_interpreter(node: Mapping[str, Any], here: Mapping[str, Any]) -> bool:
    return all(node.get(k) == here.get(k) for k in ("kind", "executable", "prefix"))


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
    container = in_container(site) and facts.image_path
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


def _missing_groups(nodes: Mapping[str, Mapping[str, Any]], names: list[str]) -> dict[tuple[str, ...], list[str]]:
    """Hosts lacking each of `names`, modules that the same hosts lack named together: {hosts: modules}."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for name in names:
        hosts = tuple(h for h, n in nodes.items() if name in (n.get("missing") or ()))
        if hosts:
            groups.setdefault(hosts, []).append(name)
    return groups


def _not_importable(groups: Mapping[tuple[str, ...], list[str]], where: str) -> list[str]:
    """'`torchvision` is not importable on node2, node3 (in image x.sif)', one per group."""
    verb = {True: "are", False: "is"}
    return [
        f"{', '.join(f'`{m}`' for m in mods)} {verb[len(mods) > 1]} not importable on {', '.join(hosts)} ({where})"
        for hosts, mods in groups.items()
    ]


def _in_recipe(groups: Mapping[tuple[str, ...], list[str]]) -> str:
    """Where a recipe gets the missing modules: the stack's own keys for what the stack chooses (torch,
    torchvision, tensorflow, horovod: `python_packages:` refuses them), `python_packages:` for the rest.

    >>> _in_recipe({("n1",): ["torchvision", "tqdm"]})
    "set frameworks.pytorch.torchvision in the recipe for `torchvision`; add `tqdm` to the recipe's `python_packages:`"
    """
    modules = list(dict.fromkeys(m for group in groups.values() for m in group))
    owned = {m: owned_by(m.lower().replace("_", "-")) for m in modules}
    keys = [f"set {owner} in the recipe for `{m}`" for m, owner in owned.items() if owner]
    rest = [f"`{m}`" for m, owner in owned.items() if not owner]
    return "; ".join(keys + ([f"add {', '.join(rest)} to the recipe's `python_packages:`"] if rest else []))


@rule("program-imports", needs=("site", "program", "observed"))
def program_imports(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """Every module the program (and the local modules it imports) imports resolves in each rank's
    interpreter, found without importing it. A missing module FAILs; a missing optional one (imported
    inside try/except ImportError) WARNs: the program runs without it. Nodes whose interpreter differs
    from the reference are program-env's finding, not judged here."""
    probe = facts.program or {}
    imports, here = probe.get("imports"), probe.get("launching") or {}
    if not imports:
        return Verdict("SKIP", "the program is not a .py file: its imports are not read")
    if probe.get("error") or here.get("kind") != "python":
        return Verdict("SKIP", "the probe found no Python interpreter to check the imports in (see program-env)")
    same = {h: n for h, n in probe["nodes"].items() if "error" not in n and _same_interpreter(n, here)}
    image = facts.image_path if in_container(facts.site) else None
    where = f"in image {image}" if image else f"in the node's python {here.get('executable')}"
    required = _not_importable(_missing_groups(same, list(imports["required"])), where)
    optional = _not_importable(_missing_groups(same, list(imports["optional"])), where)
    problem = [imports["problem"]] if imports.get("problem") else []
    if required:
        recipe = _in_recipe(_missing_groups(same, list(imports["required"])))
        fix = f"{recipe} and rebuild the image"
        if not image:
            fix = f"pip install it into that environment on every node (in an image: {recipe})"
        return Verdict("FAIL", "; ".join(required + [f"optional: {o}" for o in optional] + problem), fix)
    if optional:
        program = imports["program"]
        evidence = [f"{o}, imported inside try/except ImportError: {program} runs without it" for o in optional]
        fix = f"{_in_recipe(_missing_groups(same, list(imports['optional'])))} if needed"
        return Verdict("WARN", "; ".join(evidence + problem), fix)
    if problem:
        return Verdict("WARN", problem[0])
    names = sorted(imports["required"] + imports["optional"])
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return Verdict(
        "PASS", f"{imports['program']}'s imports ({shown or 'the standard library only'}) resolve on {', '.join(same)}"
    )
