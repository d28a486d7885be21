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
    gcc13_patch_from: Version | None = None
    py312_patch_from: Version | None = None


class CudaWheels(StrictModel):
    """PyPI's CUDA toolkit wheels for one CUDA version: name -> exact version."""

    dir: str
    build: dict[str, Version]
    runtime: dict[str, Version]
    cuobjdump: dict[str, Version] = Field(default_factory=dict)


class TorchWheel(StrictModel):
    """What one torch release/variant loads: the versions of the nvidia-nccl and nvidia-cudnn wheels it pins."""

    nccl: Version | None = None
    cudnn: Version | None = None
    bundled: bool = False


class MpiAbi(StrictModel):
    """One MPI's ABI family; `launcher_from`: the release whose launcher and process manager replaced the older
    ones, so a host launcher on one side starting an image's ranks on the other is a pair no manual covers."""

    family: str
    known: list[Version] = Field(default_factory=list)
    min: Version | None = None
    launcher_from: Version | None = None


class DistroMpi(StrictModel):
    """What an OS's MPI package brings: its fast transports, its UCX's transports, the fabric user space it pulls in."""

    transports: list[str] = Field(default_factory=list)
    ucx_transports: list[str] = Field(default_factory=list)
    fabric_libs: list[str] = Field(default_factory=list)


class KnowledgeBase(StrictModel):
    """What is known to work together; every table cites its source in data/compat.yaml."""

    cuda_driver: dict[str, DriverFloor]
    cuda_archs: dict[str, list[Version]]
    gpu_capability: dict[str, Version]
    cudnn_cuda_majors: dict[str, list[str]]
    cuda_wheels: dict[str, CudaWheels]
    os_gcc: dict[str, Version]
    nvcc_host_gcc: dict[str, Version]
    os_python: dict[str, Version]
    tensorflow: dict[str, TensorFlowBuild]
    pytorch: dict[str, PyTorchRelease]
    torchvision: dict[str, Version]
    torch_wheels: dict[str, dict[str, TorchWheel]]
    horovod: dict[str, HorovodRelease]
    mpi_abi: dict[str, MpiAbi]
    distro_mpi: dict[str, dict[str, DistroMpi]] = Field(default_factory=dict)

    def tensorflow_build(self, version: str) -> TensorFlowBuild | None:
        return self.tensorflow.get(major_minor(version))

    def pytorch_release(self, version: str) -> PyTorchRelease | None:
        return self.pytorch.get(major_minor(version))

    def torchvision_for(self, torch_version: str) -> str | None:
        """The torchvision release paired with torch `torch_version` (same patch), if the table knows it.

        >>> knowledge_base().torchvision_for("2.9.1")
        '0.24.1'
        """
        paired = self.torchvision.get(major_minor(torch_version))
        return f"{paired}.{_patch(torch_version)}" if paired else None

    def torch_wheel(self, version: str, variant: str) -> TorchWheel | None:
        """The NCCL and cuDNN that torch `version` (variant cuXYZ) pins, if known.

        >>> knowledge_base().torch_wheel("2.11.0", "cu130").nccl
        '2.28.9'
        """
        return self.torch_wheels.get(major_minor(version), {}).get(variant)


def _patch(version: str) -> str:
    """The patch number of a release: '2.9.1' -> '1', '2.13' -> '0'."""
    parts = version.split("+")[0].split(".")
    return parts[2] if len(parts) > 2 else "0"


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
    return variant_requirement("torch", version, version, variant, kb)


def variant_requirement(package: str, version: str, torch_version: str, variant: str, kb: KnowledgeBase) -> str:
    """The pip requirement for `package` built for torch `torch_version`'s wheel variant: the same +variant
    local version as torch where torch has one, so pip takes both from the PyTorch index for the variant.

    >>> variant_requirement("torchvision", "0.28.0", "2.13.0", "cpu", knowledge_base())
    'torchvision==0.28.0+cpu'
    """
    release = kb.pytorch_release(torch_version)
    if release is not None and release.pypi_variant == variant:
        return f"{package}=={version}"
    return f"{package}=={version}+{variant}"
