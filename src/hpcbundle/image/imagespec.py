"""What goes into an image, derived from a recipe: layout, build inputs, environment, metadata.

Pure data the building blocks (image/blocks/: apt packages, source builds, Horovod's flags, ...)
and the templates in containers/ read: the image's paths, where CUDA and NCCL are, the wheels,
the run-time environment, the labels and the manifest, once for every format.

The build context of every image holds two directories, `examples/` (copied to /examples) and
`wheelhouse/` (maybe empty): wheels, the Horovod sdist and source tarballs that pip (`--find-links`)
and the source builds use before the network. Build with PIP_NO_INDEX=1 to stay fully offline.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import ClassVar

from .. import __version__
from ..config.fields import major_minor
from ..config.recipes import Recipe
from ..knowledge.compat import CudaWheels, KnowledgeBase, pytorch_requirement
from ..knowledge.labels import MANIFEST, NVIDIA_CONTAINER_ENV, image_labels

VENV = "/opt/venv"
MPI_PREFIX = "/opt/openmpi"
UCX_PREFIX = "/opt/ucx"
WHEELHOUSE = "/wheelhouse"
EXAMPLES = "/examples"
CUDA_HOME = "/usr/local/cuda"
BUILD_DIR = "/tmp/build"
CUDA_STUB_DIR = f"{BUILD_DIR}/cuda-stubs"
"""Holds libcuda.so.1 -> the toolkit's stub only while Horovod builds (build hosts have no GPU driver)."""
HOROVOD_CACHE = f"{WHEELHOUSE}/horovod"
"""Prebuilt Horovod wheels, one directory per versions key (`horovod_key`): installed instead of building."""
CMAKE_FOR_WHEELS = "cmake==4.4.4"
"""The wheels route builds with pip's cmake (the one measured with CUDA 13 wheels; Debian 12's is 3.25)."""
CONTEXT_DIRS = ("examples", "wheelhouse")
"""What a build context holds (relative to where `docker build` / `apptainer build` runs)."""

# Horovod 0.28.1's build and run-time helpers: its setup.py and horovodrun import them, and the
# build runs without build isolation (as scripts/setup/horovod-wheel.sh builds it on the host).
# Pinned so offline builds can find them. cffi >= 2: tensorflow's dependencies pull a cryptography
# that needs it, and an older pin here made every re-run of the install script swap cffi twice.
HOROVOD_HELPERS = (
    "wheel==0.43.0",
    "packaging==24.0",
    "psutil==5.9.8",
    "PyYAML==6.0.1",
    "cloudpickle==3.0.0",
    "cffi==2.1.1",
)

CHECK_BUILD_NAMES = {"tensorflow": "TensorFlow", "pytorch": "PyTorch", "mpi": "MPI", "gloo": "Gloo", "nccl": "NCCL"}
"""How `horovodrun --check-build` names each framework, controller and tensor operation."""


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


def image_layout(recipe: Recipe) -> ImageLayout:
    """The image's layout: /opt/venv, /tmp/build, /wheelhouse (pip finds wheels there first)."""
    return ImageLayout(
        host=False,
        venv=VENV,
        site_packages=f"{VENV}/lib/python{recipe.python}/site-packages",
        build_dir=BUILD_DIR,
        horovod_cache=f"{HOROVOD_CACHE}/{horovod_key(recipe)}",
        pip=f"{VENV}/bin/python -m pip",
        pip_flags=f"--no-cache-dir --find-links {WHEELHOUSE}",
    )


def host_layout(recipe: Recipe) -> ImageLayout:
    """The install script's layout: shell variables its preamble sets (containers/shell/install.sh.j2)."""
    return ImageLayout(
        host=True,
        venv="${HPCBUNDLE_VENV}",
        site_packages="${HPCBUNDLE_SITE}",
        build_dir="${HPCBUNDLE_BUILD}",
        horovod_cache=f"${{HPCBUNDLE_CACHE}}/horovod/{horovod_key(recipe)}-py${{HPCBUNDLE_PYVER}}",
        pip='"${HPCBUNDLE_VENV}/bin/python" -m pip',
        pip_flags="",
    )


def horovod_key(recipe: Recipe) -> str:
    """The versions a Horovod wheel depends on, as a short name for its cache directory.

    Everything that changes the compiled wheel goes in: Horovod and its patches, frameworks, MPI,
    CUDA, NCCL, archs, controllers, operations, build variables, OS and Python (the install script
    adds the Python it really runs)::

        horovod-0.28.1-<12 hex digits>
    """
    gpu = recipe.gpu
    parts = {
        "horovod": recipe.horovod.model_dump(mode="json"),
        "frameworks": recipe.frameworks.model_dump(mode="json"),
        "mpi": [recipe.mpi.flavour, recipe.mpi.version, recipe.mpi.install],
        "gpu": gpu.model_dump(mode="json") if gpu else None,
        "os": recipe.base.os,
        "python": recipe.python,
    }
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]
    return f"horovod-{recipe.horovod.version}-{digest}"


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
    """Everything the templates need besides the recipe itself; build with `image_spec()`."""

    wheelhouse: ClassVar[str] = WHEELHOUSE
    examples: ClassVar[str] = EXAMPLES
    manifest_path: ClassVar[str] = MANIFEST
    cuda_stub_dir: ClassVar[str] = CUDA_STUB_DIR
    horovod_helpers: ClassVar[tuple[str, ...]] = HOROVOD_HELPERS

    recipe: Recipe
    layout: ImageLayout
    cuda_home: str | None
    cuda_tree: CudaTree | None
    nccl_home: str | None
    """What HOROVOD_NCCL_HOME names when torch's wheel brings NCCL (None: the base image's NCCL)."""
    nccl_dir: str | None
    """torch's nvidia/nccl itself (in the image the same as nccl_home; the host script links it in its build dir)."""
    build_requirements: tuple[str, ...]
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
    def pip_install(self) -> str:
        """`<venv python> -m pip install [flags]`: the image reads its wheelhouse first; the host script uses
        pip's own configuration (PIP_NO_INDEX, PIP_FIND_LINKS, its download cache)."""
        return " ".join(part for part in (self.layout.pip, "install", self.layout.pip_flags) if part)


def image_spec(recipe: Recipe, kb: KnowledgeBase, host: bool = False) -> ImageSpec:
    """Derive the image's content from `recipe`; e.g. for recipes/cpu-local.yaml::

    spec.framework_requirements == ("tensorflow-cpu==2.15.1", "torch==2.13.0+cpu")
    spec.check_build == ("Frameworks: TensorFlow", "Frameworks: PyTorch", "Controllers: MPI", ...)

    `host=True` lays the same content out for the bare-metal install script (a venv anywhere).
    """
    labels = image_labels(recipe, kb)
    layout = host_layout(recipe) if host else image_layout(recipe)
    tree = _cuda_tree(recipe, kb)
    site = layout.site_packages
    nccl_dir = nccl_home = None
    if _nccl_from_torch(recipe, kb):
        nccl_dir = "${HPCBUNDLE_NCCL_DIR}" if host else f"{site}/nvidia/nccl"
        nccl_home = f"{layout.build_dir}/nccl" if host else nccl_dir
    if tree is not None:
        cuda_home: str | None = "${HPCBUNDLE_CUDA_HOME}" if host else f"{site}/nvidia/{tree.dir}"
    else:
        cuda_home = CUDA_HOME if recipe.gpu else None
    return ImageSpec(
        recipe=recipe,
        layout=layout,
        cuda_home=cuda_home,
        cuda_tree=tree,
        nccl_home=nccl_home,
        nccl_dir=nccl_dir,
        build_requirements=(CMAKE_FOR_WHEELS,) if tree else (),
        gcc_max=kb.nvcc_host_gcc.get(major_minor(recipe.gpu.cuda)) if recipe.gpu else None,
        gcc13_from=hvd.gcc13_patch_from if (hvd := kb.horovod.get(recipe.horovod.version)) else None,
        py312_from=hvd.py312_patch_from if hvd else None,
        framework_requirements=_framework_requirements(recipe, kb),
        check_build=_check_build(recipe),
        copies=(VENV, *([MPI_PREFIX] if recipe.mpi.install == "source" else []), *([UCX_PREFIX] if recipe.ucx else [])),
        runtime_env=search_env(recipe, layout, wheel_libs(recipe, layout, cuda_home, nccl_dir))
        | (NVIDIA_CONTAINER_ENV if tree is not None and not host else {}),
        labels=labels,
        manifest=_manifest(recipe, labels),
    )


def _nccl_from_torch(recipe: Recipe, kb: KnowledgeBase) -> bool:
    """True when torch's wheel brings NCCL as the nvidia-nccl wheel (the image's one NCCL)."""
    pt = recipe.frameworks.pytorch
    if recipe.gpu is None or pt is None:
        return False
    if recipe.gpu.source == "wheels":
        return True
    wheel = kb.torch_wheel(pt.version, pt.variant)
    return wheel is not None and wheel.nccl is not None


def _cuda_tree(recipe: Recipe, kb: KnowledgeBase) -> CudaTree | None:
    """The toolkit wheels for gpu.source: wheels (None for the image route or an unknown CUDA)."""
    gpu = recipe.gpu
    if gpu is None or gpu.source != "wheels":
        return None
    wheels: CudaWheels | None = kb.cuda_wheels.get(major_minor(gpu.cuda))
    assert wheels is not None, "the cuda-source rule refuses a CUDA without toolkit wheels before any render"
    return CudaTree(
        dir=wheels.dir,
        build_wheels=tuple(f"{name}=={version}" for name, version in wheels.build.items()),
        runtime_wheels=tuple(f"{name}=={version}" for name, version in wheels.runtime.items()),
        cudart=f"libcudart.so.{gpu.cuda.split('.')[0]}",
    )


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


def _framework_requirements(recipe: Recipe, kb: KnowledgeBase) -> tuple[str, ...]:
    fw = recipe.frameworks
    reqs = []
    if fw.tensorflow:
        reqs.append(f"{fw.tensorflow.package}=={fw.tensorflow.version}")
    if fw.pytorch:
        reqs.append(pytorch_requirement(fw.pytorch.version, fw.pytorch.variant, kb))
    return tuple(reqs)


def search_env(
    recipe: Recipe, layout: ImageLayout, first_libs: tuple[str, ...] = (), first_bins: tuple[str, ...] = ()
) -> dict[str, str]:
    """PATH / LD_LIBRARY_PATH (and Intel MPI's variables) for the image's own prefixes.

    Values keep what the base image or the container runtime set (Apptainer's --nv adds to
    LD_LIBRARY_PATH), so they use shell/Dockerfile `${VAR}` syntax and must be double-quoted.
    """
    venv = layout.venv
    bins, libs = [f"{venv}/bin", *first_bins], list(first_libs)
    if recipe.mpi.install == "source" and not layout.host:
        bins.append(f"{MPI_PREFIX}/bin")
        libs.append(f"{MPI_PREFIX}/lib")
    if recipe.ucx and not layout.host:
        bins.append(f"{UCX_PREFIX}/bin")
        libs.append(f"{UCX_PREFIX}/lib")
    if recipe.mpi.install == "pip":
        libs += [f"{venv}/lib", f"{venv}/lib/libfabric"]
    env = {"PATH": ":".join(bins) + ":${PATH}"}
    if libs:
        env["LD_LIBRARY_PATH"] = ":".join(libs) + "${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
    if recipe.mpi.install == "pip":
        env["I_MPI_ROOT"] = venv
        env["FI_PROVIDER_PATH"] = f"{venv}/lib/libfabric/prov"
    return env


def _check_build(recipe: Recipe) -> tuple[str, ...]:
    """`horovodrun --check-build` lines that must be [X], as 'Section: Name' (e.g. 'Controllers: MPI')."""
    hvd = recipe.horovod
    wanted = [
        ("Frameworks", recipe.frameworks.names),
        ("Controllers", hvd.controllers),
        ("Tensor Operations", hvd.tensor_operations),
    ]
    return tuple(f"{section}: {CHECK_BUILD_NAMES[name]}" for section, names in wanted for name in names)


def _manifest(recipe: Recipe, labels: dict[str, str]) -> str:
    """The JSON written to MANIFEST: the full recipe, the image layout and the labels, on one line."""
    layout = {
        "venv": VENV,
        "mpi_prefix": MPI_PREFIX if recipe.mpi.install == "source" else None,
        "ucx_prefix": UCX_PREFIX if recipe.ucx else None,
        "examples": EXAMPLES,
    }
    return json.dumps(
        {"hpcbundle_version": __version__, "recipe": recipe.model_dump(mode="json"), "layout": layout, "labels": labels}
    )
