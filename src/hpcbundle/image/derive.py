"""What goes into an image, derived from a recipe and the building blocks: layout, build inputs,
environment, metadata.

`image_spec` puts together the shared layout (image/spec.py) and what each component's block
says of itself (blocks/: the MPI's and UCX's prefixes, the frameworks' pins, the CUDA wheels' tree,
Horovod's cache key and check-build lines, pip's cmake), once for every format; the blocks and the
templates in containers/ read the result.
"""

from __future__ import annotations

import json

from .. import __version__
from ..config.fields import major_minor
from ..config.recipes import Recipe
from ..knowledge.compat import KnowledgeBase
from ..knowledge.labels import NVIDIA_CONTAINER_ENV, image_labels
from .blocks.base import MPI_PREFIX
from .blocks.cudawheels import cuda_tree
from .blocks.frameworks import framework_requirements
from .blocks.horovod import HOROVOD_CACHE, check_build, horovod_key
from .blocks.nccl import nccl_from_torch
from .blocks.ucx import UCX_PREFIX
from .blocks.venv import CMAKE_FOR_WHEELS
from .spec import BUILD_DIR, CUDA_HOME, EXAMPLES, VENV, WHEELHOUSE, ImageLayout, ImageSpec, search_env, wheel_libs


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


def image_spec(recipe: Recipe, kb: KnowledgeBase, host: bool = False) -> ImageSpec:
    """Derive the image's content from `recipe`; e.g. for recipes/cpu-local.yaml::

    spec.framework_requirements == ("tensorflow-cpu==2.15.1", "torch==2.13.0+cpu")
    spec.check_build == ("Frameworks: TensorFlow", "Frameworks: PyTorch", "Controllers: MPI", ...)

    `host=True` lays the same content out for the bare-metal install script (a venv anywhere).
    """
    labels = image_labels(recipe, kb)
    layout = host_layout(recipe) if host else image_layout(recipe)
    tree = cuda_tree(recipe, kb)
    site = layout.site_packages
    nccl_dir = nccl_home = None
    if nccl_from_torch(recipe, kb):
        nccl_dir = "${HPCBUNDLE_NCCL_DIR}" if host else f"{site}/nvidia/nccl"
        nccl_home = f"{layout.build_dir}/nccl" if host else nccl_dir
    if tree is not None:
        cuda_home: str | None = "${HPCBUNDLE_CUDA_HOME}" if host else f"{site}/nvidia/{tree.dir}"
    else:
        cuda_home = CUDA_HOME if recipe.gpu else None
    prefixes = _prefixes(recipe)
    return ImageSpec(
        recipe=recipe,
        layout=layout,
        cuda_home=cuda_home,
        cuda_tree=tree,
        nccl_home=nccl_home,
        nccl_dir=nccl_dir,
        prefixes=prefixes,
        build_requirements=(CMAKE_FOR_WHEELS,) if tree else (),
        gcc_max=kb.nvcc_host_gcc.get(major_minor(recipe.gpu.cuda)) if recipe.gpu else None,
        gcc13_from=hvd.gcc13_patch_from if (hvd := kb.horovod.get(recipe.horovod.version)) else None,
        py312_from=hvd.py312_patch_from if hvd else None,
        framework_requirements=framework_requirements(recipe, kb),
        check_build=check_build(recipe),
        copies=(VENV, *prefixes),
        runtime_env=search_env(recipe, layout, prefixes, wheel_libs(recipe, layout, cuda_home, nccl_dir))
        | (NVIDIA_CONTAINER_ENV if tree is not None and not host else {}),
        labels=labels,
        manifest=_manifest(recipe, labels),
    )


def _prefixes(recipe: Recipe) -> tuple[str, ...]:
    """The source builds' prefixes, the MPI's first (blocks/base.py MPI_PREFIX, blocks/ucx.py UCX_PREFIX)."""
    return (*([MPI_PREFIX] if recipe.mpi.install == "source" else []), *([UCX_PREFIX] if recipe.ucx else []))


def _manifest(recipe: Recipe, labels: dict[str, str]) -> str:
    """The JSON written to MANIFEST: the full recipe (the user's package keys only where given, with the
    requirements file's pins), the image layout and the labels, on one line."""
    layout = {
        "venv": VENV,
        "mpi_prefix": MPI_PREFIX if recipe.mpi.install == "source" else None,
        "ucx_prefix": UCX_PREFIX if recipe.ucx else None,
        "examples": EXAMPLES,
    }
    return json.dumps(
        {"hpcbundle_version": __version__, "recipe": recipe_record(recipe), "layout": layout, "labels": labels}
    )


def recipe_record(recipe: Recipe) -> dict[str, object]:
    """The recipe as the manifest records it: every key, the user's package keys only where given, and the
    requirements file's pins (the file itself is not in the image)."""
    unset = {key for key in ("python_packages", "requirements_file") if not getattr(recipe, key)}
    record = recipe.model_dump(mode="json", exclude=unset)
    if recipe.requirements_file:
        record["requirements_file_packages"] = [pin for key, pin in recipe.user_packages if key == "requirements_file"]
    return record
