"""The Python venv every wheel goes into, with the helpers Horovod's build imports."""

from __future__ import annotations

from ..spec import ImageSpec
from .base import BLOCKS, Block, Snippet

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
CMAKE_FOR_WHEELS = "cmake==4.4.4"
"""The wheels route builds with pip's cmake (the one measured with CUDA 13 wheels; Debian 12's is 3.25)."""


def build_requirements(spec: ImageSpec) -> tuple[str, ...]:
    """pip's cmake for the wheels route, else nothing: the OS's cmake builds."""
    return (CMAKE_FOR_WHEELS,) if spec.cuda_tree else ()


_NOTHING: dict[str, tuple[str, ...]] = {"requirements": (), "build_requirements": ()}
"""A recipe without Horovod: a bare venv (pip installs the frameworks next)."""


@BLOCKS.register
class Venv(Block):
    """A venv from the distribution's python3 (the install script: the host's, reused on a re-run),
    plus Horovod's pinned build helpers and, for gpu.source: wheels, pip's cmake (a recipe without
    horovod gets the bare venv).

    Parameters: `python` (the venv's site-packages path), `gpu.source`.

    Example (recipe cpu-local)::

        python3 -m venv /opt/venv
        /opt/venv/bin/python -m pip install --no-cache-dir --find-links /wheelhouse wheel==0.43.0 packaging==24.0 ...
    """

    name, position = "venv", 20
    shell = ("venv",)

    def build(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        if spec.recipe.horovod is None:
            return (Snippet(f"Python {spec.recipe.python} venv at {spec.venv}", "venv", _NOTHING),)
        title = f"Python {spec.recipe.python} venv at {spec.venv} with Horovod's build helpers"
        tools = build_requirements(spec)
        values = {"requirements": (*HOROVOD_HELPERS, *tools), "build_requirements": tools}
        return (Snippet(title, "venv", values),)
