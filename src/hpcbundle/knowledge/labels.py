"""The image-label contract: what an image says it holds (org.hpcbundle.* labels and a JSON manifest).

The image stage writes these labels from a recipe; `check` derives the same labels from the recipe
and `doctor` reads them back from a built image, so one set of rules judges both.
"""

from __future__ import annotations

from typing import Any, Mapping

from .. import __version__
from ..config.fields import image_digest, parse_version
from ..config.gpuarchs import GpuArchs
from ..config.recipes import Recipe
from .compat import KnowledgeBase

MANIFEST = "/etc/hpcbundle/manifest.json"
LABEL_PREFIX = "org.hpcbundle."
NVIDIA_CONTAINER_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
"""What the nvidia/cuda base images set and the wheels route's images set themselves: without them enroot's
nvidia hook and the NVIDIA container toolkit give a container no GPU ("Found no NVIDIA driver")."""
NVIDIA_ENV_LABELS = {
    "NVIDIA_VISIBLE_DEVICES": "nvidia.visible-devices",
    "NVIDIA_DRIVER_CAPABILITIES": "nvidia.driver-capabilities",
}
"""The labels that record NVIDIA_CONTAINER_ENV in an image that sets it itself (not prefixed)."""


def image_labels(recipe: Recipe, kb: KnowledgeBase) -> dict[str, str]:
    """org.hpcbundle.* image labels: what the image holds, as `doctor` reads it back. CPU images have no cuda keys.

    The fabric labels say what the rules over a site's fabric need: `mpi.transports` (openib, ucx,
    ofi, psm2: the MPI's fast transports), `ucx.transports` (ib, rdmacm, cuda), `fabric-libs` (verbs,
    psm2: the fabric user space; `none` when there is none), and a digest-pinned base image.
    Images of the wheels route (a plain OS base) record the NVIDIA_CONTAINER_ENV they set.
    """
    fw, gpu = recipe.frameworks, recipe.gpu
    labels = {
        "recipe": recipe.name,
        "hpcbundle-version": __version__,
        "os": recipe.base.os,
        "python": recipe.python,
        **_mpi_labels(recipe),
        **_horovod_labels(recipe),
        "frameworks": ",".join(fw.names),
        "manifest": MANIFEST,
    }
    if gpu:
        labels |= {
            "cuda": gpu.cuda,
            "cuda.source": gpu.source,
            "cudnn": gpu.cudnn,
            "nccl": gpu.nccl,
            "gpu-archs": gpu.targets.label(),
        }
        if gpu.source == "wheels":
            labels |= {NVIDIA_ENV_LABELS[name]: value for name, value in NVIDIA_CONTAINER_ENV.items()}
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


NONE = "none"
"""The value of the `mpi.flavour` and `horovod` labels of an image built without that part (a torch.distributed
image): an image that says so, unlike one built before the label, whose parts are unknown."""


def _mpi_labels(recipe: Recipe) -> dict[str, str]:
    """mpi.flavour, mpi.version, mpi.install; `mpi.flavour: none` for an image without MPI."""
    mpi = recipe.mpi
    if mpi is None:
        return {"mpi.flavour": NONE}
    return {"mpi.flavour": mpi.flavour, "mpi.version": mpi.version, "mpi.install": mpi.install}


def _horovod_labels(recipe: Recipe) -> dict[str, str]:
    """horovod (its version), its controllers and tensor operations; `horovod: none` for an image without it."""
    hvd = recipe.horovod
    if hvd is None:
        return {"horovod": NONE}
    return {
        "horovod": hvd.version,
        "horovod.controllers": ",".join(hvd.controllers),
        "horovod.tensor-operations": ",".join(hvd.tensor_operations),
    }


def _fabric_labels(recipe: Recipe, kb: KnowledgeBase) -> dict[str, str]:
    """mpi.transports, ucx.transports and fabric-libs, from the recipe's builds and its distro MPI's package."""
    mpi = recipe.mpi
    if mpi is None:
        return {"mpi.transports": NONE, "fabric-libs": _listing(set(recipe.fabric_libs))}
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
    if mpi.install == "source":  # Open MPI's Omni-Path paths: the psm2 mtl, or libfabric's (ofi mtl)
        options = {option.split("=", 1)[0] for option in mpi.configure}
        transports |= {name for option, name in _MPI_OPTIONS.items() if option in options}
    if recipe.ucx:
        transports.add("ucx")
        options = {option.split("=", 1)[0] for option in recipe.ucx.configure}
        ucx |= {name for option, name in _UCX_OPTIONS.items() if option in options}
    labels = {"mpi.transports": _listing(transports), "fabric-libs": _listing(libs)}
    if "ucx" in transports:
        labels["ucx.transports"] = _listing(ucx)
    return labels


_MPI_OPTIONS = {"--with-psm2": "psm2", "--with-ofi": "ofi", "--with-libfabric": "ofi"}
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
        facts.setdefault("gpu-archs", GpuArchs.parse(gpu.get("archs", [])).label())
    return facts
