"""Where the user's bundle lives: recipes/, site_configs/, containers/, scripts/, examples/."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError

_MARKERS = ("recipes", "containers")


@dataclass(frozen=True)
class Bundle:
    """The top level of an hpcbundle checkout; the package is the engine, this is the data."""

    root: Path

    @property
    def recipes_dir(self) -> Path:
        return self.root / "recipes"

    @property
    def sites_dir(self) -> Path:
        return self.root / "site_configs"

    @property
    def containers_dir(self) -> Path:
        return self.root / "containers"

    @property
    def scripts_dir(self) -> Path:
        return self.root / "scripts"

    @property
    def examples_dir(self) -> Path:
        return self.root / "examples"


def _is_bundle(path: Path) -> bool:
    return all(os.path.isdir(path / marker) for marker in _MARKERS)  # False, not an error, on a name too long


def find_bundle(explicit: Path | None, cwd: Path) -> Bundle:
    """The bundle named by --bundle/HPCBUNDLE_ROOT, else the nearest one above `cwd`,
    else the checkout this package was installed from (editable installs)."""
    if explicit is not None:
        if not _is_bundle(explicit):
            raise UserError.at(
                str(explicit),
                "",
                "not an hpcbundle bundle (no recipes/ and containers/)",
                "point --bundle at the repository's top level",
            )
        return Bundle(explicit.resolve())
    for candidate in (cwd, *cwd.parents):
        if _is_bundle(candidate):
            return Bundle(candidate)
    source_checkout = Path(__file__).resolve().parents[3]  # src/hpcbundle/config/bundle.py
    if _is_bundle(source_checkout):
        return Bundle(source_checkout)
    raise UserError(
        "no hpcbundle bundle found here or above (recipes/ and containers/); "
        "run from the repository or pass --bundle DIR"
    )
