"""Where things go in an image, and the `ImageSpec` every building block reads (pure data).

The image's shared paths (the venv, the wheelhouse, the examples, the build directory, CUDA's home)
and the spec's types live here, below the blocks; what belongs to one component (its prefix, its
packages, its pinned versions) lives in its block, and `derive.image_spec` puts the two together.

The build context of every image holds two directories, `examples/` (copied to /examples) and
`wheelhouse/` (maybe empty): wheels, the Horovod sdist and source tarballs that pip (`--find-links`)
and the source builds use before the network. Build with PIP_NO_INDEX=1 to stay fully offline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..config.recipes import Recipe
from ..knowledge.labels import MANIFEST

VENV = "/opt/venv"
WHEELHOUSE = "/wheelhouse"
EXAMPLES = "/examples"
CUDA_HOME = "/usr/local/cuda"
BUILD_DIR = "/tmp/build"
CONTEXT_DIRS = ("examples", "wheelhouse")
BASE_CONSTRAINTS = "/etc/pip/constraint.txt"
"""Where a base image that freezes its packages keeps their pins (NGC's images): where it exists, the
frameworks and the user's packages install against it (`pip install -c`), so the base's torch stays."""
"""What a build context holds (relative to where `docker build` / `apptainer build` runs)."""


@dataclass(frozen=True)
class ImageLayout:
    """Where things go: fixed paths in an image, shell variables in the host install script.

    Values are used inside double quotes in the snippets, so a host path may hold spaces.
    """

    host: bool
    venv: str
    site_packages: str
    build_dir: str
    horovod_cache: str
    pip: str
    pip_flags: str


@dataclass(frozen=True)
class CudaTree:
    """CUDA from PyPI's wheels (gpu.source: wheels): where the toolkit lands and what must be linked."""

    dir: str
    build_wheels: tuple[str, ...]
    runtime_wheels: tuple[str, ...]
    cudart: str

    @property
    def requirements(self) -> tuple[str, ...]:
        return (*self.build_wheels, *self.runtime_wheels)

    @property
    def build_names(self) -> tuple[str, ...]:
        """The wheels only the compile needs (the slim stage uninstalls them)."""
        return tuple(req.split("==")[0] for req in self.build_wheels)


@dataclass(frozen=True)
class ImageSpec:
    """Everything the templates need besides the recipe itself; build with `derive.image_spec()`."""

    wheelhouse: ClassVar[str] = WHEELHOUSE
    examples: ClassVar[str] = EXAMPLES
    manifest_path: ClassVar[str] = MANIFEST

    recipe: Recipe
    layout: ImageLayout
    cuda_home: str | None
    cuda_tree: CudaTree | None
    nccl_home: str | None
    """What HOROVOD_NCCL_HOME names when torch's wheel brings NCCL (None: the base image's NCCL)."""
    nccl_dir: str | None
    """torch's nvidia/nccl itself (in the image the same as nccl_home; the host script links it in its build dir)."""
    prefixes: tuple[str, ...]
    """The source builds' install prefixes (the MPI's, UCX's): copied to the runtime stage, on its search paths."""
    build_requirements: tuple[str, ...]
    """pip's cmake for the wheels route (blocks/venv.py), else nothing: the OS's cmake builds."""
    framework_requirements: tuple[str, ...]
    check_build: tuple[str, ...]
    copies: tuple[str, ...]
    runtime_env: dict[str, str]
    labels: dict[str, str]
    manifest: str
    gcc_max: str | None = None
    """The newest host GCC major nvcc of the recipe's CUDA accepts (the install script checks the host's)."""
    gcc13_from: str | None = None
    """The GCC major from which Horovod needs the gcc13 patch (the install script refuses it unpatched)."""
    py312_from: str | None = None
    """The Python from which Horovod needs the py312 patch (the install script refuses it unpatched)."""

    @property
    def venv(self) -> str:
        return self.layout.venv

    @property
    def pip(self) -> str:
        return self.layout.pip

    @property
    def pip_flags(self) -> str:
        return self.layout.pip_flags

    @property
    def site_packages(self) -> str:
        return self.layout.site_packages

    @property
    def base_constraints(self) -> str:
        return BASE_CONSTRAINTS

    @property
    def pip_install(self) -> str:
        """`<venv python> -m pip install [flags]`: the image reads its wheelhouse first; the host script uses
        pip's own configuration (PIP_NO_INDEX, PIP_FIND_LINKS, its download cache)."""
        return " ".join(part for part in (self.layout.pip, "install", self.layout.pip_flags) if part)


def wheel_libs(recipe: Recipe, layout: ImageLayout, cuda_home: str | None, nccl_dir: str | None) -> tuple[str, ...]:
    """Library directories of the NVIDIA wheels that must be found at run time (one NCCL, one cuDNN)."""
    libs = []
    if nccl_dir:
        libs.append(f"{nccl_dir}/lib")
        if recipe.frameworks.tensorflow:
            # TensorFlow's pip wheel dlopens libcudnn.so.8: it finds torch's cuDNN wheel here.
            libs.append(nccl_dir.rsplit("/", 1)[0] + "/cudnn/lib")
    if recipe.gpu and recipe.gpu.source == "wheels" and cuda_home:
        # lib64: the install script's toolkit may be the host's (HPCBUNDLE_CUDA_HOME), which has no lib/.
        libs.append(f"{cuda_home}/{'lib64' if layout.host else 'lib'}")
    return tuple(libs)


def search_env(
    recipe: Recipe,
    layout: ImageLayout,
    prefixes: tuple[str, ...],
    first_libs: tuple[str, ...] = (),
    first_bins: tuple[str, ...] = (),
) -> dict[str, str]:
    """PATH / LD_LIBRARY_PATH (and Intel MPI's variables) for the venv and the image's `prefixes`.

    Values keep what the base image or the container runtime set (Apptainer's --nv adds to
    LD_LIBRARY_PATH), so they use shell/Dockerfile `${VAR}` syntax and must be double-quoted.
    The install script's host has its own MPI and UCX: their prefixes are the images' only.
    """
    venv = layout.venv
    bins, libs = [f"{venv}/bin", *first_bins], list(first_libs)
    for prefix in () if layout.host else prefixes:
        bins.append(f"{prefix}/bin")
        libs.append(f"{prefix}/lib")
    if recipe.mpi.install == "pip":
        libs += [f"{venv}/lib", f"{venv}/lib/libfabric"]
    env = {"PATH": ":".join(bins) + ":${PATH}"}
    if libs:
        env["LD_LIBRARY_PATH"] = ":".join(libs) + "${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
    if recipe.mpi.install == "pip":
        env["I_MPI_ROOT"] = venv
        env["FI_PROVIDER_PATH"] = f"{venv}/lib/libfabric/prov"
    return env
