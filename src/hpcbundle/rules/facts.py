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
from ..config.fields import image_digest, parse_version
from ..config.recipes import Recipe
from ..config.sites import Site
from .engine import Facts, Result, evaluate
from .knowledge import KnowledgeBase

MANIFEST = "/etc/hpcbundle/manifest.json"
LABEL_PREFIX = "org.hpcbundle."


def image_labels(recipe: Recipe, kb: KnowledgeBase) -> dict[str, str]:
    """org.hpcbundle.* image labels: what the image holds, as `doctor` reads it back. CPU images have no cuda keys.

    The fabric labels say what the rules over a site's fabric need: `mpi.transports` (openib, ucx,
    ofi: the MPI's fast transports), `ucx.transports` (ib, rdmacm, cuda), `fabric-libs` (verbs,
    psm2: the fabric user space; `none` when there is none), and a digest-pinned base image.
    """
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
    labels |= _fabric_labels(recipe, kb)
    for stage in ("build_image", "runtime_image"):
        reference = getattr(recipe.base, stage)
        if image_digest(reference):
            labels[f"base.{stage.replace('_', '-')}"] = reference
    if fw.tensorflow:
        labels["tensorflow"] = fw.tensorflow.version
    if fw.pytorch:
        labels["pytorch"] = f"{fw.pytorch.version}+{fw.pytorch.variant}"
    return {f"{LABEL_PREFIX}{key}": value for key, value in labels.items()}


def _fabric_labels(recipe: Recipe, kb: KnowledgeBase) -> dict[str, str]:
    """mpi.transports, ucx.transports and fabric-libs, from the recipe's builds and its distro MPI's package."""
    mpi = recipe.mpi
    distro = kb.distro_mpi.get(recipe.base.os, {}).get(mpi.flavour) if mpi.install == "distro" else None
    transports, ucx, libs = set(), set(), set(recipe.fabric_libs)
    if distro is not None:
        transports |= set(distro.transports)
        ucx |= set(distro.ucx_transports)
        libs |= set(distro.fabric_libs)
    if mpi.flavour == "intelmpi":
        transports.add("ofi")  # Intel MPI 2021 moves data through libfabric only
    if mpi.install == "source" and "--with-verbs" in mpi.configure and parse_version(mpi.version).major < 5:
        transports.add("openib")  # Open MPI 5 removed the openib btl
    if recipe.ucx:
        transports.add("ucx")
        options = {option.split("=", 1)[0] for option in recipe.ucx.configure}
        ucx |= {name for option, name in _UCX_OPTIONS.items() if option in options}
    labels = {"mpi.transports": _listing(transports), "fabric-libs": _listing(libs)}
    if "ucx" in transports:
        labels["ucx.transports"] = _listing(ucx)
    return labels


_UCX_OPTIONS = {"--with-verbs": "ib", "--with-rdmacm": "rdmacm", "--with-cuda": "cuda"}


def _listing(names: set[str]) -> str:
    return ",".join(sorted(names)) or "none"


def listed(image: Mapping[str, str], key: str) -> set[str] | None:
    """The names a list label holds ('none' is empty), or None when the image has no such label (built before it)."""
    value = image.get(key)
    if value is None:
        return None
    return {name for name in value.split(",") if name and name != "none"}


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


def check_declared(recipe: Recipe, site: Site | None, kb: KnowledgeBase) -> list[Result]:
    """`hpcbundle check`: every rule the declared facts can feed (the recipe alone, or on a site)."""
    return evaluate(declared_facts(recipe, site, kb), kb)
