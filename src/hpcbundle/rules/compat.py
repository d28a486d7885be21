"""Compatibility rules: check a recipe alone against the knowledge base, rule by rule.

Each rule returns one Finding; `check_recipe` runs them all so a user sees every reason at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from ..config.fields import major_minor, parse_version
from ..config.recipes import Recipe
from .knowledge import KnowledgeBase

Status = Literal["PASS", "WARN", "FAIL", "SKIP"]


@dataclass(frozen=True)
class Finding:
    """The outcome of one rule: e.g. Finding('cuda-archs', 'FAIL', 'CUDA 13.0 cannot build sm_70 ...')."""

    rule: str
    status: Status
    message: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.rule:<20} {self.message}"


RecipeRule = Callable[[Recipe, KnowledgeBase], Finding]
RECIPE_RULES: list[RecipeRule] = []


def _rule(name: str) -> Callable[[Callable[[Recipe, KnowledgeBase], tuple[Status, str]]], RecipeRule]:
    """Register a recipe rule under `name`; the function returns (status, message)."""

    def register(check: Callable[[Recipe, KnowledgeBase], tuple[Status, str]]) -> RecipeRule:
        def rule(recipe: Recipe, kb: KnowledgeBase) -> Finding:
            status, message = check(recipe, kb)
            return Finding(name, status, message)

        rule.__name__ = name
        rule.__doc__ = check.__doc__
        RECIPE_RULES.append(rule)
        return rule

    return register


def check_recipe(recipe: Recipe, kb: KnowledgeBase) -> list[Finding]:
    """Apply every recipe rule; the recipe is refused if any finding is FAIL."""
    return [rule(recipe, kb) for rule in RECIPE_RULES]


def failed(findings: list[Finding]) -> bool:
    return any(f.status == "FAIL" for f in findings)


def _v(text: str):
    return parse_version(text)


def _in_range(version: str, bounds: tuple[str, str]) -> bool:
    return _v(bounds[0]) <= _v(major_minor(version)) <= _v(bounds[1])


_CPU_ONLY = ("SKIP", "CPU-only recipe")


@_rule("python-os")
def _python_os(recipe: Recipe, kb: KnowledgeBase) -> tuple[Status, str]:
    """The venv uses the distribution's python3, so the recipe's python must be that one."""
    distro = kb.os_python.get(recipe.base.os)
    if distro is None:
        return "FAIL", f"no python known for {recipe.base.os}; add it to compat.yaml os_python"
    if major_minor(recipe.python) != distro:
        return "FAIL", f"{recipe.base.os} ships python {distro}, not {recipe.python}; set python: \"{distro}\" or change base.os"
    return "PASS", f"{recipe.base.os} ships python {distro}"


@_rule("cuda-known")
def _cuda_known(recipe: Recipe, kb: KnowledgeBase) -> tuple[Status, str]:
    """A CUDA version must be in the driver and architecture tables before anything can be checked."""
    if recipe.gpu is None:
        return _CPU_ONLY
    cuda = major_minor(recipe.gpu.cuda)
    if cuda not in kb.cuda_driver or cuda not in kb.cuda_archs:
        return "FAIL", f"CUDA {cuda} is not in the knowledge base (known: {', '.join(kb.cuda_archs)}); add it to compat.yaml with its source"
    return "PASS", f"CUDA {cuda} needs Linux driver >= {kb.cuda_driver[cuda].toolkit}"


@_rule("cuda-archs")
def _cuda_archs(recipe: Recipe, kb: KnowledgeBase) -> tuple[Status, str]:
    """nvcc of this CUDA must be able to build every requested compute capability."""
    if recipe.gpu is None:
        return _CPU_ONLY
    cuda = major_minor(recipe.gpu.cuda)
    supported = kb.cuda_archs.get(cuda)
    if supported is None:
        return "SKIP", f"CUDA {cuda} unknown (see cuda-known)"
    missing = [a for a in recipe.gpu.archs if a not in supported]
    if missing:
        return "FAIL", (
            f"CUDA {cuda} cannot build compute capability {', '.join(missing)} "
            f"(it builds {supported[0]}..{supported[-1]}); use another CUDA or drop {', '.join(missing)} from gpu.archs"
        )
    return "PASS", f"CUDA {cuda} builds sm_{', sm_'.join(a.replace('.', '') for a in recipe.gpu.archs)}"


@_rule("cudnn-cuda")
def _cudnn_cuda(recipe: Recipe, kb: KnowledgeBase) -> tuple[Status, str]:
    """cuDNN ships separate builds per CUDA major; the recipe's must exist for its CUDA."""
    if recipe.gpu is None:
        return _CPU_ONLY
    cudnn, cuda_major = major_minor(recipe.gpu.cudnn), recipe.gpu.cuda.split(".")[0]
    majors = kb.cudnn_cuda_majors.get(cudnn)
    if majors is None:
        return "FAIL", f"cuDNN {cudnn} is not in the knowledge base; add it to compat.yaml cudnn_cuda_majors"
    if cuda_major not in majors:
        return "FAIL", f"cuDNN {cudnn} has no build for CUDA {cuda_major}.x (only {', '.join(majors)}.x)"
    return "PASS", f"cuDNN {cudnn} has a CUDA {cuda_major}.x build"


@_rule("nccl-cuda")
def _nccl_cuda(recipe: Recipe, kb: KnowledgeBase) -> tuple[Status, str]:
    """The NCCL package must be the build for the recipe's CUDA major.minor."""
    if recipe.gpu is None:
        return _CPU_ONLY
    if recipe.gpu.nccl_cuda != major_minor(recipe.gpu.cuda):
        return "FAIL", f"NCCL {recipe.gpu.nccl} is built for CUDA {recipe.gpu.nccl_cuda}, the recipe has {recipe.gpu.cuda}; pick the +cuda{major_minor(recipe.gpu.cuda)} package"
    return "PASS", f"NCCL {recipe.gpu.nccl_version} built for CUDA {recipe.gpu.nccl_cuda}"


@_rule("tensorflow-build")
def _tensorflow_build(recipe: Recipe, kb: KnowledgeBase) -> tuple[Status, str]:
    """TensorFlow's pip wheel is built against one CUDA/cuDNN and a range of Pythons."""
    tf = recipe.frameworks.tensorflow
    if tf is None:
        return "SKIP", "no TensorFlow"
    build = kb.tensorflow_build(tf.version)
    if build is None:
        return "FAIL", f"TensorFlow {tf.version} is not in the knowledge base; add it to compat.yaml tensorflow"
    if not _in_range(recipe.python, build.python):
        return "FAIL", f"TensorFlow {tf.version} supports Python {build.python[0]}-{build.python[1]}, not {recipe.python}"
    if recipe.gpu is None:
        if tf.package != "tensorflow-cpu":
            return "WARN", f"CPU-only recipe installs the GPU package {tf.package}; tensorflow-cpu is smaller"
        return "PASS", f"TensorFlow {tf.version} (CPU) for Python {recipe.python}"
    if tf.package == "tensorflow-cpu":
        return "FAIL", "GPU recipe installs tensorflow-cpu, which cannot use the GPU; set package: tensorflow"
    cuda, cudnn = recipe.gpu.cuda, recipe.gpu.cudnn
    if cuda.split(".")[0] != build.cuda.split(".")[0] or _v(major_minor(cuda)) < _v(build.cuda):
        return "FAIL", f"TensorFlow {tf.version} is built for CUDA {build.cuda}; the recipe has CUDA {cuda} (needs {build.cuda.split('.')[0]}.x >= {build.cuda})"
    if cudnn.split(".")[0] != build.cudnn.split(".")[0] or _v(major_minor(cudnn)) < _v(build.cudnn):
        return "FAIL", f"TensorFlow {tf.version} is built for cuDNN {build.cudnn}; the recipe has cuDNN {cudnn}"
    return "PASS", f"TensorFlow {tf.version} tested with CUDA {build.cuda}, cuDNN {build.cudnn}, Python {build.python[0]}-{build.python[1]}"


@_rule("pytorch-wheel")
def _pytorch_wheel(recipe: Recipe, kb: KnowledgeBase) -> tuple[Status, str]:
    """The torch wheel variant must exist, match the recipe's CUDA major (or CPU), and suit the Python."""
    pt = recipe.frameworks.pytorch
    if pt is None:
        return "SKIP", "no PyTorch"
    release = kb.pytorch_release(pt.version)
    if release is None:
        return "FAIL", f"PyTorch {pt.version} is not in the knowledge base; add it to compat.yaml pytorch"
    if not _in_range(recipe.python, release.python):
        return "FAIL", f"PyTorch {pt.version} supports Python {release.python[0]}-{release.python[1]}, not {recipe.python}"
    if pt.variant not in release.variants:
        return "FAIL", f"PyTorch {major_minor(pt.version)} has no {pt.variant} wheel (known: {', '.join(release.variants)})"
    if recipe.gpu is None:
        if pt.variant != "cpu":
            return "FAIL", f"CPU-only recipe installs the {pt.variant} wheel; use variant: cpu"
        return "PASS", f"PyTorch {pt.version}+cpu"
    if pt.variant == "cpu":
        return "FAIL", "GPU recipe installs the CPU wheel; pick a cuXYZ variant for the recipe's CUDA"
    wheel_cuda_major = pt.variant[2:-1]
    if wheel_cuda_major != recipe.gpu.cuda.split(".")[0]:
        return "FAIL", f"PyTorch wheel {pt.variant} carries CUDA {wheel_cuda_major}.x; the recipe has CUDA {recipe.gpu.cuda}"
    return "PASS", f"PyTorch {pt.version} {pt.variant} for Python {recipe.python}"


@_rule("pytorch-archs")
def _pytorch_archs(recipe: Recipe, kb: KnowledgeBase) -> tuple[Status, str]:
    """The torch wheel's own kernels must cover every GPU the recipe targets."""
    pt = recipe.frameworks.pytorch
    if pt is None or recipe.gpu is None:
        return "SKIP", "no PyTorch" if pt is None else _CPU_ONLY[1]
    release = kb.pytorch_release(pt.version)
    archs = release.variants.get(pt.variant) if release else None
    if archs is None:
        return "SKIP", "wheel unknown (see pytorch-wheel)"
    missing = [a for a in recipe.gpu.archs if a not in archs]
    if missing:
        return "FAIL", f"the PyTorch {pt.version} {pt.variant} wheel has no kernels for compute capability {', '.join(missing)}; pick a variant that covers them"
    return "PASS", f"PyTorch {pt.variant} wheel covers {', '.join(recipe.gpu.archs)}"


@_rule("horovod-tensorflow")
def _horovod_tensorflow(recipe: Recipe, kb: KnowledgeBase) -> tuple[Status, str]:
    """Horovod 0.28.1 supports Keras 2 only, so TensorFlow <= 2.15."""
    tf, hvd = recipe.frameworks.tensorflow, kb.horovod.get(recipe.horovod.version)
    if hvd is None:
        return "FAIL", f"Horovod {recipe.horovod.version} is not in the knowledge base; add it to compat.yaml horovod"
    if tf is None:
        return "SKIP", "no TensorFlow"
    if _v(major_minor(tf.version)) > _v(hvd.tensorflow_max):
        return "FAIL", (
            f"Horovod {recipe.horovod.version} supports TensorFlow <= {hvd.tensorflow_max}; "
            f"TensorFlow {tf.version} ships Keras 3, which horovod.keras does not support (horovod#4040)"
        )
    return "PASS", f"Horovod {recipe.horovod.version} supports TensorFlow {tf.version} (Keras 2)"


@_rule("horovod-pytorch")
def _horovod_pytorch(recipe: Recipe, kb: KnowledgeBase) -> tuple[Status, str]:
    """PyTorch >= 2.1 needs C++17, which the Horovod 0.28.1 sdist only gets with the cxx17 patch."""
    pt, hvd = recipe.frameworks.pytorch, kb.horovod.get(recipe.horovod.version)
    if pt is None or hvd is None:
        return "SKIP", "no PyTorch" if pt is None else "Horovod unknown (see horovod-tensorflow)"
    if _v(pt.version) < _v(hvd.pytorch_min):
        return "FAIL", f"Horovod {recipe.horovod.version} needs PyTorch >= {hvd.pytorch_min}"
    if _v(major_minor(pt.version)) >= _v(hvd.pytorch_cxx17_from) and "cxx17" not in recipe.horovod.patches:
        return "FAIL", (
            f"PyTorch {pt.version} needs C++17 but Horovod {recipe.horovod.version} builds as C++14; "
            "add cxx17 to horovod.patches"
        )
    return "PASS", f"Horovod {recipe.horovod.version} builds with PyTorch {pt.version}" + (
        " (C++17 patch)" if "cxx17" in recipe.horovod.patches else ""
    )


@_rule("horovod-ops")
def _horovod_ops(recipe: Recipe, kb: KnowledgeBase) -> tuple[Status, str]:
    """GPU stacks allreduce through NCCL; CPU stacks cannot build NCCL operations."""
    ops = recipe.horovod.tensor_operations
    if recipe.gpu is None and "nccl" in ops:
        return "FAIL", "CPU-only recipe asks for NCCL tensor operations; drop nccl from horovod.tensor_operations"
    if recipe.gpu is not None and "nccl" not in ops:
        return "FAIL", "GPU recipe without NCCL tensor operations would allreduce through host memory; add nccl"
    return "PASS", "tensor operations: " + ", ".join(ops)


@_rule("mpi-abi")
def _mpi_abi(recipe: Recipe, kb: KnowledgeBase) -> tuple[Status, str]:
    """The image's MPI must belong to a known ABI family so a host MPI can be matched to it."""
    mpi = recipe.mpi
    abi = kb.mpi_abi.get(mpi.flavour)
    if abi is None:
        return "FAIL", f"MPI flavour {mpi.flavour} has no ABI family in compat.yaml"
    if abi.family == "by_major_minor":
        series = major_minor(mpi.version)
        if series not in abi.known:
            return "FAIL", f"Open MPI {series} is not a known series (known: {', '.join(abi.known)})"
        return "PASS", f"ABI family openmpi-{series}: the host needs Open MPI {series}.x"
    if abi.min is not None and _v(mpi.version) < _v(abi.min):
        return "FAIL", f"{mpi.flavour} {mpi.version} predates the MPICH ABI ({mpi.flavour} >= {abi.min})"
    return "PASS", f"ABI family {abi.family}: any MPICH-ABI host MPI (MPICH >= 3.1, Intel MPI >= 5) can launch it"
