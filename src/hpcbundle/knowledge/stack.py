"""The stack a recipe holds fixed: the packages the user's own pins (python_packages, requirements_file)
may not replace, each with the pin the recipe gives it and the key that sets it; e.g. for cpu-local
`stack_pins(recipe, kb)["torch"] == StackPin("torch==2.13.0+cpu", "frameworks.pytorch")`.
"""

from __future__ import annotations

from typing import NamedTuple

from ..config.recipes import Recipe
from .compat import KnowledgeBase, pytorch_requirement

FRAMEWORK_KEYS = {
    "torch": "frameworks.pytorch",
    "tensorflow": "frameworks.tensorflow",
    "tensorflow-cpu": "frameworks.tensorflow",
    "horovod": "horovod.version",
}
"""The packages Horovod is built with or against: only these keys choose them."""
WHEEL_FAMILIES = {"nvidia-": "gpu (torch's NVIDIA wheels)", "impi-": "mpi (Intel MPI's wheels)"}
"""Name prefixes of wheels the stack brings; the recipe's keys choose their versions."""

HELD_AS_BUILT = ("numpy",)
"""Packages the frameworks bring at a version only the build knows: always held at the one built."""


class StackPin(NamedTuple):
    """The stack's exact pin of one package and the recipe key that sets it."""

    pin: str
    key: str


def stack_pins(recipe: Recipe, kb: KnowledgeBase) -> dict[str, StackPin]:
    """The recipe's exact pins by canonical name: the frameworks (in recipe order), then Horovod."""
    fw, pins = recipe.frameworks, {}
    if fw.tensorflow:
        pins[fw.tensorflow.package] = StackPin(
            f"{fw.tensorflow.package}=={fw.tensorflow.version}", FRAMEWORK_KEYS[fw.tensorflow.package]
        )
    if fw.pytorch:
        pins["torch"] = StackPin(pytorch_requirement(fw.pytorch.version, fw.pytorch.variant, kb), "frameworks.pytorch")
    pins["horovod"] = StackPin(f"horovod=={recipe.horovod.version}", "horovod.version")
    return pins


def owned_by(name: str) -> str | None:
    """The recipe key that chooses the package `name` (canonical) for the stack, else None."""
    if name in FRAMEWORK_KEYS:
        return FRAMEWORK_KEYS[name]
    return next((key for prefix, key in WHEEL_FAMILIES.items() if name.startswith(prefix)), None)
