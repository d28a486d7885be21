"""Horovod built from its sdist with the recipe's HOROVOD_* flags (or its cached wheel), then checked."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from ...config.fields import major_minor
from ...config.recipes import Recipe
from ..spec import WHEELHOUSE, ImageSpec
from .base import BLOCKS, Apt, Block, Packages, Snippet, search_env
from .nccl import torch_nccl

HOROVOD_CACHE = f"{WHEELHOUSE}/horovod"
"""Prebuilt Horovod wheels, one directory per versions key (`horovod_key`): installed instead of building."""
TORCH_CHECK = (
    "import sys, torch, torch.distributed as dist; ok = dist.is_available() and dist.is_gloo_available(); "
    'print("torch", torch.__version__, "torch.distributed with gloo:", ok); sys.exit(not ok)'
)
"""The check of an image without Horovod (python -c): torch imports and torch.distributed has Gloo."""
CHECK_BUILD_NAMES = {"tensorflow": "TensorFlow", "pytorch": "PyTorch", "mpi": "MPI", "gloo": "Gloo", "nccl": "NCCL"}
"""How `horovodrun --check-build` names each framework, controller and tensor operation."""


def horovod_key(recipe: Recipe) -> str:
    """The versions a Horovod wheel depends on, as a short name for its cache directory.

    Everything that changes the compiled wheel goes in: Horovod and its patches, frameworks (not torchvision
    nor torchaudio), MPI, CUDA, NCCL, archs, controllers, operations, build variables, OS and Python (the install script
    adds the Python it really runs)::

        horovod-0.28.1-<12 hex digits>
    """
    gpu = recipe.gpu
    parts = {
        "horovod": recipe.horovod.model_dump(mode="json"),
        # torchvision and torchaudio sit beside torch; Horovod is built against torch alone
        "frameworks": recipe.frameworks.model_dump(mode="json", exclude={"pytorch": {"torchvision", "torchaudio"}}),
        "mpi": [recipe.mpi.flavour, recipe.mpi.version, recipe.mpi.install],
        "gpu": gpu.model_dump(mode="json") if gpu else None,
        "os": recipe.base.os,
        "python": recipe.python,
    }
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]
    return f"horovod-{recipe.horovod.version}-{digest}"


def horovod_cache(recipe: Recipe, host: bool) -> str:
    """The directory of the cached wheel for these versions: in the image's wheelhouse, or the install script's
    cache (its key ends with the Python the script really runs)."""
    if host:
        return f"${{HPCBUNDLE_CACHE}}/horovod/{horovod_key(recipe)}-py${{HPCBUNDLE_PYVER}}"
    return f"{HOROVOD_CACHE}/{horovod_key(recipe)}"


@dataclass(frozen=True)
class HorovodBuild:
    """What the templates around the steps say of Horovod's build: where its cached wheel is looked for, and
    what the install script checks on the host before building there (nvcc's newest host GCC, and the GCC
    and Python from which this Horovod needs its gcc13 and py312 patches)."""

    cache: str
    gcc_max: str | None
    gcc13_from: str | None
    py312_from: str | None


def horovod_build(spec: ImageSpec) -> HorovodBuild | None:
    """The cache and the host's bounds for `spec`'s Horovod and CUDA, from the knowledge base (None: no Horovod)."""
    recipe, kb = spec.recipe, spec.kb
    if recipe.horovod is None:
        return None
    hvd = kb.horovod.get(recipe.horovod.version)
    return HorovodBuild(
        cache=horovod_cache(recipe, spec.layout.host),
        gcc_max=kb.nvcc_host_gcc.get(major_minor(recipe.gpu.cuda)) if recipe.gpu else None,
        gcc13_from=hvd.gcc13_patch_from if hvd else None,
        py312_from=hvd.py312_patch_from if hvd else None,
    )


def check_build(recipe: Recipe) -> tuple[str, ...]:
    """`horovodrun --check-build` lines that must be [X], as 'Section: Name' (e.g. 'Controllers: MPI')."""
    hvd = recipe.horovod
    assert hvd is not None, "only a recipe with horovod builds it"
    wanted = [
        ("Frameworks", recipe.frameworks.names),
        ("Controllers", hvd.controllers),
        ("Tensor Operations", hvd.tensor_operations),
    ]
    return tuple(f"{section}: {CHECK_BUILD_NAMES[name]}" for section, names in wanted for name in names)


def horovod_env(spec: ImageSpec) -> dict[str, str]:
    """The environment of the Horovod build: search paths, HOROVOD_WITH_*/WITHOUT_*, GPU options.

    The GPU archs come in Horovod's spelling (HOROVOD_BUILD_CUDA_CC_LIST="70,80") and, with
    PyTorch, in PyTorch's (TORCH_CUDA_ARCH_LIST="7.0;8.0"). `horovod.build_env` adds variables;
    the build-env-derived rule refuses one that would replace a variable derived here.
    """
    recipe, layout, cuda_home = spec.recipe, spec.layout, spec.cuda_home
    fw, hvd, gpu = recipe.frameworks, recipe.horovod, recipe.gpu
    assert hvd is not None, "only a recipe with horovod builds it"
    wheels = gpu is not None and gpu.source == "wheels"
    # libcuda.so.1 -> the toolkit's stub, only while Horovod builds (build hosts have no GPU driver).
    stub = (f"{layout.build_dir}/cuda-stubs",) if gpu and not wheels else ()
    env = search_env(spec, (f"{cuda_home}/bin",) if wheels else (), stub)
    wanted = {
        "TENSORFLOW": fw.tensorflow is not None,
        "PYTORCH": fw.pytorch is not None,
        "MXNET": False,
        "MPI": "mpi" in hvd.controllers,
        "GLOO": "gloo" in hvd.controllers,
    }
    env |= {f"HOROVOD_{'WITH' if on else 'WITHOUT'}_{name}": "1" for name, on in wanted.items()}
    if gpu:
        assert cuda_home is not None  # every GPU recipe has one
        env |= {
            "HOROVOD_GPU_OPERATIONS": "NCCL",
            "HOROVOD_NCCL_LINK": "SHARED",
            "HOROVOD_CUDA_HOME": cuda_home,
            **({"HOROVOD_NCCL_HOME": nccl.home} if (nccl := torch_nccl(spec)) else {}),
            "HOROVOD_BUILD_CUDA_CC_LIST": gpu.targets.horovod_cc_list(),
        }
        if fw.pytorch:
            env["TORCH_CUDA_ARCH_LIST"] = gpu.targets.torch_list()
    # A pip-installed cmake >= 4 refuses gloo's old cmake_minimum_required; older cmake ignores this.
    env["CMAKE_POLICY_VERSION_MINIMUM"] = "3.5"
    return env | hvd.build_env


def verify(spec: ImageSpec) -> Snippet:
    """The check the build runs after installing Horovod and the .def runs again as %test; in an image without
    Horovod, that torch imports and its torch.distributed has the Gloo back end (what --torch ranks use on CPUs)."""
    if spec.recipe.horovod is None:
        return Snippet(
            "torch.distributed is available, with Gloo", "verify", {"check_build": (), "torch_check": TORCH_CHECK}
        )
    return Snippet("Horovod has every framework, controller and operation", "verify", _verify_values(spec))


def default_command(recipe: Recipe) -> tuple[str, ...]:
    """What an image runs without arguments: `horovodrun --check-build`, or the torch check without Horovod."""
    return ("horovodrun", "--check-build") if recipe.horovod else ("python", "-c", TORCH_CHECK)


def _verify_values(spec: ImageSpec) -> dict[str, object]:
    imports = tuple(f"horovod.{'torch' if name == 'pytorch' else name}" for name in spec.recipe.frameworks.names)
    return {"check_build": check_build(spec.recipe), "imports": imports}


@BLOCKS.register
class Horovod(Block):
    """Horovod's sdist (sha256-checked, patched), built into a wheel with `horovod_env` and installed;
    a wheel already cached for these versions (`horovod_key`) is installed instead. Then
    `horovodrun --check-build` must mark every framework, controller and operation [X].
    A recipe without `horovod` (a torch.distributed image) builds nothing here: its build checks that torch
    imports and torch.distributed has Gloo (`TORCH_CHECK`), as its .def's %test does.

    Parameters: `horovod.version`, `horovod.sdist_sha256`, `horovod.patches` (cxx17, gcc13, py312),
    `horovod.controllers`, `horovod.tensor_operations`, `horovod.build_env`, `frameworks`,
    `gpu.archs`, `gpu.cuda`, `gpu.source`.

    Example (recipe cuda11.8-tf2.14-torch2.1, among the build's variables)::

        export HOROVOD_BUILD_CUDA_CC_LIST="70,80"
        export TORCH_CUDA_ARCH_LIST="7.0;8.0"
    """

    name, position = "horovod", 70
    shell = ("horovod", "verify")

    def apt(self, spec: ImageSpec) -> Apt:
        """The compilers, cmake and Python's headers its build needs (a recipe without horovod compiles nothing)."""
        return Apt(Packages(("build-essential", "cmake", "python3-dev"))) if spec.recipe.horovod else Apt()

    def build(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        if spec.recipe.horovod is None:
            return (verify(spec),)
        title = (
            f"Horovod {spec.recipe.horovod.version} (the cached wheel for these versions, or built from its sdist), "
            "then horovodrun --check-build"
        )
        values = {"build_env": horovod_env(spec), "cache": horovod_cache(spec.recipe, spec.layout.host)}
        return (Snippet(title, "horovod", values | _verify_values(spec)),)
