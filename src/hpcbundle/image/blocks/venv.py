"""The Python venv every wheel goes into, with the helpers Horovod's build imports."""

from __future__ import annotations

from ..imagespec import HOROVOD_HELPERS, ImageSpec
from .base import BLOCKS, Block, Snippet


@BLOCKS.register
class Venv(Block):
    """A venv from the distribution's python3 (the install script: the host's, reused on a re-run),
    plus Horovod's pinned build helpers and, for gpu.source: wheels, pip's cmake.

    Parameters: `python` (the venv's site-packages path), `gpu.source`.

    Example (recipe cpu-local)::

        python3 -m venv /opt/venv
        /opt/venv/bin/python -m pip install --no-cache-dir --find-links /wheelhouse wheel==0.43.0 packaging==24.0 ...
    """

    name, position = "venv", 20

    def build(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        title = f"Python {spec.recipe.python} venv at {spec.venv} with Horovod's build helpers"
        return (Snippet(title, "venv", {"requirements": (*HOROVOD_HELPERS, *spec.build_requirements)}),)
