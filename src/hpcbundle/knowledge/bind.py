"""hpcbundle-bind, the gpu-numa placement script (data/hpcbundle-bind): the image stage installs it in
every image at `BIND_PATH`, the launch stage names it in front of every rank of a site with
node.gpu_numa where it exists (`bind_place`), and runs its text inline (`sh -c`) where it may not."""

from __future__ import annotations

from importlib.resources import files
from typing import Literal

from ..config.sites import Site
from .launching import RUNTIMES_KNOWN

BindPlace = Literal["host", "image", "inline"]

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


def bind_place(site: Site, image: bool) -> BindPlace:
    """Where a site's ranks find hpcbundle-bind (with or without an `image`): `host`, by name on the host, only
    where node.host_bind says every node has it and the ranks do not start inside a container (no image, or a
    per-rank runtime: apptainer, singularity, ch-run); `image`, by name inside an image built here (each carries
    it at BIND_PATH); else `inline`, its text as `sh -c` (container.foreign_image, or no image), which needs
    nothing installed. The launch line, the rule bind-tool, doctor and the batch script read the same answer.

    >>> from hpcbundle.config.sites import Site
    >>> def site(runtime, **node):
    ...     return Site.model_validate({"name": "s", "description": "d", "mpi": {"flavour": "openmpi",
    ...         "version": "5.0.3"}, "launcher": {"name": "mpirun5"}, "container": {"runtime": runtime},
    ...         "node": {"cores": 8, "gpus": 2, "gpu_model": "H100", "gpu_numa": [0, 1], **node},
    ...         "network": {"fabric": "ethernet"}})
    >>> bind_place(site("apptainer"), True), bind_place(site("none"), False)
    ('image', 'inline')
    >>> bind_place(site("apptainer", host_bind=True), True)
    'host'
    >>> bind_place(site("docker", host_bind=True), True)  # the ranks start inside the one container
    'image'
    """
    known = RUNTIMES_KNOWN.get(site.container.runtime)
    inside = image and known is not None and (known.wraps_launcher or known.srun_plugin)
    if site.node.host_bind and not inside:
        return "host"
    if image and known is not None and known.needs_image and not site.container.foreign_image:
        return "image"
    return "inline"
