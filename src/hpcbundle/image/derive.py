"""What goes into an image, derived from a recipe: the `ImageSpec` the blocks share, and what the runtime
stage gathers from the blocks (copies, environment, labels, manifest).

`image_spec` lays the recipe out (image/spec.py) and derives what several blocks read (CUDA's home
and wheels); `runtime_stage` asks every registered block, in `Block.path_order`, for its prefix,
search paths, variables and manifest rows. No block is named here: a new block is its own file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .. import __version__
from ..config.fields import major_minor
from ..config.recipes import Recipe
from ..knowledge.compat import CudaWheels, KnowledgeBase
from ..knowledge.labels import image_labels
from .blocks import BLOCKS, search_env
from .spec import BUILD_DIR, CUDA_HOME, EXAMPLES, VENV, WHEELHOUSE, CudaTree, ImageLayout, ImageSpec


def image_layout(recipe: Recipe) -> ImageLayout:
    """The image's layout: /opt/venv, /tmp/build, /wheelhouse (pip finds wheels there first)."""
    return ImageLayout(
        host=False,
        venv=VENV,
        site_packages=f"{VENV}/lib/python{recipe.python}/site-packages",
        build_dir=BUILD_DIR,
        pip=f"{VENV}/bin/python -m pip",
        pip_flags=f"--no-cache-dir --find-links {WHEELHOUSE}",
    )


HOST_LAYOUT = ImageLayout(
    host=True,
    venv="${HPCBUNDLE_VENV}",
    site_packages="${HPCBUNDLE_SITE}",
    build_dir="${HPCBUNDLE_BUILD}",
    pip='"${HPCBUNDLE_VENV}/bin/python" -m pip',
    pip_flags="",
)
"""The install script's layout: shell variables its preamble sets (containers/shell/install.sh.j2)."""


def cuda_tree(recipe: Recipe, kb: KnowledgeBase) -> CudaTree | None:
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


def image_spec(recipe: Recipe, kb: KnowledgeBase, host: bool = False) -> ImageSpec:
    """Lay `recipe` out and derive what several blocks read; e.g. for recipes/cuda13.0-torch2.11.yaml::

    spec.cuda_home == "/opt/venv/lib/python3.11/site-packages/nvidia/cu13"

    `host=True` lays the same content out for the bare-metal install script (a venv anywhere).
    """
    layout = HOST_LAYOUT if host else image_layout(recipe)
    tree = cuda_tree(recipe, kb)
    if tree is not None:
        cuda_home: str | None = "${HPCBUNDLE_CUDA_HOME}" if host else f"{layout.site_packages}/nvidia/{tree.dir}"
    else:
        cuda_home = CUDA_HOME if recipe.gpu else None
    return ImageSpec(recipe=recipe, kb=kb, layout=layout, cuda_tree=tree, cuda_home=cuda_home)


@dataclass(frozen=True)
class RuntimeStage:
    """What the runtime stage takes from the build and says of itself: the directories it copies (the venv,
    then the blocks' prefixes), its environment, its labels and the manifest (one line of JSON)."""

    copies: tuple[str, ...]
    env: dict[str, str]
    labels: dict[str, str]
    manifest: str


def runtime_stage(spec: ImageSpec) -> RuntimeStage:
    """Gather the runtime stage from every block in `path_order`; e.g. for a recipe with Open MPI and UCX
    built from source, copies == ("/opt/venv", "/opt/openmpi", "/opt/ucx") and PATH lists their bin/ in
    that order. The install script's host has its own MPI and UCX: their prefixes are the images' only."""
    blocks = BLOCKS.on_paths()
    env = search_env(spec)
    rows: dict[str, str | None] = {"venv": VENV}
    for block in blocks:
        env |= block.runtime_env(spec)
        rows |= block.manifest(spec)
    rows["examples"] = EXAMPLES
    labels = image_labels(spec.recipe, spec.kb)
    record = {"hpcbundle_version": __version__, "recipe": recipe_record(spec.recipe), "layout": rows, "labels": labels}
    return RuntimeStage(
        copies=(VENV, *(prefix for block in blocks if (prefix := block.prefix(spec)))),
        env=env,
        labels=labels,
        manifest=json.dumps(record),
    )


def recipe_record(recipe: Recipe) -> dict[str, object]:
    """The recipe as the manifest records it: every key, the user's package keys only where given, and the
    requirements file's pins (the file itself is not in the image)."""
    unset = {key for key in ("python_packages", "requirements_file") if not getattr(recipe, key)}
    record = recipe.model_dump(mode="json", exclude=unset)
    if recipe.requirements_file:
        record["requirements_file_packages"] = [pin for key, pin in recipe.user_packages if key == "requirements_file"]
    return record
