"""Where things go in an image, and the `ImageSpec` every building block reads (pure data).

The image's shared paths (the venv, the wheelhouse, the examples, the build directory, CUDA's home)
and the spec's types live here, below the blocks; what belongs to one component (its prefix, its
search paths, its manifest rows, its packages and pins) lives in its block, and `derive.image_spec`
fills the spec in.

The build context of every image holds two directories, `examples/` (copied to /examples) and
`wheelhouse/` (maybe empty): wheels, the Horovod sdist and source tarballs that pip (`--find-links`)
and the source builds use before the network. Build with PIP_NO_INDEX=1 to stay fully offline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..config.recipes import Recipe
from ..knowledge.compat import KnowledgeBase
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
    """What several blocks and the templates share besides the recipe: the knowledge base each block derives its
    own pins from, the layout, and CUDA's home and wheels; build with `derive.image_spec()`."""

    wheelhouse: ClassVar[str] = WHEELHOUSE
    examples: ClassVar[str] = EXAMPLES
    manifest_path: ClassVar[str] = MANIFEST

    recipe: Recipe
    kb: KnowledgeBase
    layout: ImageLayout
    cuda_tree: CudaTree | None
    """The toolkit wheels for gpu.source: wheels (the frameworks, venv, prune and cudawheels blocks read it)."""
    cuda_home: str | None

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
