"""Image components as building blocks, one file each, registered in `BLOCKS` (importing this package
registers every file's block). Adding a component is adding a file here: its steps, packages, prefix,
search paths and manifest rows are gathered from the registry, never from a list of blocks."""

from ...registry import import_all
from .base import BLOCKS, Apt, Block, Packages, Paths, Snippet, SourceBuild, apt_packages, search_env, source_builds

import_all(__name__, __path__)

__all__ = [
    "BLOCKS",
    "Apt",
    "Block",
    "Packages",
    "Paths",
    "Snippet",
    "SourceBuild",
    "apt_packages",
    "search_env",
    "source_builds",
]
