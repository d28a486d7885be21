"""`hpcbundle doctor`: observe the nodes, then judge them with the rules that `check` uses.

The facts come from diagnose/probes.py, run on every node by diagnose/fanout.py; the image's facts
from its manifest. `observed_facts` puts them in the shapes the rules read (rules/facts.py), so the
same rule judges a node that was observed and the node a site declares. For example::

    >>> from hpcbundle.config.sites import Site
    >>> from hpcbundle.rules.engine import evaluate
    >>> from hpcbundle.knowledge.compat import knowledge_base
    >>> site = Site.model_validate({"name": "t", "description": "d", "mpi": {"flavour": "openmpi", "version": "4.1.4"},
    ...     "launcher": {"name": "mpirun"}, "node": {"cores": 2}, "network": {"fabric": "ethernet"}})
    >>> answered = {"node1": {"cpus": 2, "mpi": {"flavour": "openmpi", "version": "4.1.4", "evidence": "mpirun"}}}
    >>> [r.line() for r in evaluate(observed_facts(site, answered), knowledge_base()) if r.rule == "host-mpi"]
    ['PASS  host-mpi             openmpi 4.1.4 on node1']
"""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, Mapping, get_args

from ..config.sites import Site
from ..knowledge.compat import knowledge_base
from ..knowledge.labels import LABEL_PREFIX, MANIFEST, image_facts, manifest_facts
from ..knowledge.network import named_interfaces
from ..rules.engine import Facts, HeadProbe, LaunchRequest, Need, Result, evaluate, failed
from . import fanout, program
from .head import observe_head


def image_manifest(nodes: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, str] | None, str]:
    """The image's facts from the first node whose probe read its manifest (else a SIF's org.hpcbundle.*
    labels), and where they were read."""
    images = {host: node.get("image") or {} for host, node in nodes.items() if "error" not in node}
    for host, image in images.items():
        if image.get("manifest"):
            where = f"{MANIFEST} in {image['path']}" if image["kind"] == "sif" else f"{image['path']}{MANIFEST}"
            return manifest_facts(image["manifest"]), f"{where} on {host}"
    for host, image in images.items():
        if any(key.startswith(LABEL_PREFIX) for key in image.get("labels") or {}):
            return image_facts(image["labels"]), f"the labels of {image['path']} on {host}"
    return None, ""


def observed_facts(
    site: Site,
    nodes: Mapping[str, Mapping[str, Any]],
    *,
    reach: Mapping[str, list] | None = None,
    image: str | None = None,
    hosts: Mapping[str, int] | None = None,
    checksum: bool = False,
    scope: Literal["nodes", "login"] = "nodes",
    program_env: Mapping[str, Any] | None = None,
    request: LaunchRequest | None = None,
    head: HeadProbe | None = None,
) -> Facts:
    """The facts doctor observed, in the shapes the rules read; with the command's launch `request`, the rules
    over it and the image read back (torch-backend) judge it too."""
    labels, source = image_manifest(nodes)
    return Facts(
        site=site,
        image=labels,
        image_source=source,
        nodes=nodes,
        observed=True,
        hosts=hosts or None,
        reach=reach or {},
        image_path=image,
        checksum=checksum,
        scope=scope,
        program=program_env,
        request=request,
        head=head,
    )


ALL_BUT_PROGRAM = tuple(kind for kind in get_args(Need) if kind != "program")
"""Every fact kind but the program's: its second pass runs only the rules that read the program."""


def doctor(
    site: Site,
    image: str | None,
    hosts: tuple[tuple[str, int], ...],
    *,
    checksum: bool,
    scope: Literal["nodes", "login"] = "nodes",
    timeout: float = 30.0,
    probe: program.ProgramProbe | None = None,
    environment: Mapping[str, str] | None = None,
    judged: tuple[str, ...] = (),
    request: LaunchRequest | None = None,
    head: HeadProbe | None = None,
) -> list[Result]:
    """Observe the hosts (or this node) and judge them: what `hpcbundle doctor` and the launch pre-checks run.

    The probes get the site's exported variables from `environment` (the launching shell's), as the
    launch gives them to its ranks: a runtime found through an exported PATH is found by both.

    With `probe` (the job's launch line running a probe, built by the caller), the program's
    environment on every node is observed at the same time, through the launcher; it is judged
    when nothing else failed (otherwise the probe's launch is stopped: it would hang or fail for
    the same reason, and the FAIL already says why). The rules that need no more than the fact kinds
    `judged` are left out: the command's launch plan judged the site and the request before (launch/plan.py);
    its `request` is judged again only with what the nodes show (the image's labels).
    With `head` (a torch job's first host and port), doctor also listens on that port there and connects from
    every host, beside the node probes.
    """
    probe_ifaces = list(named_interfaces(site)) if scope == "nodes" else []
    exported = {name: environment[name] for name in site.export if name in (environment or {})}
    names = [h for h, _ in hosts]
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=2) as pool:
        seen = pool.submit(program.observe, probe, timeout, stop) if probe else None
        headed = pool.submit(observe_head, site, head, names, timeout, exported) if head else None
        nodes, reach = fanout.gather(
            dict(site.mca), names, image, checksum, probe_ifaces, timeout=timeout, environment=exported
        )
        facts = observed_facts(
            site,
            nodes,
            reach=reach,
            image=image,
            hosts=dict(hosts),
            checksum=checksum,
            scope=scope,
            head=headed.result() if headed else None,
            request=request,
        )
        results = evaluate(facts, knowledge_base(), judged)
        if seen is None:
            return results
        if failed(results):  # the launch line would fail or hang for the same reason: stop it
            stop.set()
            seen.result()
            return results
        with_program = dataclasses.replace(facts, program=seen.result())
        return results + evaluate(with_program, knowledge_base(), ALL_BUT_PROGRAM)  # the rules over the program
