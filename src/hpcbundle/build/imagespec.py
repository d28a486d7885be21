"""What goes into an image, derived from a recipe: layout, packages, build inputs, environment, metadata.

Pure data for the templates in containers/: the templates only lay it out, so a rule about the
image (which HOROVOD_* flags, which apt packages, which labels) lives here, once, for both formats.

The build context of every image holds two directories, `examples/` (copied to /examples) and
`wheelhouse/` (maybe empty): wheels, the Horovod sdist and source tarballs that pip (`--find-links`)
and the source builds use before the network. Build with PIP_NO_INDEX=1 to stay fully offline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from .. import __version__
from ..config.errors import UserError
from ..config.recipes import Recipe
from ..rules.facts import MANIFEST, image_labels
from ..rules.knowledge import KnowledgeBase, pytorch_requirement

VENV = "/opt/venv"
MPI_PREFIX = "/opt/openmpi"
UCX_PREFIX = "/opt/ucx"
WHEELHOUSE = "/wheelhouse"
EXAMPLES = "/examples"
CUDA_HOME = "/usr/local/cuda"
CUDA_STUB_DIR = "/tmp/build/cuda-stubs"
"""Holds libcuda.so.1 -> the toolkit's stub only while Horovod builds (build hosts have no GPU driver)."""
CONTEXT_DIRS = ("examples", "wheelhouse")
"""What a build context holds (relative to where `docker build` / `apptainer build` runs)."""

# Horovod 0.28.1's build and run-time helpers: its setup.py and horovodrun import them, and the
# build runs without build isolation (as scripts/setup/horovod-wheel.sh builds it on the host).
# Pinned so offline builds can find them.
HOROVOD_HELPERS = (
    "wheel==0.43.0",
    "packaging==24.0",
    "psutil==5.9.8",
    "PyYAML==6.0.1",
    "cloudpickle==3.0.0",
    "cffi==1.16.0",
)

CHECK_BUILD_NAMES = {"tensorflow": "TensorFlow", "pytorch": "PyTorch", "mpi": "MPI", "gloo": "Gloo", "nccl": "NCCL"}
"""How `horovodrun --check-build` names each framework, controller and tensor operation."""


class Packages(NamedTuple):
    """apt packages for the build stage and for the runtime stage."""

    build: tuple[str, ...]
    runtime: tuple[str, ...]


BASE_PACKAGES = Packages(
    ("build-essential", "cmake", "python3-dev", "python3-venv"), ("libgomp1", "openssh-client", "python3")
)
FETCH_PACKAGES = Packages(("bzip2", "ca-certificates", "curl"), ())
UCX_PACKAGES = Packages(
    ("libibverbs-dev", "libnuma-dev", "librdmacm-dev"), ("ibverbs-providers", "libibverbs1", "libnuma1", "librdmacm1")
)
DISTRO_MPI_PACKAGES = {
    "openmpi": Packages(("libopenmpi-dev", "openmpi-bin"), ("libopenmpi3", "openmpi-bin")),
    "mpich": Packages(("libmpich-dev", "mpich"), ("libmpich12", "mpich")),
}


@dataclass(frozen=True)
class SourceBuild:
    """An autotools package built from a pinned, sha256-checked tarball into `prefix`."""

    name: str
    url: str
    sha256: str
    configure: str
    options: tuple[str, ...]
    prefix: str

    @property
    def tarball(self) -> str:
        """The file name: 'https://.../openmpi-4.1.6.tar.bz2' -> 'openmpi-4.1.6.tar.bz2'."""
        return self.url.rsplit("/", 1)[1]


@dataclass(frozen=True)
class ImageSpec:
    """Everything the two templates need besides the recipe itself; build with `image_spec()`."""

    venv: ClassVar[str] = VENV
    wheelhouse: ClassVar[str] = WHEELHOUSE
    examples: ClassVar[str] = EXAMPLES
    manifest_path: ClassVar[str] = MANIFEST
    cuda_home: ClassVar[str] = CUDA_HOME
    cuda_stub_dir: ClassVar[str] = CUDA_STUB_DIR
    horovod_helpers: ClassVar[tuple[str, ...]] = HOROVOD_HELPERS
    pip: ClassVar[str] = f"{VENV}/bin/python -m pip"
    pip_flags: ClassVar[str] = f"--no-cache-dir --find-links {WHEELHOUSE}"

    recipe: Recipe
    packages: Packages
    pinned: Packages
    source_builds: tuple[SourceBuild, ...]
    mpi_requirements: tuple[str, ...]
    framework_requirements: tuple[str, ...]
    horovod_env: dict[str, str]
    check_build: tuple[str, ...]
    imports: tuple[str, ...]
    copies: tuple[str, ...]
    runtime_env: dict[str, str]
    labels: dict[str, str]
    manifest: str


def image_spec(recipe: Recipe, kb: KnowledgeBase) -> ImageSpec:
    """Derive the image's content from `recipe`; e.g. for recipes/cpu-local.yaml::

    spec.framework_requirements == ("tensorflow-cpu==2.15.1", "torch==2.13.0+cpu")
    spec.check_build == ("Frameworks: TensorFlow", "Frameworks: PyTorch", "Controllers: MPI", ...)
    """
    labels = image_labels(recipe)
    return ImageSpec(
        recipe=recipe,
        packages=_packages(recipe),
        pinned=_pinned(recipe),
        source_builds=_source_builds(recipe),
        mpi_requirements=(f"impi-devel=={recipe.mpi.version}", f"impi-rt=={recipe.mpi.version}")
        if recipe.mpi.install == "pip"
        else (),
        framework_requirements=_framework_requirements(recipe, kb),
        horovod_env=_horovod_env(recipe),
        check_build=_check_build(recipe),
        imports=tuple(f"horovod.{'torch' if name == 'pytorch' else name}" for name in recipe.frameworks.names),
        copies=(VENV, *([MPI_PREFIX] if recipe.mpi.install == "source" else []), *([UCX_PREFIX] if recipe.ucx else [])),
        runtime_env=_search_env(recipe),
        labels=labels,
        manifest=_manifest(recipe, labels),
    )


def _packages(recipe: Recipe) -> Packages:
    parts = [BASE_PACKAGES]
    if recipe.mpi.install == "source" or recipe.ucx:
        parts.append(FETCH_PACKAGES)
    if recipe.ucx:
        parts.append(UCX_PACKAGES)
    if recipe.mpi.install == "distro":
        parts.append(DISTRO_MPI_PACKAGES[recipe.mpi.flavour])
    return Packages(*(tuple(sorted({p for part in parts for p in getattr(part, stage)})) for stage in Packages._fields))


def _pinned(recipe: Recipe) -> Packages:
    """Exact apt versions: NCCL for GPU stacks (the base images hold another version)."""
    if recipe.gpu is None:
        return Packages((), ())
    nccl = recipe.gpu.nccl
    return Packages((f"libnccl2={nccl}", f"libnccl-dev={nccl}"), (f"libnccl2={nccl}",))


def _source_builds(recipe: Recipe) -> tuple[SourceBuild, ...]:
    """UCX (if any) first, then Open MPI against it, each with `--prefix` at a fixed path."""
    builds = []
    if recipe.ucx:
        ucx = recipe.ucx
        builds.append(
            SourceBuild(
                "ucx",
                ucx.source.url,
                ucx.source.sha256,
                "./contrib/configure-release",
                tuple(ucx.configure),
                UCX_PREFIX,
            )
        )
    if recipe.mpi.install == "source":
        mpi = recipe.mpi
        assert mpi.source is not None  # guaranteed by the recipe model
        options = (
            "--enable-orterun-prefix-by-default",
            *([f"--with-ucx={UCX_PREFIX}"] if recipe.ucx else []),
            *mpi.configure,
        )
        builds.append(SourceBuild(mpi.flavour, mpi.source.url, mpi.source.sha256, "./configure", options, MPI_PREFIX))
    return tuple(builds)


def _framework_requirements(recipe: Recipe, kb: KnowledgeBase) -> tuple[str, ...]:
    fw = recipe.frameworks
    reqs = []
    if fw.tensorflow:
        reqs.append(f"{fw.tensorflow.package}=={fw.tensorflow.version}")
    if fw.pytorch:
        reqs.append(pytorch_requirement(fw.pytorch.version, fw.pytorch.variant, kb))
    return tuple(reqs)


def _search_env(recipe: Recipe, first_libs: tuple[str, ...] = ()) -> dict[str, str]:
    """PATH / LD_LIBRARY_PATH (and Intel MPI's variables) for the image's own prefixes.

    Values keep what the base image or the container runtime set (Apptainer's --nv adds to
    LD_LIBRARY_PATH), so they use shell/Dockerfile `${VAR}` syntax and must be double-quoted.
    """
    bins, libs = [f"{VENV}/bin"], list(first_libs)
    if recipe.mpi.install == "source":
        bins.append(f"{MPI_PREFIX}/bin")
        libs.append(f"{MPI_PREFIX}/lib")
    if recipe.ucx:
        bins.append(f"{UCX_PREFIX}/bin")
        libs.append(f"{UCX_PREFIX}/lib")
    if recipe.mpi.install == "pip":
        libs += [f"{VENV}/lib", f"{VENV}/lib/libfabric"]
    env = {"PATH": ":".join(bins) + ":${PATH}"}
    if libs:
        env["LD_LIBRARY_PATH"] = ":".join(libs) + "${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
    if recipe.mpi.install == "pip":
        env["I_MPI_ROOT"] = VENV
        env["FI_PROVIDER_PATH"] = f"{VENV}/lib/libfabric/prov"
    return env


def _horovod_env(recipe: Recipe) -> dict[str, str]:
    """The environment of the Horovod build: search paths, HOROVOD_WITH_*/WITHOUT_*, GPU options."""
    fw, hvd = recipe.frameworks, recipe.horovod
    env = _search_env(recipe, (CUDA_STUB_DIR,) if recipe.gpu else ())
    wanted = {
        "TENSORFLOW": fw.tensorflow is not None,
        "PYTORCH": fw.pytorch is not None,
        "MXNET": False,
        "MPI": "mpi" in hvd.controllers,
        "GLOO": "gloo" in hvd.controllers,
    }
    env |= {f"HOROVOD_{'WITH' if on else 'WITHOUT'}_{name}": "1" for name, on in wanted.items()}
    if recipe.gpu:
        env |= {
            "HOROVOD_GPU_OPERATIONS": "NCCL",
            "HOROVOD_NCCL_LINK": "SHARED",
            "HOROVOD_CUDA_HOME": CUDA_HOME,
            "HOROVOD_BUILD_CUDA_CC_LIST": ",".join(arch.replace(".", "") for arch in recipe.gpu.archs),
        }
        if fw.pytorch:
            env["TORCH_CUDA_ARCH_LIST"] = ";".join(recipe.gpu.archs)
    # A pip-installed cmake >= 4 refuses gloo's old cmake_minimum_required; older cmake ignores this.
    env["CMAKE_POLICY_VERSION_MINIMUM"] = "3.5"
    clash = sorted(set(hvd.build_env) & set(env))
    if clash:
        raise UserError.at(
            f"recipe {recipe.name}",
            f"horovod.build_env.{clash[0]}",
            "is derived from the recipe",
            "remove it; set frameworks, controllers or gpu instead",
        )
    return env | hvd.build_env


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
