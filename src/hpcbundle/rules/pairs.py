"""Pair rules: does a recipe's image work on a site? One Finding per rule, like compat's recipe rules.

    >>> findings = check_pair(load_recipe("cuda12.2-tf2.15-torch2.1-ucx", d), load_site("ib-v100", s), kb)  # doctest: +SKIP
    >>> [f.line() for f in findings if f.status == "FAIL"]                                                  # doctest: +SKIP
    ['FAIL  gpu-arch             site ib-v100 has V100 (compute capability 7.0); the recipe builds 8.0, 9.0 ...']
"""

from __future__ import annotations

from typing import Callable

from ..config.fields import major_minor, parse_version
from ..config.recipes import Recipe
from ..config.sites import Site
from ..launch import RUNTIMES
from .compat import Finding, Status
from .knowledge import KnowledgeBase

PairRule = Callable[[Recipe, Site, KnowledgeBase], Finding]
PAIR_RULES: list[PairRule] = []


def _pair_rule(name: str) -> Callable[[Callable[[Recipe, Site, KnowledgeBase], tuple[Status, str]]], PairRule]:
    """Register a pair rule under `name`; the function returns (status, message)."""

    def register(check: Callable[[Recipe, Site, KnowledgeBase], tuple[Status, str]]) -> PairRule:
        def rule(recipe: Recipe, site: Site, kb: KnowledgeBase) -> Finding:
            return Finding(name, *check(recipe, site, kb))

        rule.__name__ = name
        rule.__doc__ = check.__doc__
        PAIR_RULES.append(rule)
        return rule

    return register


def check_pair(recipe: Recipe, site: Site, kb: KnowledgeBase) -> list[Finding]:
    """Apply every pair rule; the pair is refused if any finding is FAIL."""
    return [rule(recipe, site, kb) for rule in PAIR_RULES]


def _gpu_sides(recipe: Recipe, site: Site) -> tuple[Status, str] | None:
    """SKIP unless both the recipe and the site have GPUs."""
    if recipe.gpu is None or not site.node.gpus:
        return "SKIP", "CPU-only recipe or site (see gpu-presence)"
    return None


@_pair_rule("gpu-presence")
def _gpu_presence(recipe: Recipe, site: Site, kb: KnowledgeBase) -> tuple[Status, str]:
    """A CUDA image needs GPUs; a CPU image leaves a GPU site's GPUs idle."""
    if recipe.gpu is not None and not site.node.gpus:
        return "FAIL", f"recipe {recipe.name} is a CUDA stack but site {site.name} has no GPUs; use a CPU recipe"
    if recipe.gpu is None and site.node.gpus:
        return "WARN", f"recipe {recipe.name} is CPU-only: the {site.node.gpus} {site.node.gpu_model} GPUs per node of {site.name} stay idle"
    if recipe.gpu is not None and not site.container.gpu and site.container.runtime != "none":
        return "WARN", f"site {site.name} does not pass GPUs into the container (container.gpu: false)"
    return "PASS", "GPU stack on a GPU site" if recipe.gpu else "CPU stack on a CPU site"


@_pair_rule("driver-cuda")
def _driver_cuda(recipe: Recipe, site: Site, kb: KnowledgeBase) -> tuple[Status, str]:
    """The node's driver must be new enough for the image's CUDA (fully, or through minor version compatibility)."""
    skip = _gpu_sides(recipe, site)
    if skip or recipe.gpu is None:
        return skip or ("SKIP", "")
    cuda = major_minor(recipe.gpu.cuda)
    floor = kb.cuda_driver.get(cuda)
    if floor is None:
        return "SKIP", f"CUDA {cuda} unknown (see cuda-known)"
    if site.node.driver is None:
        return "WARN", f"site {site.name} does not say its driver (node.driver); CUDA {cuda} needs >= {floor.toolkit}"
    driver = parse_version(site.node.driver)
    if driver >= parse_version(floor.toolkit):
        return "PASS", f"driver {site.node.driver} >= {floor.toolkit} (CUDA {cuda})"
    if driver >= parse_version(floor.minor_compat):
        return "WARN", (f"driver {site.node.driver} runs CUDA {cuda} only through minor version compatibility "
                        f"(>= {floor.minor_compat}; full support from {floor.toolkit}): no PTX JIT for newer GPUs")
    return "FAIL", f"driver {site.node.driver} is older than CUDA {cuda} allows ({floor.minor_compat}); pick a recipe with an older CUDA or update the driver"


@_pair_rule("gpu-arch")
def _gpu_arch(recipe: Recipe, site: Site, kb: KnowledgeBase) -> tuple[Status, str]:
    """The image must hold code for the site's GPU: a cubin for X.y runs on X.z with z >= y."""
    skip = _gpu_sides(recipe, site)
    if skip or recipe.gpu is None:
        return skip or ("SKIP", "")
    model = site.node.gpu_model or ""
    capability = kb.gpu_capability.get(model)
    if capability is None:
        return "WARN", f"GPU model {model} is not in the knowledge base (known: {', '.join(kb.gpu_capability)})"
    major, minor = (int(part) for part in capability.split("."))
    runs = [a for a in recipe.gpu.archs if int(a.split(".")[0]) == major and int(a.split(".")[1]) <= minor]
    if not runs:
        return "FAIL", (f"site {site.name} has {model} (compute capability {capability}); the recipe builds "
                        f"{', '.join(recipe.gpu.archs)}: add {capability} to gpu.archs")
    return "PASS", f"{model} ({capability}) runs the sm_{runs[-1].replace('.', '')} code"


@_pair_rule("mpi-abi-host")
def _mpi_abi_host(recipe: Recipe, site: Site, kb: KnowledgeBase) -> tuple[Status, str]:
    """The host MPI launches ranks that load the image's MPI: both must be one ABI family."""
    host, image = site.mpi, recipe.mpi
    host_abi, image_abi = kb.mpi_abi.get(host.flavour), kb.mpi_abi.get(image.flavour)
    if host_abi is None or image_abi is None:
        return "FAIL", f"no ABI family known for {host.flavour if host_abi is None else image.flavour}; add it to compat.yaml mpi_abi"
    if host_abi.family != image_abi.family:
        return "FAIL", f"site {site.name} launches with {host.flavour} {host.version}; the image has {image.flavour} {image.version}, another ABI family"
    if host_abi.family == "by_major_minor" and major_minor(host.version) != major_minor(image.version):
        return "FAIL", (f"host Open MPI {host.version} and image Open MPI {image.version} are different series; "
                        f"the hybrid model needs the same major.minor ({major_minor(host.version)}.x in the image)")
    return "PASS", f"host {host.flavour} {host.version} and image {image.flavour} {image.version} share an ABI"


@_pair_rule("userns-vader")
def _userns_vader(recipe: Recipe, site: Site, kb: KnowledgeBase) -> tuple[Status, str]:
    """Open MPI 4's vader single-copy (CMA) hangs across user namespaces unless switched off."""
    runtime = RUNTIMES.get(site.container.runtime)
    if runtime is None or not runtime.in_user_namespace(site) or recipe.mpi.flavour != "openmpi" or parse_version(recipe.mpi.version).major >= 5:
        return "SKIP", "no Open MPI 4 inside a user-namespace runtime"
    if site.mca.get("btl_vader_single_copy_mechanism") == "none":
        return "PASS", f"{runtime.name} runs in a user namespace and the site sets btl_vader_single_copy_mechanism none"
    return "WARN", (f"{runtime.name} runs ranks in user namespaces, where Open MPI {major_minor(recipe.mpi.version)}'s vader single-copy "
                    "hangs large messages: add `btl_vader_single_copy_mechanism: none` to the site's mca")


@_pair_rule("openib-ucx")
def _openib_ucx(recipe: Recipe, site: Site, kb: KnowledgeBase) -> tuple[Status, str]:
    """A site that selects the openib btl needs an image whose Open MPI has it."""
    btl = site.mca.get("btl", "")
    if "openib" not in btl.split(",") or recipe.mpi.flavour != "openmpi":
        return "SKIP", "the site does not select the openib btl"
    if parse_version(recipe.mpi.version).major >= 5:
        return "FAIL", f"the site selects the openib btl, which Open MPI {recipe.mpi.version} no longer has; use pml ucx"
    if recipe.ucx is not None or "--without-verbs" in recipe.mpi.configure:
        return "WARN", ("the site selects the openib btl but the image's Open MPI is built for UCX (no verbs btl): "
                        "set the site's mca to pml: ucx and drop btl: openib")
    return "PASS", "the image's Open MPI 4 keeps the openib btl"
