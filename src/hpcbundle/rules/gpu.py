"""Rules for GPUs: CUDA vs nvcc's archs, cuDNN and NCCL builds, the image on the nodes' GPUs and driver."""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, TypeVar

from ..config.fields import major_minor, parse_version
from ..config.gpuarchs import GpuArch, GpuArchs
from ..config.recipes import Gpu, Recipe
from ..knowledge.compat import KnowledgeBase
from ..knowledge.launching import in_container
from .engine import Facts, Verdict, rule

CPU_ONLY = Verdict("SKIP", "CPU-only recipe")

Part = TypeVar("Part")
Judge = Callable[[Recipe, Part, KnowledgeBase], Verdict]


def recipe_rule(
    name: str, part: Callable[[Recipe], Part | None], absent: Verdict
) -> Callable[[Judge[Part]], Callable[[Facts, KnowledgeBase], Verdict]]:
    """Register a rule over one part of a recipe (its gpu block, a framework), judged as
    `judge(recipe, that part, kb)`; a recipe without the part gets `absent` (a SKIP), so no rule
    repeats that guard. The registered rule keeps `judge`'s name and docstring (`hpcbundle rules`)."""

    def register(judge: Judge[Part]) -> Callable[[Facts, KnowledgeBase], Verdict]:
        @functools.wraps(judge)
        def judged(facts: Facts, kb: KnowledgeBase) -> Verdict:
            found = part(facts.recipe)
            return absent if found is None else judge(facts.recipe, found, kb)

        return rule(name, needs=("recipe",))(judged)

    return register


def gpu_of(recipe: Recipe) -> Gpu | None:
    """The recipe's gpu block; None for a CPU-only recipe."""
    return recipe.gpu


def not_known(what: str, table: str) -> Verdict:
    """The FAIL for a version the knowledge base lacks: add it to compat.yaml's `table`."""
    return Verdict("FAIL", f"{what} is not in the knowledge base", f"add it to compat.yaml {table}")


@recipe_rule("cuda-known", gpu_of, CPU_ONLY)
def cuda_known(recipe: Recipe, gpu: Gpu, kb: KnowledgeBase) -> Verdict:
    """A CUDA version must be in the driver and architecture tables before anything can be checked."""
    cuda = major_minor(gpu.cuda)
    if cuda not in kb.cuda_driver or cuda not in kb.cuda_archs:
        return Verdict(
            "FAIL",
            f"CUDA {cuda} is not in the knowledge base (known: {', '.join(kb.cuda_archs)})",
            "add it to compat.yaml with its source",
        )
    return Verdict("PASS", f"CUDA {cuda} needs Linux driver >= {kb.cuda_driver[cuda].toolkit}")


def arch_floor(cuda: str, kb: KnowledgeBase) -> str | None:
    """The lowest compute capability nvcc of `cuda` can target ('7.5' for 13.0), None if unknown."""
    archs = kb.cuda_archs.get(major_minor(cuda))
    return min(archs, key=parse_version) if archs else None


@recipe_rule("cuda-archs", gpu_of, CPU_ONLY)
def cuda_archs(recipe: Recipe, gpu: Gpu, kb: KnowledgeBase) -> Verdict:
    """nvcc of this CUDA must be able to build every requested compute capability."""
    cuda = major_minor(gpu.cuda)
    supported = kb.cuda_archs.get(cuda)
    if supported is None:
        return Verdict("SKIP", f"CUDA {cuda} unknown (see cuda-known)")
    missing = [a for a in gpu.archs if a not in supported]
    floor = arch_floor(cuda, kb) or supported[0]
    below = [a for a in missing if parse_version(a) < parse_version(floor)]
    if below:
        return Verdict(
            "FAIL",
            f"gpu.archs: CUDA {cuda} cannot target compute capability {', '.join(below)}: its floor is {floor} "
            f"(CUDA 13 removed Maxwell, Pascal and Volta)",
            f"drop {', '.join(below)} from gpu.archs, or use a CUDA 12.x recipe for those GPUs",
        )
    if missing:
        return Verdict(
            "FAIL",
            f"gpu.archs: CUDA {cuda} cannot build compute capability {', '.join(missing)} "
            f"(it builds {supported[0]}..{supported[-1]})",
            f"use another CUDA or drop {', '.join(missing)} from gpu.archs",
        )
    return Verdict("PASS", f"CUDA {cuda} builds {', '.join(f'sm_{arch.sm}' for arch in gpu.targets)}")


@recipe_rule("cuda-source", gpu_of, CPU_ONLY)
def cuda_source(recipe: Recipe, gpu: Gpu, kb: KnowledgeBase) -> Verdict:
    """gpu.source: wheels needs PyPI's toolkit wheels for the recipe's CUDA (they start at 13.0)."""
    if gpu.source == "image":
        return Verdict("PASS", f"CUDA {gpu.cuda} from the base image {recipe.base.build_image}")
    wheels = kb.cuda_wheels.get(major_minor(gpu.cuda))
    if wheels is None:
        return Verdict(
            "FAIL",
            f"gpu.source: wheels, but PyPI has no CUDA {gpu.cuda} toolkit wheels with nvcc "
            f"(known: {', '.join(kb.cuda_wheels)}; the CUDA 12 nvcc wheel ships no nvcc)",
            "set gpu.source: image with an nvidia/cuda base image, or use CUDA 13.0",
        )
    pins = ", ".join(f"{name} {version}" for name, version in {**wheels.build, **wheels.runtime}.items())
    return Verdict("PASS", f"CUDA {gpu.cuda} from PyPI's wheels into nvidia/{wheels.dir}: {pins}")


@recipe_rule("cudnn-cuda", gpu_of, CPU_ONLY)
def cudnn_cuda(recipe: Recipe, gpu: Gpu, kb: KnowledgeBase) -> Verdict:
    """cuDNN ships separate builds per CUDA major; the recipe's must exist for its CUDA."""
    cudnn, cuda_major = major_minor(gpu.cudnn), gpu.cuda.split(".")[0]
    majors = kb.cudnn_cuda_majors.get(cudnn)
    if majors is None:
        return not_known(f"cuDNN {cudnn}", "cudnn_cuda_majors")
    if cuda_major not in majors:
        return Verdict("FAIL", f"cuDNN {cudnn} has no build for CUDA {cuda_major}.x (only {', '.join(majors)}.x)")
    return Verdict("PASS", f"cuDNN {cudnn} has a CUDA {cuda_major}.x build")


@recipe_rule("nccl-torch", gpu_of, CPU_ONLY)
def nccl_torch(recipe: Recipe, gpu: Gpu, kb: KnowledgeBase) -> Verdict:
    """One NCCL per image: gpu.nccl must be the NCCL that the torch wheel loads (Horovod builds against it)."""
    pt = recipe.frameworks.pytorch
    if pt is None:
        return Verdict("PASS", f"no PyTorch: NCCL {gpu.nccl} from NVIDIA's apt repository for CUDA {gpu.cuda}")
    wheel = kb.torch_wheel(pt.version, pt.variant)
    if wheel is None:
        return Verdict(
            "WARN",
            f"the NCCL of torch {pt.version} {pt.variant} is not in the knowledge base: "
            f"gpu.nccl {gpu.nccl} is unverified",
            "add the wheel's nvidia-nccl pin to compat.yaml torch_wheels",
        )
    if wheel.bundled:
        return Verdict(
            "WARN",
            f"torch {pt.version}+{pt.variant} carries its own NCCL inside the wheel (PyTorch's index served "
            f"bundled builds before 2.2): Horovod builds against NVIDIA's apt libnccl2 {gpu.nccl}, "
            "a second NCCL in the process",
            "use a torch whose wheel pins nvidia-nccl (PyPI's build, or torch >= 2.2) for one NCCL",
        )
    if wheel.nccl != gpu.nccl:
        return Verdict(
            "FAIL",
            f"gpu.nccl is {gpu.nccl} but torch {pt.version} {pt.variant} loads NCCL {wheel.nccl} "
            "(its nvidia-nccl wheel; Horovod is built against that one)",
            f'set gpu.nccl: "{wheel.nccl}"',
        )
    return Verdict(
        "PASS", f"NCCL {gpu.nccl}: the one torch {pt.version} {pt.variant} loads, and Horovod builds against"
    )


@recipe_rule("cudnn-torch", gpu_of, CPU_ONLY)
def cudnn_torch(recipe: Recipe, gpu: Gpu, kb: KnowledgeBase) -> Verdict:
    """One cuDNN per image: gpu.cudnn must be the cuDNN the torch wheel pins (TensorFlow loads that one too)."""
    pt = recipe.frameworks.pytorch
    wheel = kb.torch_wheel(pt.version, pt.variant) if pt else None
    if pt is None or wheel is None or wheel.cudnn is None:
        return Verdict("SKIP", "no PyTorch wheel pin to compare (see nccl-torch)")
    if major_minor(wheel.cudnn) != major_minor(gpu.cudnn):
        return Verdict(
            "FAIL",
            f"gpu.cudnn is {gpu.cudnn} but torch {pt.version} {pt.variant} pins cuDNN {wheel.cudnn}",
            f'set gpu.cudnn: "{major_minor(wheel.cudnn)}"',
        )
    return Verdict("PASS", f"cuDNN {wheel.cudnn} from torch's wheel, the image's only cuDNN")


@recipe_rule("nvcc-gcc", gpu_of, CPU_ONLY)
def nvcc_gcc(recipe: Recipe, gpu: Gpu, kb: KnowledgeBase) -> Verdict:
    """nvcc refuses a host GCC newer than its crt/host_config.h allows."""
    cuda, gcc = major_minor(gpu.cuda), kb.os_gcc.get(recipe.base.os)
    newest = kb.nvcc_host_gcc.get(cuda)
    if gcc is None or newest is None:
        return Verdict("SKIP", f"host GCC range of CUDA {cuda} or the GCC of {recipe.base.os} unknown")
    if parse_version(gcc) > parse_version(newest):
        return Verdict(
            "FAIL",
            f"{recipe.base.os} builds with GCC {gcc}; nvcc {cuda} accepts GCC <= {newest} (unsupported GNU version)",
            "use an older base OS or a newer CUDA",
        )
    return Verdict("PASS", f"GCC {gcc} of {recipe.base.os} within nvcc {cuda}'s host compilers (<= {newest})")


def _gpu_nodes(facts: Facts) -> dict[str, Mapping[str, Any]]:
    """host -> its `gpu` facts, for the nodes that have GPUs."""
    return {h: n["gpu"] for h, n in facts.ok_nodes().items() if (n.get("gpu") or {}).get("present")}


def _archs(facts: Facts) -> GpuArchs:
    return GpuArchs.from_label((facts.image or {}).get("gpu-archs", ""))


@rule("gpu-presence", needs=("image", "site", "nodes"))
def gpu_presence(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """A CUDA image needs GPUs; a CPU image leaves a GPU node's GPUs idle."""
    site, image = facts.site, facts.image
    if facts.scope == "login":
        return Verdict("SKIP", "the GPUs are checked in the job, on the compute nodes")
    cuda, with_gpu = image.get("cuda"), _gpu_nodes(facts)
    without = [h for h in facts.ok_nodes() if h not in with_gpu]
    if cuda and without:
        return Verdict(
            "FAIL",
            f"recipe {image.get('recipe')} is a CUDA stack but {', '.join(without)} has no GPUs",
            "use a CPU recipe",
        )
    if not cuda and with_gpu:
        gpus = next(iter(with_gpu.values()))["gpus"]
        where = ", ".join(with_gpu) if facts.observed else site.name
        return Verdict(
            "WARN",
            f"recipe {image.get('recipe')} is CPU-only: the {len(gpus)} {gpus[0]['name']} GPUs per node of "
            f"{where} stay idle",
        )
    if cuda and not site.container.gpu and in_container(site):
        return Verdict("WARN", f"site {site.name} does not pass GPUs into the container (container.gpu: false)")
    return Verdict("PASS", "GPU stack on a GPU site" if cuda else "CPU stack on a CPU site")


@rule("driver-cuda", needs=("image", "nodes"))
def driver_cuda(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """The node's driver must be new enough for the image's CUDA (fully, or through minor version compatibility)."""
    cuda, with_gpu = facts.image.get("cuda"), _gpu_nodes(facts)
    if not cuda or not with_gpu:
        return Verdict("SKIP", "CPU-only recipe or site (see gpu-presence)")
    cuda = major_minor(cuda)
    floor = kb.cuda_driver.get(cuda)
    if floor is None:
        return Verdict("SKIP", f"CUDA {cuda} unknown (see cuda-known)")
    unsaid = [h for h, g in with_gpu.items() if not g.get("driver")]
    if unsaid:
        return Verdict(
            "WARN", f"{', '.join(unsaid)} does not say its driver (node.driver); CUDA {cuda} needs >= {floor.toolkit}"
        )
    drivers = {h: g["driver"] for h, g in with_gpu.items()}
    old = {h: d for h, d in drivers.items() if parse_version(d) < parse_version(floor.minor_compat)}
    if old:
        return Verdict(
            "FAIL",
            f"driver {', '.join(sorted(set(old.values())))}{facts.on(old)} is older than CUDA {cuda} allows "
            f"({floor.minor_compat})",
            "pick a recipe with an older CUDA or update the driver",
        )
    compat = {h: d for h, d in drivers.items() if parse_version(d) < parse_version(floor.toolkit)}
    if compat:
        return Verdict(
            "WARN",
            f"driver {', '.join(sorted(set(compat.values())))}{facts.on(compat)} runs CUDA {cuda} only through "
            f"minor version compatibility (>= {floor.minor_compat}; full support from {floor.toolkit}): "
            "no PTX JIT for newer GPUs",
        )
    return Verdict("PASS", f"driver {', '.join(sorted(set(drivers.values())))} >= {floor.toolkit} (CUDA {cuda})")


@rule("gpu-arch", needs=("image", "nodes"))
def gpu_arch(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """The image must hold code for the node's GPU: a cubin for X.y runs on X.z with z >= y."""
    archs, with_gpu = _archs(facts), _gpu_nodes(facts)
    if not archs or not with_gpu:
        return Verdict("SKIP", "CPU-only recipe or site (see gpu-presence)")
    models: dict[tuple[str, str | None], list[str]] = {}
    for host, gpu in with_gpu.items():
        for card in gpu["gpus"]:
            models.setdefault((card["name"], card.get("capability")), []).append(host)
    unknown = sorted(name for name, capability in models if capability is None)
    if unknown:
        return Verdict(
            "WARN",
            f"GPU model {', '.join(unknown)} is not in the knowledge base (known: {', '.join(kb.gpu_capability)})",
        )
    running = []
    cuda = (facts.image or {}).get("cuda", "")
    floor = arch_floor(cuda, kb) if cuda else None
    for (name, capability), hosts in models.items():
        runs = archs.running_on(GpuArch.parse(capability))
        if floor and parse_version(capability) < parse_version(floor):
            return Verdict(
                "FAIL",
                f"{', '.join(dict.fromkeys(hosts))} has {name} (compute capability {capability}); CUDA {cuda} "
                f"of recipe {facts.image.get('recipe')} cannot target compute capability < {floor}",
                f"use a CUDA 12.x recipe for {name}",
            )
        if not runs:
            return Verdict(
                "FAIL",
                f"{', '.join(dict.fromkeys(hosts))} has {name} (compute capability {capability}); the recipe builds "
                f"{archs.label(', ')}",
                f"add {capability} to gpu.archs",
            )
        running.append(f"{name} ({capability}) runs the sm_{runs[-1].sm} code")
    return Verdict("PASS", "; ".join(running))


@rule("declared-gpus", needs=("site", "nodes", "observed"))
def declared_gpus(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """What the site declares about its GPUs (node.gpus, gpu_model, driver) is what the nodes have."""
    node = facts.site.node
    if facts.scope == "login":
        return Verdict("SKIP", "the GPUs are checked in the job, on the compute nodes")
    seen = {h: n.get("gpu") or {} for h, n in facts.ok_nodes().items()}
    if not node.gpus and not any(g.get("present") for g in seen.values()):
        notes = sorted({g.get("note", "") for g in seen.values()} - {""})
        return Verdict(
            "SKIP",
            f"no GPU on {', '.join(seen) or 'this node'} ({'; '.join(notes) or 'nvidia-smi reports none'}), "
            "and the site declares none",
        )
    wrong = []
    for host, gpu in seen.items():
        count, names = len(gpu.get("gpus", [])), sorted({c["name"] for c in gpu.get("gpus", [])})
        if count != node.gpus:
            wrong.append(
                (
                    f"{host} has {count} GPUs ({', '.join(names) or gpu.get('note') or 'none'}); "
                    f"the site says node.gpus: {node.gpus}",
                    f"set node.gpus: {count} in {facts.site.where} or run on the nodes it describes",
                )
            )
        elif node.gpu_model and not any(node.gpu_model in n.split() for n in names):
            wrong.append(
                (
                    f"{host} has {', '.join(names)}; the site says gpu_model: {node.gpu_model}",
                    f"set node.gpu_model in {facts.site.where}",
                )
            )
        elif node.driver and gpu.get("driver") != node.driver:
            wrong.append(
                (
                    f"{host} runs driver {gpu.get('driver')}; the site says node.driver: {node.driver}",
                    f'set node.driver: "{gpu.get("driver")}" in {facts.site.where}',
                )
            )
    if wrong:
        return Verdict(
            "FAIL" if any("node.gpus" in e for e, _ in wrong) else "WARN", "; ".join(e for e, _ in wrong), wrong[0][1]
        )
    return Verdict(
        "PASS", f"{node.gpus} x {node.gpu_model or 'GPU'} per node, driver {node.driver or 'as found'}, as declared"
    )


@rule("gpu-numa", needs=("site", "nodes", "observed"))
def gpu_numa(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """node.gpu_numa is each GPU's NUMA node on the nodes (sysfs numa_node of nvidia-smi's PCI bus ids):
    a wrong map binds a rank to the far socket's cores and memory. A GPU whose numa_node the kernel
    leaves at -1 (virtual machines, firmware without affinity tables) is unknown, not wrong."""
    declared = facts.site.node.gpu_numa
    if declared is None:
        return Verdict("SKIP", "the site has no node.gpu_numa (no per-rank GPU/NUMA placement)")
    if facts.scope == "login":
        return Verdict("SKIP", "the GPUs' NUMA nodes are checked in the job, on the compute nodes")
    seen = {h: (n.get("gpu_numa") or {}) for h, n in facts.ok_nodes().items()}
    known = {h: g["nodes"] for h, g in seen.items() if any(n is not None for n in g.get("nodes") or ())}
    if not known:
        notes = sorted({g.get("note", "") for g in seen.values()} - {""})
        unknown = [h for h, g in seen.items() if g.get("nodes")]
        why = f"the kernel does not say (numa_node -1) on {', '.join(unknown)}" if unknown else None
        return Verdict(
            "SKIP",
            f"node.gpu_numa {declared} not checked: {why or '; '.join(notes) or 'no GPU seen'}"
            + ("" if unknown else f" on {', '.join(seen)}"),
        )

    def matches(nodes: list[int | None]) -> bool:
        return len(nodes) == len(declared) and all(n is None or n == d for n, d in zip(nodes, declared, strict=False))

    wrong = {h: nodes for h, nodes in known.items() if not matches(list(nodes))}
    if wrong:
        host, nodes = next(iter(wrong.items()))
        shown = ", ".join("?" if n is None else str(n) for n in nodes)
        return Verdict(
            "FAIL",
            f"{', '.join(wrong)}: the GPUs sit on NUMA nodes [{shown}]; the site says node.gpu_numa: {declared}",
            f"set node.gpu_numa: [{shown}] in {facts.site.where} (`hpcbundle site detect` on {host} drafts it)",
        )
    partly = [h for h, nodes in known.items() if None in nodes]
    note = f" (some GPUs' NUMA node unknown to the kernel on {', '.join(partly)})" if partly else ""
    return Verdict("PASS", f"node.gpu_numa {declared} as seen{facts.on(known)}{note}")
