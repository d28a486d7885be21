"""The recipe inside the image as JSON, for `hpcbundle doctor` and for people."""

from __future__ import annotations

from ..spec import ImageSpec
from .base import BLOCKS, Block, Snippet


@BLOCKS.register
class Manifest(Block):
    """Writes the manifest (the recipe, the layout rows of every block, the labels) at /etc/hpcbundle/manifest.json.

    Parameters: the whole recipe.

    Example::

        mkdir -p "$(dirname /etc/hpcbundle/manifest.json)"
        printf '%s\\n' '{"hpcbundle_version": ...}' > /etc/hpcbundle/manifest.json

    The install script writes the same file into its venv in its own last step.
    """

    name, position = "manifest", 90
    shell = ("manifest",)

    def runtime(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        return (Snippet(f"the recipe as JSON at {spec.manifest_path}", "manifest"),)
