"""Where facts come from: declared by a recipe and a site (`check`), or observed on the nodes (`doctor`).

Both sides produce the same shapes, so one rule judges both: an image is its labels (the recipe's,
or the ones read back from a built image's manifest), and a node is a mapping in the shape of
diagnose/probes.py's `facts()` (a site declares one such node for all of its nodes)::

    >>> from hpcbundle.config.sites import Site
    >>> from hpcbundle.rules.knowledge import knowledge_base
    >>> site = Site.model_validate({"name": "v", "description": "d",
    ...     "mpi": {"flavour": "openmpi", "version": "4.1.6"}, "launcher": {"name": "mpirun"},
    ...     "node": {"cores": 40, "gpus": 2, "gpu_model": "V100", "driver": "535.104.05"},
    ...     "network": {"fabric": "infiniband"}})
    >>> node = declared_node(site, knowledge_base())
    >>> node["gpu"]["driver"], node["gpu"]["gpus"][0], node["mpi"]["version"]
    ('535.104.05', {'name': 'V100', 'capability': '7.0'}, '4.1.6')
"""

from __future__ import annotations

from typing import Any, Mapping

from .. import __version__
from ..config.recipes import Recipe
from ..config.sites import Site
from .engine import Facts, Result, evaluate
from .knowledge import KnowledgeBase

MANIFEST = "/etc/hpcbundle/manifest.json"
LABEL_PREFIX = "org.hpcbundle."


def image_labels(recipe: Recipe) -> dict[str, str]:
    """org.hpcbundle.* image labels: what the image holds, as `doctor` reads it back. CPU images have no cuda keys."""
    fw, gpu, mpi = recipe.frameworks, recipe.gpu, recipe.mpi
    labels = {
        "recipe": recipe.name,
        "hpcbundle-version": __version__,
        "os": recipe.base.os,
        "python": recipe.python,
        "mpi.flavour": mpi.flavour,
        "mpi.version": mpi.version,
        "mpi.install": mpi.install,
        "horovod": recipe.horovod.version,
        "horovod.controllers": ",".join(recipe.horovod.controllers),
        "horovod.tensor-operations": ",".join(recipe.horovod.tensor_operations),
        "frameworks": ",".join(fw.names),
        "manifest": MANIFEST,
    }
    if gpu:
        labels |= {
            "cuda": gpu.cuda,
            "cuda.source": gpu.source,
            "cudnn": gpu.cudnn,
            "nccl": gpu.nccl,
            "gpu-archs": ",".join(gpu.archs),
        }
    if recipe.ucx:
        labels["ucx"] = recipe.ucx.version
    if fw.tensorflow:
        labels["tensorflow"] = fw.tensorflow.version
    if fw.pytorch:
        labels["pytorch"] = f"{fw.pytorch.version}+{fw.pytorch.variant}"
    return {f"{LABEL_PREFIX}{key}": value for key, value in labels.items()}


def image_facts(labels: Mapping[str, Any]) -> dict[str, str]:
    """An image's facts from its labels: the prefix stripped, values as strings."""
    return {key.removeprefix(LABEL_PREFIX): str(value) for key, value in labels.items()}


def manifest_facts(manifest: Mapping[str, Any]) -> dict[str, str]:
    """An image's facts from its manifest (manifests of older builds lack some labels: the recipe fills them)."""
    facts = image_facts(manifest.get("labels") or {})
    recipe = manifest.get("recipe") or {}
    mpi, gpu = recipe.get("mpi") or {}, recipe.get("gpu") or {}
    facts.setdefault("mpi.flavour", mpi.get("flavour", ""))
    facts.setdefault("mpi.version", mpi.get("version", ""))
    if gpu:
        facts.setdefault("cuda", gpu.get("cuda", ""))
        facts.setdefault("gpu-archs", ",".join(gpu.get("archs", [])))
    return facts


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
    }


def declared_facts(recipe: Recipe, site: Site | None, kb: KnowledgeBase) -> Facts:
    """What `check` judges: the recipe, its image's labels, and, with a site, the node the site declares."""
    return Facts(
        site=site,
        recipe=recipe,
        image=image_facts(image_labels(recipe)),
        image_source=f"recipe {recipe.name}",
        nodes={f"site {site.name}": declared_node(site, kb)} if site is not None else None,
    )


def check_declared(recipe: Recipe, site: Site | None, kb: KnowledgeBase) -> list[Result]:
    """`hpcbundle check`: every rule the declared facts can feed (the recipe alone, or on a site)."""
    return evaluate(declared_facts(recipe, site, kb), kb)
