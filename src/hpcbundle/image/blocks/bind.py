"""hpcbundle-bind in the image: the gpu-numa placement script launch lines name (knowledge/bind.py)."""

from __future__ import annotations

from ...knowledge.bind import BIND_PATH, BIND_SCRIPT
from ..spec import ImageSpec
from .base import BLOCKS, Block, Snippet


@BLOCKS.register
class Bind(Block):
    """Writes hpcbundle-bind (data/hpcbundle-bind, plain POSIX sh) to /usr/local/bin in the runtime stage,
    so a site with node.gpu_numa runs `hpcbundle-bind MAP PROGRAM...` in every image built here (an image
    built elsewhere gets the same text inline: site container.foreign_image).

    Parameters: none; every image carries it (a site, not the recipe, says whether ranks run under it).

    Example::

        printf '%s\\n' '#!/bin/sh' '# hpcbundle-bind MAP PROGRAM [ARG...]: ...' ... > /usr/local/bin/hpcbundle-bind
        chmod 0755 /usr/local/bin/hpcbundle-bind
    """

    name, position = "bind", 85
    shell = ("bind",)

    def runtime(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        values = {"path": BIND_PATH, "lines": tuple(BIND_SCRIPT.splitlines())}
        title = f"hpcbundle-bind, the gpu-numa placement script, at {BIND_PATH}"
        # SC2016: its lines are shell text written into the file, single-quoted so nothing expands.
        return (Snippet(title, "bind", values, lint_ignore=("SC2016",)),)
