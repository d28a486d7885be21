"""Recipes: one validated, matched software stack per YAML file in recipes/.

A recipe pins what goes into an image (base OS, Python, CUDA/cuDNN/NCCL, the MPI, UCX,
Horovod and its build, TensorFlow and/or PyTorch, GPU architectures). It says nothing about
any cluster: interfaces and MCA choices belong to sites.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from .errors import UserError
from .fields import BuildEnvName, ConfigureOption, EnvValue, Image, Line, Name, Sha256, Url, Version
from .gpuarchs import GpuArchs
from .loading import named_file, read_yaml, validate
from .model import StrictModel
from .packages import PackageSpec, RequirementsPath, read_requirements, requirements_at

OsName = Literal["ubuntu22.04", "ubuntu24.04", "debian12"]
PLAIN_IMAGES: dict[str, str] = {
    "ubuntu22.04": "ubuntu:22.04",
    "ubuntu24.04": "ubuntu:24.04",
    "debian12": "debian:bookworm",
}
"""The plain OS image of each base OS (the wheels route builds FROM these)."""


class Base(StrictModel):
    """The images the two stages start FROM; both must be the same OS (same python, same libc).

    A reference may pin a digest (`IMAGE:TAG@sha256:...`): the build then starts from exactly that
    image, and the image's labels record it.
    """

    os: OsName = Field(description="the base images' OS, e.g. debian12 or ubuntu22.04 (it picks the python)")
    build_image: Image = Field(description="FROM of the build stage, e.g. a CUDA devel image")
    runtime_image: Image = Field(description="FROM of the slim runtime stage")


CudaSource = Literal["image", "wheels"]
CUDA_IMAGE = "nvidia/cuda:"
"""The image route's base images are NVIDIA's CUDA images (maybe through a mirror: `<registry>/nvidia/cuda:`)."""


class Gpu(StrictModel):
    """The CUDA side of a GPU stack; absent for CPU-only recipes.

    `source` says where CUDA comes from: `image` (default) builds FROM an nvidia/cuda image, which
    holds the toolkit; `wheels` builds FROM a plain OS image and takes the toolkit (nvcc, runtime,
    headers) from PyPI's NVIDIA wheels, next to the ones the torch wheel pulls. Either way NCCL
    and cuDNN are the ones torch's wheel brings (`nccl` and `cudnn` name them), one copy each.
    """

    source: CudaSource = Field("image", description="where CUDA comes from: image (nvidia/cuda base) or wheels (PyPI)")
    cuda: Version = Field(description="the CUDA toolkit version, e.g. 12.2.2 (the base image's, or the wheels')")
    cudnn: Version = Field(description="the cuDNN torch's wheel pins (nvidia-cudnn-cuXX), major.minor")
    nccl: Version = Field(description="the NCCL torch's wheel pins (nvidia-nccl-cuXX), e.g. 2.28.9")
    archs: list[Version] = Field(min_length=1, description="compute capabilities to build for, e.g. ['7.5', '8.0']")

    @field_validator("nccl", mode="before")
    @classmethod
    def _not_apt(cls, value: object) -> object:
        if isinstance(value, str) and "+cuda" in value:
            plain = value.split("-", 1)[0]
            raise ValueError(
                f"{value!r} is an apt libnccl2 version; gpu.nccl is the bare NCCL version (the one torch's wheel "
                f'loads; the apt spelling is derived where an apt NCCL is needed): write "{plain}"'
            )
        return value

    @property
    def targets(self) -> GpuArchs:
        """`archs` parsed: each tool's spelling of them comes from here."""
        return GpuArchs.parse(self.archs)


class Tarball(StrictModel):
    """A pinned source tarball: fetched by URL, refused unless its sha256 matches."""

    url: Url = Field(description="where the pinned source tarball is (the wheelhouse's copy is used first)")
    sha256: Sha256 = Field(description="the tarball's sha256; a build refuses any other")


class Mpi(StrictModel):
    """The MPI inside the image. `source`: built from a tarball; `distro`: OS packages; `pip`: Intel MPI wheels."""

    flavour: Literal["openmpi", "intelmpi", "mpich"] = Field(
        description="the MPI in the image; the host MPI must share its ABI"
    )
    version: Version = Field(description="its version, e.g. 4.1.6")
    install: Literal["source", "distro", "pip"] = Field(
        description="source: built from mpi.source; distro: the OS packages; pip: Intel MPI's wheels"
    )
    source: Tarball | None = None
    configure: list[ConfigureOption] = Field(
        default_factory=list, description="extra ./configure options for install: source"
    )


FabricLib = Literal["verbs", "psm2"]
"""Fabric user space a runtime image carries: `verbs` (rdma-core: libibverbs1, ibverbs-providers,
librdmacm1; InfiniBand and RoCE for NCCL, UCX and Open MPI's openib btl), `psm2` (libpsm2-2; Omni-Path
for libfabric's psm2 provider, which Intel MPI uses)."""


class Ucx(StrictModel):
    """UCX built from source for Open MPI's pml ucx (InfiniBand/RoCE, CUDA-aware transfers)."""

    version: Version = Field(description="the UCX version, e.g. 1.15.0")
    source: Tarball
    configure: list[ConfigureOption] = Field(default_factory=list, description="extra ./configure options")


class TensorFlow(StrictModel):
    version: Version = Field(description="the TensorFlow version, e.g. 2.15.1")
    package: Literal["tensorflow", "tensorflow-cpu"] = Field("tensorflow", description="the pip package to install")


class PyTorch(StrictModel):
    version: Version = Field(description="the PyTorch version, e.g. 2.1.2")
    variant: str = Field(pattern=r"^(cpu|cu\d{3})$", description="wheel variant: cpu, cu118, cu121, ...")
    torchvision: Literal[False] | Version | None = Field(
        None,
        description="omitted: the torchvision the knowledge base pairs with torch; a version: must be that "
        "pairing; false: none (say why in a comment)",
    )
    torchaudio: Version | None = Field(None, description="the torchaudio version, installed only when given")


class Frameworks(StrictModel):
    tensorflow: TensorFlow | None = None
    pytorch: PyTorch | None = None

    @model_validator(mode="after")
    def _at_least_one(self) -> "Frameworks":
        if self.tensorflow is None and self.pytorch is None:
            raise ValueError("name at least one of tensorflow, pytorch")
        return self

    @property
    def names(self) -> list[str]:
        """Framework names in a fixed order, e.g. ['tensorflow', 'pytorch']."""
        return [name for name in ("tensorflow", "pytorch") if getattr(self, name) is not None]


class Horovod(StrictModel):
    """Horovod, built from its PyPI sdist (checksummed) with the recipe's HOROVOD_* flags."""

    version: Version = Field(description="the Horovod version, e.g. 0.28.1 (built from its PyPI sdist)")
    sdist_sha256: Sha256 = Field(description="the sdist's sha256; a build refuses any other")
    patches: list[Literal["cxx17", "gcc13", "py312"]] = Field(
        default_factory=list,
        description="cxx17: CMAKE_CXX_STANDARD 14 -> 17 in both CMakeLists.txt; "
        "gcc13: #include <string> and <stdexcept> where GCC >= 13 no longer pulls them in; "
        "py312: sysconfig and shutil.which for the distutils that Python >= 3.12 lacks",
    )
    controllers: list[Literal["mpi", "gloo"]] = Field(min_length=1, description="HOROVOD_WITH_MPI / HOROVOD_WITH_GLOO")
    tensor_operations: list[Literal["nccl", "mpi", "gloo"]] = Field(
        min_length=1, description="the collectives' back ends; nccl needs gpu"
    )
    build_env: dict[BuildEnvName, EnvValue] = Field(default_factory=dict, description="extra HOROVOD_* build variables")

    @field_validator("build_env")
    @classmethod
    def _horovod_keys(cls, env: dict[str, str]) -> dict[str, str]:
        for key in env:
            if not key.startswith("HOROVOD_"):
                raise ValueError(f"{key}: only HOROVOD_* variables belong here")
        return env


class Recipe(StrictModel):
    """One matched stack. See recipes/*.yaml for complete examples."""

    name: Name = Field(description="the recipe's name, the same as its file name without .yaml")
    description: Line = Field(description="one line on the stack, shown in the rendered files")
    base: Base
    python: Version = Field(description="the Python of base.os, e.g. 3.11 (the venv's site-packages path)")
    gpu: Gpu | None = None
    mpi: Mpi | None = Field(
        None,
        description="Absent: no MPI in the image (a recipe without horovod only); its torch.distributed ranks meet "
        "over Gloo, started by `launch --torch` or `--torchrun` (the site's mpirun or srun still starts the "
        "containers)",
    )
    ucx: Ucx | None = None
    fabric_libs: list[FabricLib] = Field(
        default_factory=list,
        description="fabric user space in the runtime image: verbs (InfiniBand/RoCE), psm2 (Omni-Path)",
    )
    frameworks: Frameworks
    horovod: Horovod | None = Field(
        None,
        description="Absent: a torch.distributed (DDP) image without Horovod: nothing compiles, the image checks "
        "torch.distributed and Gloo instead, its label says `horovod: none`, and it launches with --torch or "
        "--torchrun. Absent, not `horovod: none`, as gpu and ucx are absent where an image has none",
    )
    python_packages: list[PackageSpec] = Field(
        default_factory=list,
        description="your program's own Python packages, exact pins (name==VERSION), installed into the venv "
        "after Horovod with the stack held fixed",
    )
    requirements_file: RequirementsPath | None = Field(
        None,
        description="a requirements file beside the recipe with more exact pins, one a line "
        "(no -r, -c, -e or other options)",
    )
    _file_packages: tuple[str, ...] = PrivateAttr(default=())

    @field_validator("horovod", "mpi", mode="before")
    @classmethod
    def _absent_not_none(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str) and value.lower() == "none":
            name = info.field_name
            raise ValueError(
                f"none is not a section: an image without {name} leaves the {name} section out (delete the line)"
            )
        return value

    @property
    def is_gpu(self) -> bool:
        return self.gpu is not None

    @property
    def has_horovod(self) -> bool:
        return self.horovod is not None

    @property
    def user_packages(self) -> tuple[tuple[str, str], ...]:
        """(recipe key, pin) of each of the user's packages: `python_packages`, then `requirements_file`'s."""
        return (
            *(("python_packages", pin) for pin in self.python_packages),
            *(("requirements_file", pin) for pin in self._file_packages),
        )


def read_recipe(ref: str, recipes_dir: Path) -> Recipe:
    """Read one recipe by name or path and validate its shape; its `name` must match the file name.

    Shape only: hpcbundle.rules.loading.load_recipe reads it and also refuses the combinations the rules fail.
    """
    path = named_file(ref, recipes_dir, "recipe")
    recipe = validate(Recipe, read_yaml(path), str(path))
    if recipe.name != path.stem:
        raise UserError.at(
            str(path),
            "name",
            f"is {recipe.name!r} but the file is {path.name}",
            f"set name: {path.stem} or rename the file",
        )
    if recipe.requirements_file:
        recipe._file_packages = read_requirements(requirements_at(path, recipe.requirements_file), str(path))
    return recipe
