"""Rules over a recipe alone: parts that contradict each other, so no image could be built from it."""

from __future__ import annotations

from packaging.requirements import Requirement

from ..config.packages import package_name, package_version
from ..config.recipes import CUDA_IMAGE, PLAIN_IMAGES
from ..knowledge.build_env import derived
from ..knowledge.compat import KnowledgeBase
from ..knowledge.stack import owned_by, stack_pins
from .engine import Facts, Verdict, refusal, rule
from .gpu import CPU_ONLY

NO_MPI = Verdict("SKIP", "the recipe puts no MPI in the image")


@rule("without-horovod", needs=("recipe",), on_load=True)
def without_horovod(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """A recipe without horovod is a torch.distributed image (it needs PyTorch); Horovod needs an MPI to build on."""
    recipe = facts.recipe
    if recipe.horovod is None and recipe.frameworks.pytorch is None:
        return [
            refusal(
                "frameworks",
                "a recipe without horovod is a torch.distributed image, which needs PyTorch",
                "add frameworks.pytorch, or a horovod section",
            )
        ]
    if recipe.horovod is not None and recipe.mpi is None:
        return [
            refusal(
                "mpi",
                "Horovod builds against the image's MPI",
                "add an mpi section, or remove horovod for a torch.distributed image",
            )
        ]
    return []


@rule("mpi-install", needs=("recipe",), on_load=True)
def mpi_install(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """mpi.install fits the flavour and the keys given: a source build has a tarball, pip is Intel MPI's."""
    mpi = facts.recipe.mpi
    if mpi is None:
        return [NO_MPI]
    if mpi.install == "source" and mpi.source is None:
        return [refusal("mpi", "install: source needs source.url and source.sha256 (or use install: distro)")]
    if mpi.install != "source" and (mpi.source is not None or mpi.configure):
        return [refusal("mpi", f"install: {mpi.install} takes no source/configure (those are for install: source)")]
    if mpi.install == "pip" and mpi.flavour != "intelmpi":
        return [refusal("mpi", "install: pip is only for flavour: intelmpi (the impi-devel/impi-rt wheels)")]
    if mpi.install == "distro" and mpi.flavour == "intelmpi":
        return [refusal("mpi", "Intel MPI is not an OS package; use install: pip")]
    return []


@rule("build-env-derived", needs=("recipe",), on_load=True)
def build_env_derived(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """horovod.build_env adds build variables, never one derived from the recipe (frameworks, controllers, gpu)."""
    hvd = facts.recipe.horovod
    if hvd is None or not hvd.build_env:
        return [Verdict("SKIP", "the recipe sets no horovod.build_env")]
    return [
        refusal(
            f"horovod.build_env.{name}",
            "is derived from the recipe",
            "remove it; set frameworks, controllers or gpu instead",
        )
        for name in sorted(hvd.build_env)
        if derived(name)
    ]


@rule("ucx-open-mpi", needs=("recipe",), on_load=True)
def ucx_open_mpi(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """UCX is built only for an Open MPI built from source (its pml ucx is what uses it)."""
    recipe = facts.recipe
    if recipe.ucx is None:
        return [Verdict("SKIP", "the recipe sets no ucx")]
    if recipe.mpi is None or not (recipe.mpi.flavour == "openmpi" and recipe.mpi.install == "source"):
        return [refusal("", "ucx is built only for an Open MPI built from source (mpi.install: source)")]
    return []


@rule("cuda-route", needs=("recipe",), on_load=True)
def cuda_route(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The base images fit where CUDA comes from: nvidia/cuda images, or plain OS images and PyPI's wheels."""
    recipe = facts.recipe
    gpu, base = recipe.gpu, recipe.base
    if gpu is None:
        return [CPU_ONLY]
    keys = ("build_image", "runtime_image")
    cuda_images = [key for key in keys if CUDA_IMAGE in getattr(base, key)]
    if gpu.source == "wheels":
        if cuda_images:
            return [
                refusal(
                    f"base.{cuda_images[0]}",
                    "is an nvidia/cuda image but gpu.source is wheels (CUDA from PyPI's NVIDIA wheels)",
                    f"use the plain OS image {PLAIN_IMAGES[base.os]}, or set gpu.source: image",
                )
            ]
        if recipe.frameworks.pytorch is None:
            return [
                refusal(
                    "gpu.source",
                    "wheels takes NCCL and cuDNN from PyTorch's wheel, and the recipe has no frameworks.pytorch",
                    "add frameworks.pytorch or set gpu.source: image",
                )
            ]
        return []
    plain = [key for key in keys if key not in cuda_images]
    if plain:
        return [
            refusal(
                f"base.{plain[0]}",
                f"is {getattr(base, plain[0])}, not an nvidia/cuda image, but gpu.source is image (the default)",
                "use an nvidia/cuda:<version>-devel-<os> image, or set gpu.source: wheels",
            )
        ]
    return []


@rule("verbs-runtime", needs=("recipe",), on_load=True)
def verbs_runtime(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """UCX or Open MPI built with verbs needs the verbs user space in the runtime image (fabric_libs: [verbs])."""
    recipe = facts.recipe
    verbs_builds = [
        f"{key}.configure {option}"
        for key, options in (
            ("ucx", recipe.ucx.configure if recipe.ucx else []),
            ("mpi", recipe.mpi.configure if recipe.mpi else []),
        )
        for option in options
        if option in ("--with-verbs", "--with-rdmacm")
    ]
    if not verbs_builds:
        return [Verdict("SKIP", "nothing is built with verbs (ucx.configure, mpi.configure)")]
    if "verbs" not in recipe.fabric_libs:
        return [
            refusal(
                "fabric_libs",
                f"has no verbs, but {verbs_builds[0]} builds against them and the runtime image then needs them",
                "add fabric_libs: [verbs]",
            )
        ]
    return []


@rule("user-packages", needs=("recipe",), on_load=True)
def user_packages(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """The user's own packages leave the stack alone: no pin of a framework, Horovod or the stack's wheels
    other than the recipe's, and no package given twice."""
    recipe = facts.recipe
    if not recipe.user_packages:
        return [Verdict("SKIP", "the recipe has no packages of its own (python_packages, requirements_file)")]
    pins, seen, found = stack_pins(recipe, kb), {}, []
    for key, pin in recipe.user_packages:
        name = package_name(pin)
        if name in seen:
            found.append(refusal(key, f"{pin} is given twice (also {seen[name]})", "keep one pin"))
        seen[name] = pin
        stack = pins.get(name)
        if stack is not None and not Requirement(pin).specifier.contains(package_version(stack.pin), prereleases=True):
            found.append(
                refusal(key, f"{pin} conflicts with the stack's {stack.pin} ({stack.key})", f"remove {name} from {key}")
            )
        elif stack is None and (owner := owned_by(name)):
            found.append(refusal(key, f"{pin} is the stack's to choose ({owner})", f"remove it; set {owner} instead"))
    return found
