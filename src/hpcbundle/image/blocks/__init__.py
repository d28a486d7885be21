"""Image components as building blocks, one file each, registered in `BLOCKS` (importing this package
registers every file's block). Adding a component is adding a file here."""

import importlib
import pkgutil

from .base import BLOCKS, Apt, Block, Packages, Snippet, SourceBuild, apt_packages, source_builds

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["BLOCKS", "Apt", "Block", "Packages", "Snippet", "SourceBuild", "apt_packages", "source_builds"]
