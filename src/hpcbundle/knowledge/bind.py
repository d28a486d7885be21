"""hpcbundle-bind, the gpu-numa placement script (data/hpcbundle-bind): the image stage installs it in
every image at `BIND_PATH`, the launch stage names it in front of every rank of a site with
node.gpu_numa, and runs its text inline (`sh -c`) where the image is not one built here."""

from __future__ import annotations

from importlib.resources import files

BIND_NAME = "hpcbundle-bind"
BIND_PATH = f"/usr/local/bin/{BIND_NAME}"
"""Where images built here carry it (on PATH in every base image); on hosts `make install-bind` puts it there."""
BIND_SCRIPT = files("hpcbundle").joinpath("data").joinpath(BIND_NAME).read_text(encoding="utf-8")
"""The script's text: plain POSIX sh, one complete command per line outside its comments."""


def bind_commands(script: str = BIND_SCRIPT) -> tuple[str, ...]:
    """The script's commands: its lines without the shebang, comments and blank lines.

    >>> bind_commands("#!/bin/sh\\n# what it does\\nmap=$1\\n\\nshift\\n")
    ('map=$1', 'shift')
    """
    return tuple(line.strip() for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#"))


BIND_INLINE = "; ".join(bind_commands())
"""The same script as one `sh -c` argument, for images that lack the file (site container.foreign_image)."""
