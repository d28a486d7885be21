#!/usr/bin/env python3
"""Print the versions the host set-up installs, read from ONE recipe, as shell assignments.

The scripts in scripts/setup/ and the Makefile's `wheelhouse` target `eval` this output instead
of repeating versions, so the venv on the host and the cpu-local image carry the same stack:

    $ python3 scripts/setup/pins.py            # default: recipes/cpu-local.yaml
    PYTHON_VERSION=3.11
    TORCH_VERSION=2.13.0
    TORCH_VARIANT=cpu
    TF_PACKAGE=tensorflow-cpu
    TF_VERSION=2.15.1
    HOROVOD_VERSION=0.28.1
    HOROVOD_SDIST_SHA256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0
    HOROVOD_PATCHES=cxx17

It runs before the venv exists (python-env.sh), so it needs only Python and PyYAML (Debian's
python3-yaml, which host-packages.sh installs), not hpcbundle. Exit status 2 with one line on
stderr when PyYAML is missing or the recipe lacks a pin.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "recipes" / "cpu-local.yaml"


def pins(recipe: dict) -> dict[str, str]:
    """The host set-up's pins from a recipe's data."""
    frameworks, horovod = recipe["frameworks"], recipe["horovod"]
    return {
        "PYTHON_VERSION": recipe["python"],
        "TORCH_VERSION": frameworks["pytorch"]["version"],
        "TORCH_VARIANT": frameworks["pytorch"]["variant"],
        # Only a version the recipe names (omitted: paired by the knowledge base; false: none).
        "TORCHVISION_VERSION": _named_version(frameworks["pytorch"].get("torchvision")),
        "TF_PACKAGE": frameworks["tensorflow"]["package"],
        "TF_VERSION": frameworks["tensorflow"]["version"],
        "HOROVOD_VERSION": horovod["version"],
        "HOROVOD_SDIST_SHA256": horovod["sdist_sha256"],
        "HOROVOD_PATCHES": " ".join(horovod.get("patches", [])),
    }


def _named_version(value: object) -> str:
    """A version the recipe names as a string, else '' (false, omitted)."""
    return value if isinstance(value, str) else ""


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else DEFAULT
    try:
        import yaml
    except ImportError:
        print(
            f"pins.py: {sys.executable} has no PyYAML to read {path.name}: apt-get install python3-yaml "
            "(scripts/setup/host-packages.sh installs it), or set PYTHON= to one that has it",
            file=sys.stderr,
        )
        return 2
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        print(f"pins.py: cannot read the recipe: {error}", file=sys.stderr)
        return 2
    try:
        values = pins(yaml.safe_load(text))
    except (KeyError, TypeError) as error:
        print(
            f"pins.py: {path}: no pin {error} (the recipe must pin python, frameworks.pytorch, "
            "frameworks.tensorflow and horovod)",
            file=sys.stderr,
        )
        return 2
    for name, value in values.items():
        print(f"{name}={shlex.quote(str(value))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
