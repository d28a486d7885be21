"""Where facts come from: declared by a recipe and a site (`check`), or observed on the nodes (`doctor`).

Both sides produce the same shapes, so one rule judges both: an image is its labels (the recipe's,
or the ones read back from a built image's manifest), and a node is a mapping in the shape of
diagnose/probes.py's `facts()` (a site declares one such node for all of its nodes)::

    >>> from hpcbundle.config.sites import Site
    >>> from hpcbundle.knowledge.compat import knowledge_base
    >>> site = Site.model_validate({"name": "v", "description": "d",
    ...     "mpi": {"flavour": "openmpi", "version": "4.1.6"}, "launcher": {"name": "mpirun"},
    ...     "node": {"cores": 40, "gpus": 2, "gpu_model": "V100", "driver": "535.104.05"},
    ...     "network": {"fabric": "infiniband"}})
    >>> node = declared_node(site, knowledge_base())
    >>> node["gpu"]["driver"], node["gpu"]["gpus"][0], node["mpi"]["version"]
    ('535.104.05', {'name': 'V100', 'capability': '7.0'}, '4.1.6')
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config.recipes import Recipe
from ..config.sites import Site
from ..knowledge.compat import KnowledgeBase
from ..knowledge.labels import image_facts, image_labels
from .engine import Facts, LaunchRequest, Result, evaluate


def declared_node(site: Site, kb: KnowledgeBase) -> dict[str, Any]:
    """The node a site declares, in the probe's shape (what `doctor` would observe if the site is right)."""
    node = site.node
    capability = kb.gpu_capability.get(node.gpu_model or "")
    return {
        "host": f"site {site.name}",
        "cpus": node.cores,
        "gpu": {
            "present": bool(node.gpus),
            "driver": node.driver,
            "gpus": [{"name": node.gpu_model, "capability": capability}] * node.gpus,
            "note": "declared by the site",
        },
        "mpi": {"flavour": site.mpi.flavour, "version": site.mpi.version, "evidence": f"site {site.name}: mpi"},
        # NUMA node -> MemTotal in kB as the probe reads it; declared nodes have memory of unknown size (None)
        "numa": {str(n): None for n in node.numa_memory or []},
    }


def declared_facts(recipe: Recipe, site: Site | None, kb: KnowledgeBase) -> Facts:
    """What `check` judges: the recipe, its image's labels, and, with a site, the node the site declares."""
    return Facts(
        site=site,
        recipe=recipe,
        image=image_facts(image_labels(recipe, kb)),
        image_source=f"recipe {recipe.name}",
        nodes={f"site {site.name}": declared_node(site, kb)} if site is not None else None,
    )


def check_declared(
    recipe: Recipe, site: Site | None, kb: KnowledgeBase, request: LaunchRequest | None = None
) -> list[Result]:
    """`hpcbundle check`: every rule the declared facts can feed (the recipe alone, or on a site, with the
    launch `request` where one is given)."""
    return evaluate(dataclasses.replace(declared_facts(recipe, site, kb), request=request), kb)
