"""Image components as building blocks, one file each, registered in `BLOCKS` (importing this package
registers every file's block). Adding a component is adding a file here."""

from ...registry import import_all
from .base import BLOCKS, Apt, Block, Packages, Snippet, SourceBuild, apt_packages, source_builds

import_all(__name__, __path__)

__all__ = ["BLOCKS", "Apt", "Block", "Packages", "Snippet", "SourceBuild", "apt_packages", "source_builds"]
