"""Rules for the frameworks and Horovod: the frameworks vs CUDA, cuDNN and Python; Horovod vs both and the launch."""

from __future__ import annotations

from ..config.fields import major_minor, parse_version
from ..config.recipes import Horovod, PyTorch, Recipe, TensorFlow
from ..knowledge.compat import KnowledgeBase
from ..knowledge.labels import NONE
from .engine import Facts, Verdict, refusal, request_refusal, rule
from .gpu import CPU_ONLY, not_known, recipe_rule

NO_PYTORCH, NO_TENSORFLOW = Verdict("SKIP", "no PyTorch"), Verdict("SKIP", "no TensorFlow")
NO_HOROVOD = Verdict("SKIP", "the recipe builds no Horovod")


def horovod_of(recipe: Recipe) -> Horovod | None:
    """The recipe's Horovod; None without one (a torch.distributed image)."""
    return recipe.horovod


def pytorch_of(recipe: Recipe) -> PyTorch | None:
    """The recipe's PyTorch; None without one."""
    return recipe.frameworks.pytorch


def tensorflow_of(recipe: Recipe) -> TensorFlow | None:
    """The recipe's TensorFlow; None without one."""
    return recipe.frameworks.tensorflow


def _python_refused(release: str, python: str, bounds: tuple[str, str]) -> Verdict | None:
    """The FAIL for a `python` outside the range a framework `release` supports; None inside it."""
    if parse_version(bounds[0]) <= parse_version(major_minor(python)) <= parse_version(bounds[1]):
        return None
    return Verdict("FAIL", f"{release} supports Python {bounds[0]}-{bounds[1]}, not {python}")


def _runs_build(have: str, built: str) -> bool:
    """A library built against `built` (CUDA, cuDNN) runs on `have`: the same major, not older."""
    return have.split(".")[0] == built.split(".")[0] and parse_version(major_minor(have)) >= parse_version(built)


@recipe_rule("tensorflow-build", tensorflow_of, NO_TENSORFLOW)
def tensorflow_build(recipe: Recipe, tf: TensorFlow, kb: KnowledgeBase) -> Verdict:
    """TensorFlow's pip wheel is built against one CUDA/cuDNN and a range of Pythons."""
    build = kb.tensorflow_build(tf.version)
    if build is None:
        return not_known(f"TensorFlow {tf.version}", "tensorflow")
    if refused := _python_refused(f"TensorFlow {tf.version}", recipe.python, build.python):
        return refused
    if recipe.gpu is None:
        if tf.package != "tensorflow-cpu":
            return Verdict("WARN", f"CPU-only recipe installs the GPU package {tf.package}; tensorflow-cpu is smaller")
        return Verdict("PASS", f"TensorFlow {tf.version} (CPU) for Python {recipe.python}")
    if tf.package == "tensorflow-cpu":
        return Verdict("FAIL", "GPU recipe installs tensorflow-cpu, which cannot use the GPU; set package: tensorflow")
    cuda, cudnn = recipe.gpu.cuda, recipe.gpu.cudnn
    if not _runs_build(cuda, build.cuda):
        return Verdict(
            "FAIL",
            f"TensorFlow {tf.version} is built for CUDA {build.cuda}; the recipe has CUDA {cuda} "
            f"(needs {build.cuda.split('.')[0]}.x >= {build.cuda})",
        )
    if not _runs_build(cudnn, build.cudnn):
        return Verdict(
            "FAIL", f"TensorFlow {tf.version} is built for cuDNN {build.cudnn}; the recipe has cuDNN {cudnn}"
        )
    return Verdict(
        "PASS",
        f"TensorFlow {tf.version} tested with CUDA {build.cuda}, cuDNN {build.cudnn}, "
        f"Python {build.python[0]}-{build.python[1]}",
    )


@recipe_rule("pytorch-wheel", pytorch_of, NO_PYTORCH)
def pytorch_wheel(recipe: Recipe, pt: PyTorch, kb: KnowledgeBase) -> Verdict:
    """The torch wheel variant must exist, match the recipe's CUDA major (or CPU), and suit the Python."""
    release = kb.pytorch_release(pt.version)
    if release is None:
        return not_known(f"PyTorch {pt.version}", "pytorch")
    if refused := _python_refused(f"PyTorch {pt.version}", recipe.python, release.python):
        return refused
    if pt.variant not in release.variants:
        return Verdict(
            "FAIL",
            f"PyTorch {major_minor(pt.version)} has no {pt.variant} wheel (known: {', '.join(release.variants)})",
        )
    if recipe.gpu is None:
        if pt.variant != "cpu":
            return Verdict("FAIL", f"CPU-only recipe installs the {pt.variant} wheel", "use variant: cpu")
        return Verdict("PASS", f"PyTorch {pt.version}+cpu")
    if pt.variant == "cpu":
        return Verdict("FAIL", "GPU recipe installs the CPU wheel; pick a cuXYZ variant for the recipe's CUDA")
    wheel_cuda_major = pt.variant[2:-1]
    if wheel_cuda_major != recipe.gpu.cuda.split(".")[0]:
        return Verdict(
            "FAIL",
            f"PyTorch wheel {pt.variant} carries CUDA {wheel_cuda_major}.x; the recipe has CUDA {recipe.gpu.cuda}",
        )
    return Verdict("PASS", f"PyTorch {pt.version} {pt.variant} for Python {recipe.python}")


TORCHVISION_KEY = "frameworks.pytorch.torchvision"
TORCHVISION_SOURCE = "compat.yaml torchvision, from pytorch/vision's README"


@rule("torchvision-pairing", needs=("recipe",), on_load=True)
def torchvision_pairing(facts: Facts, kb: KnowledgeBase) -> list[Verdict]:
    """torchvision is the release paired with the recipe's torch (or `false`: none)."""
    pt = facts.recipe.frameworks.pytorch
    if pt is None:
        return [NO_PYTORCH]
    if pt.torchvision is False:
        return [Verdict("SKIP", f"{TORCHVISION_KEY} is false: no torchvision")]
    paired = kb.torchvision_for(pt.version)
    if paired is None:
        problem = f"no torchvision is known to pair with torch {pt.version} ({TORCHVISION_SOURCE})"
        return [refusal(TORCHVISION_KEY, problem, "set torchvision: false, or add the pairing to compat.yaml")]
    if pt.torchvision is not None and major_minor(pt.torchvision) != major_minor(paired):
        problem = (
            f"torchvision {pt.torchvision} does not pair with torch {pt.version}: {paired} does ({TORCHVISION_SOURCE})"
        )
        return [refusal(TORCHVISION_KEY, problem, f"use {paired}, or leave the key out to get it")]
    return []


@recipe_rule("pytorch-archs", pytorch_of, NO_PYTORCH)
def pytorch_archs(recipe: Recipe, pt: PyTorch, kb: KnowledgeBase) -> Verdict:
    """The torch wheel's own kernels must cover every GPU the recipe targets."""
    if recipe.gpu is None:
        return CPU_ONLY
    release = kb.pytorch_release(pt.version)
    archs = release.variants.get(pt.variant) if release else None
    if archs is None:
        return Verdict("SKIP", "wheel unknown (see pytorch-wheel)")
    missing = [a for a in recipe.gpu.archs if a not in archs]
    if missing:
        return Verdict(
            "FAIL",
            f"the PyTorch {pt.version} {pt.variant} wheel has no kernels for compute capability {', '.join(missing)}",
            "pick a variant that covers them",
        )
    return Verdict("PASS", f"PyTorch {pt.variant} wheel covers {', '.join(recipe.gpu.archs)}")


@recipe_rule("horovod-tensorflow", horovod_of, NO_HOROVOD)
def horovod_tensorflow(recipe: Recipe, horovod: Horovod, kb: KnowledgeBase) -> Verdict:
    """Horovod 0.28.1 supports Keras 2 only, so TensorFlow <= 2.15."""
    tf, hvd = recipe.frameworks.tensorflow, kb.horovod.get(horovod.version)
    if hvd is None:
        return not_known(f"Horovod {horovod.version}", "horovod")
    if tf is None:
        return NO_TENSORFLOW
    if parse_version(major_minor(tf.version)) > parse_version(hvd.tensorflow_max):
        return Verdict(
            "FAIL",
            (
                f"Horovod {horovod.version} supports TensorFlow <= {hvd.tensorflow_max}; "
                f"TensorFlow {tf.version} ships Keras 3, which horovod.keras does not support (horovod#4040)"
            ),
        )
    return Verdict("PASS", f"Horovod {horovod.version} supports TensorFlow {tf.version} (Keras 2)")


@recipe_rule("horovod-pytorch", horovod_of, NO_HOROVOD)
def horovod_pytorch(recipe: Recipe, horovod: Horovod, kb: KnowledgeBase) -> Verdict:
    """PyTorch >= 2.1 needs C++17, which the Horovod 0.28.1 sdist only gets with the cxx17 patch."""
    pt, hvd = recipe.frameworks.pytorch, kb.horovod.get(horovod.version)
    if pt is None:
        return NO_PYTORCH
    if hvd is None:
        return Verdict("SKIP", "Horovod unknown (see horovod-tensorflow)")
    if parse_version(pt.version) < parse_version(hvd.pytorch_min):
        return Verdict("FAIL", f"Horovod {horovod.version} needs PyTorch >= {hvd.pytorch_min}")
    if (
        parse_version(major_minor(pt.version)) >= parse_version(hvd.pytorch_cxx17_from)
        and "cxx17" not in horovod.patches
    ):
        return Verdict(
            "FAIL",
            (
                f"PyTorch {pt.version} needs C++17 but Horovod {horovod.version} builds as C++14; "
                "add cxx17 to horovod.patches"
            ),
        )
    return Verdict(
        "PASS",
        f"Horovod {horovod.version} builds with PyTorch {pt.version}"
        + (" (C++17 patch)" if "cxx17" in horovod.patches else ""),
    )


def _horovod_patch(horovod: Horovod, patch: str, found: str, version: str, first_broken: str, why: str) -> Verdict:
    """FAIL unless `horovod` has `patch` where `version` (of what is `found`) >= `first_broken`.

    `why` says what breaks; the PASS line names `found` and whether the patch is on.
    """
    patched = patch in horovod.patches
    if parse_version(version) >= parse_version(first_broken) and not patched:
        return Verdict("FAIL", why, f"add {patch} to horovod.patches")
    return Verdict("PASS", found + (f" ({patch} patch)" if patched else ""))


@recipe_rule("horovod-gcc13", horovod_of, NO_HOROVOD)
def horovod_gcc13(recipe: Recipe, horovod: Horovod, kb: KnowledgeBase) -> Verdict:
    """GCC >= 13 stops including <string>/<stdexcept> transitively: Horovod 0.28.1 needs the gcc13 patch there."""
    hvd, gcc = kb.horovod.get(horovod.version), kb.os_gcc.get(recipe.base.os)
    if hvd is None or hvd.gcc13_patch_from is None or gcc is None:
        return Verdict("SKIP", "no GCC 13 rule for this Horovod, or the GCC of the base OS is unknown")
    why = (
        f"{recipe.base.os} builds with GCC {gcc}; Horovod {horovod.version} does not compile with "
        f"GCC >= {hvd.gcc13_patch_from} (common.h, group_table.h, handle_manager.cc lack <string>, <stdexcept>)"
    )
    return _horovod_patch(horovod, "gcc13", f"GCC {gcc} of {recipe.base.os}", gcc, hvd.gcc13_patch_from, why)


@recipe_rule("horovod-py312", horovod_of, NO_HOROVOD)
def horovod_py312(recipe: Recipe, horovod: Horovod, kb: KnowledgeBase) -> Verdict:
    """Python >= 3.12 has no distutils, which Horovod 0.28.1's torch build and horovodrun import: the py312 patch."""
    hvd = kb.horovod.get(horovod.version)
    if hvd is None or hvd.py312_patch_from is None:
        return Verdict("SKIP", "no Python 3.12 rule for this Horovod")
    why = (
        f"Python {recipe.python} has no distutils; Horovod {horovod.version}'s torch build and horovodrun "
        f"import it (Python >= {hvd.py312_patch_from})"
    )
    return _horovod_patch(horovod, "py312", f"Python {recipe.python}", recipe.python, hvd.py312_patch_from, why)


@recipe_rule("horovod-ops", horovod_of, NO_HOROVOD)
def horovod_ops(recipe: Recipe, horovod: Horovod, kb: KnowledgeBase) -> Verdict:
    """GPU stacks allreduce through NCCL; CPU stacks cannot build NCCL operations."""
    ops = horovod.tensor_operations
    if recipe.gpu is None and "nccl" in ops:
        return Verdict(
            "FAIL", "CPU-only recipe asks for NCCL tensor operations; drop nccl from horovod.tensor_operations"
        )
    if recipe.gpu is not None and "nccl" not in ops:
        return Verdict(
            "FAIL", "GPU recipe without NCCL tensor operations would allreduce through host memory; add nccl"
        )
    return Verdict("PASS", "tensor operations: " + ", ".join(ops))


@rule("horovod-image", needs=("image", "site"))
def horovod_image(facts: Facts, kb: KnowledgeBase) -> Verdict:
    """A Horovod launch (--horovod, or the site's default wiring) needs Horovod in the image; a torch.distributed
    image (recipe without horovod, label horovod: none) is launched with --torch or --torchrun."""
    wiring = facts.request.wiring if facts.request else facts.site.torch.wiring
    built = facts.image.get("horovod")
    if wiring != "horovod":
        return Verdict("SKIP", f"--{wiring}: the ranks meet through torch.distributed, not Horovod")
    if built is None:
        return Verdict("SKIP", "the image does not say whether it has Horovod (see image-metadata)")
    if built == NONE:
        return request_refusal(
            "--horovod",
            f"{facts.image_source or 'the image'} has no Horovod (a torch.distributed image)",
            "launch it with --torch or --torchrun",
        )
    return Verdict("PASS", f"the image has Horovod {built}")
