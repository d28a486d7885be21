"""The stack a recipe holds fixed: the packages the user's own pins (python_packages, requirements_file)
may not replace, each with the pin the recipe gives it and the key that sets it; e.g. for cpu-local
`stack_pins(recipe, kb)["torch"] == StackPin("torch==2.13.0+cpu", "frameworks.pytorch")`.
"""

from __future__ import annotations

from typing import NamedTuple

from ..config.recipes import PyTorch, Recipe
from .compat import KnowledgeBase, pytorch_requirement, variant_requirement

FRAMEWORK_KEYS = {
    "torch": "frameworks.pytorch",
    "torchvision": "frameworks.pytorch.torchvision",
    "torchaudio": "frameworks.pytorch.torchaudio",
    "tensorflow": "frameworks.tensorflow",
    "tensorflow-cpu": "frameworks.tensorflow",
    "horovod": "horovod.version",
}
"""The packages Horovod is built with or against: only these keys choose them."""
OTHER_DISTRIBUTIONS = {
    **dict.fromkeys(
        (
            "tensorflow-gpu",
            "tensorflow-intel",
            "tensorflow-macos",
            "tensorflow-aarch64",
            "tensorflow-cpu-aws",
            "tensorflow-rocm",
            "intel-tensorflow",
            "intel-tensorflow-avx512",
            "tf-nightly",
            "tf-nightly-cpu",
            "tf-nightly-gpu",
        ),
        "frameworks.tensorflow",
    ),
    **dict.fromkeys(("torch-nightly", "pytorch"), "frameworks.pytorch"),
}
"""The frameworks' other names on the package index (a vendor's build, a nightly, an old name): each installs a
second copy of the framework beside the stack's, so only the recipe's keys choose one."""
WHEEL_FAMILIES = {"nvidia-": "gpu (torch's NVIDIA wheels)", "impi-": "mpi (Intel MPI's wheels)"}
"""Name prefixes of wheels the stack brings; the recipe's keys choose their versions."""

HELD_AS_BUILT = ("numpy",)
"""Packages the frameworks bring at a version only the build knows: always held at the one built."""


class StackPin(NamedTuple):
    """The stack's exact pin of one package and the recipe key that sets it."""

    pin: str
    key: str


def stack_pins(recipe: Recipe, kb: KnowledgeBase) -> dict[str, StackPin]:
    """The recipe's exact pins by canonical name: the frameworks (in recipe order), then Horovod (where it has one)."""
    fw, pins = recipe.frameworks, {}
    if fw.tensorflow:
        pins[fw.tensorflow.package] = StackPin(
            f"{fw.tensorflow.package}=={fw.tensorflow.version}", FRAMEWORK_KEYS[fw.tensorflow.package]
        )
    if fw.pytorch:
        pins.update(_pytorch_pins(fw.pytorch, kb))
    if recipe.horovod:
        pins["horovod"] = StackPin(f"horovod=={recipe.horovod.version}", "horovod.version")
    return pins


def torchvision_version(pt: PyTorch, kb: KnowledgeBase) -> str | None:
    """The torchvision the image carries beside torch: the recipe's version, else the knowledge base's
    pairing; None for `torchvision: false` or a torch the table does not know."""
    if pt.torchvision is False:
        return None
    return pt.torchvision or kb.torchvision_for(pt.version)


def _pytorch_pins(pt: PyTorch, kb: KnowledgeBase) -> dict[str, StackPin]:
    """torch, then torchvision and torchaudio where the image carries them, each with torch's wheel variant."""
    pins = {"torch": StackPin(pytorch_requirement(pt.version, pt.variant, kb), FRAMEWORK_KEYS["torch"])}
    for name, version in (("torchvision", torchvision_version(pt, kb)), ("torchaudio", pt.torchaudio)):
        if version:
            pins[name] = StackPin(variant_requirement(name, version, pt.version, pt.variant, kb), FRAMEWORK_KEYS[name])
    return pins


def owned_by(name: str) -> str | None:
    """The recipe key that chooses the package `name` (canonical) for the stack, else None."""
    if name in FRAMEWORK_KEYS or name in OTHER_DISTRIBUTIONS:
        return FRAMEWORK_KEYS.get(name) or OTHER_DISTRIBUTIONS[name]
    return next((key for prefix, key in WHEEL_FAMILIES.items() if name.startswith(prefix)), None)
