"""Where a .def's stages get their base when no registry can be reached: a local SIF or sandbox, a
`docker save` tar, or an image in the local Docker engine (`hpcbundle render --bootstrap`).

The value lands in the .def's `Bootstrap:` and `From:` header lines, so it is validated whole and
strictly: a known agent, and a source made of plain path or image-reference characters only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from ..config.errors import UserError, clip
from ..config.fields import Image

OPTION = "--bootstrap"
AGENTS: dict[str, str] = {
    "localimage": "localimage:/path/base.sif (a SIF file or a sandbox directory)",
    "docker-archive": "docker-archive:/path/base.tar (a tar written by `docker save`)",
    "docker-daemon": "docker-daemon:IMAGE:TAG (an image in the local Docker engine)",
}
"""The bootstrap agents that build without a registry, each with the form its value takes."""
PATH_AGENTS = ("localimage", "docker-archive")
_PATH = re.compile(r"/?[A-Za-z0-9._+@%=,~-]+(/[A-Za-z0-9._+@%=,~-]+)*/?")
_IMAGE = TypeAdapter(Image)


@dataclass(frozen=True)
class Bootstrap:
    """A .def stage's `Bootstrap: <agent>` and `From: <source>`, e.g. localimage from /srv/base.sif."""

    agent: str
    source: str


def parse_bootstrap(text: str) -> Bootstrap:
    """`AGENT:SOURCE` as a Bootstrap, or a UserError naming the option and the fix (the source's
    file is not looked at: `local_bootstrap` does that at the edge).

    >>> parse_bootstrap("docker-daemon:hpcbundle/base:bookworm")
    Bootstrap(agent='docker-daemon', source='hpcbundle/base:bookworm')
    """
    agent, colon, source = text.partition(":")
    forms = "; ".join(AGENTS.values())
    if not colon or agent not in AGENTS:
        raise UserError.at("", OPTION, f"{clip(text)} is not AGENT:SOURCE with a known agent", f"use {forms}")
    if agent in PATH_AGENTS:
        if not _PATH.fullmatch(source):
            raise UserError.at(
                "",
                OPTION,
                f"{clip(source)} is not a plain path",
                f"use {AGENTS[agent]}; letters, digits, ._+@%=,~- and / only",
            )
    else:
        try:
            _IMAGE.validate_python(source)
        except ValidationError:
            raise UserError.at(
                "", OPTION, f"{clip(source)} is not an image reference", f"use {AGENTS[agent]}"
            ) from None
        if ":" not in source.rsplit("/", 1)[-1].split("@", 1)[0]:
            raise UserError.at("", OPTION, f"{clip(source)} has no tag", f"use {AGENTS[agent]}")
    return Bootstrap(agent, source)


def local_bootstrap(text: str, cwd: Path) -> Bootstrap:
    """`AGENT:SOURCE` checked against this machine: a localimage or docker-archive source must exist
    (a SIF or tar file; for localimage also a sandbox directory) and is made absolute from `cwd`, so
    the .def builds from any directory."""
    bootstrap = parse_bootstrap(text)
    if bootstrap.agent not in PATH_AGENTS:
        return bootstrap
    path = cwd / bootstrap.source
    wanted = path.is_file() or (bootstrap.agent == "localimage" and path.is_dir())
    if not wanted:
        kind = "file or directory" if bootstrap.agent == "localimage" else "file"
        raise UserError.at(
            "", OPTION, f"{clip(bootstrap.source)}: no such {kind}", f"give an existing one: {AGENTS[bootstrap.agent]}"
        )
    return parse_bootstrap(f"{bootstrap.agent}:{os.path.abspath(path)}")
