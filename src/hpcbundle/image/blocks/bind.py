"""hpcbundle-bind and hpcbundle-torchenv in the image: the per-rank scripts launch lines name (knowledge/bind.py,
knowledge/torchenv.py)."""

from __future__ import annotations

from ...knowledge.bind import BIND_PATH, BIND_SCRIPT
from ...knowledge.torchenv import TORCHENV_PATH, TORCHENV_SCRIPT
from ..spec import ImageSpec
from .base import BLOCKS, Block, Snippet


@BLOCKS.register
class Bind(Block):
    """Writes hpcbundle-bind (data/hpcbundle-bind) and hpcbundle-torchenv (data/hpcbundle-torchenv), plain POSIX
    sh, to /usr/local/bin in the runtime stage, so a site with node.gpu_numa runs `hpcbundle-bind MAP PROGRAM...`
    and a torch job `hpcbundle-torchenv SOURCE PROGRAM...` in every image built here (an image built elsewhere
    gets the same text inline: site container.foreign_image).

    Parameters: none; every image carries both (a site and a launch, not the recipe, say whether ranks run
    under them).

    Example::

        printf '%s\\n' '#!/bin/sh' '# hpcbundle-bind MAP PROGRAM [ARG...]: ...' ... > /usr/local/bin/hpcbundle-bind
        chmod 0755 /usr/local/bin/hpcbundle-bind
    """

    name, position = "bind", 85
    shell = ("bind",)

    def runtime(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        scripts = (
            (f"hpcbundle-bind, the gpu-numa placement script, at {BIND_PATH}", BIND_PATH, BIND_SCRIPT),
            (f"hpcbundle-torchenv, the torch ranks' shim, at {TORCHENV_PATH}", TORCHENV_PATH, TORCHENV_SCRIPT),
        )
        # SC2016: their lines are shell text written into the file, single-quoted so nothing expands.
        return tuple(
            Snippet(title, "bind", {"path": path, "lines": tuple(text.splitlines())}, lint_ignore=("SC2016",))
            for title, path, text in scripts
        )
