"""The compatibility knowledge base (data/compat.yaml) as a validated model with look-ups."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from pydantic import Field

from ..config.fields import Version, major_minor
from ..config.loading import parse_yaml, validate
from ..config.model import StrictModel


class DriverFloor(StrictModel):
    toolkit: Version
    minor_compat: Version


class TensorFlowBuild(StrictModel):
    cuda: Version
    cudnn: Version
    python: tuple[Version, Version]
    keras: str


class PyTorchRelease(StrictModel):
    python: tuple[Version, Version]
    pypi_variant: str | None = None
    variants: dict[str, list[Version]] = Field(default_factory=dict)


class HorovodRelease(StrictModel):
    tensorflow_max: Version
    pytorch_min: Version
    pytorch_cxx17_from: Version


class MpiAbi(StrictModel):
    family: str
    known: list[Version] = Field(default_factory=list)
    min: Version | None = None


class KnowledgeBase(StrictModel):
    """What is known to work together; every table cites its source in data/compat.yaml."""

    cuda_driver: dict[str, DriverFloor]
    cuda_archs: dict[str, list[Version]]
    gpu_capability: dict[str, Version]
    cudnn_cuda_majors: dict[str, list[str]]
    os_python: dict[str, Version]
    tensorflow: dict[str, TensorFlowBuild]
    pytorch: dict[str, PyTorchRelease]
    horovod: dict[str, HorovodRelease]
    mpi_abi: dict[str, MpiAbi]

    def tensorflow_build(self, version: str) -> TensorFlowBuild | None:
        return self.tensorflow.get(major_minor(version))

    def pytorch_release(self, version: str) -> PyTorchRelease | None:
        return self.pytorch.get(major_minor(version))


@lru_cache(maxsize=1)
def knowledge_base() -> KnowledgeBase:
    """The shipped knowledge base, read once."""
    source = resources.files("hpcbundle") / "data" / "compat.yaml"
    return validate(KnowledgeBase, parse_yaml(source.read_text(encoding="utf-8"), "compat.yaml"), "compat.yaml")


def pytorch_requirement(version: str, variant: str, kb: KnowledgeBase) -> str:
    """The pip requirement for a torch wheel variant.

    PyPI carries one variant per release (kb.pytorch[...].pypi_variant); any other variant is a
    local version that only PyTorch's own wheel index or a wheelhouse serves:

    >>> pytorch_requirement("2.1.2", "cu121", knowledge_base())
    'torch==2.1.2'
    >>> pytorch_requirement("2.1.2", "cu118", knowledge_base())
    'torch==2.1.2+cu118'
    """
    release = kb.pytorch_release(version)
    if release is not None and release.pypi_variant == variant:
        return f"torch=={version}"
    return f"torch=={version}+{variant}"
