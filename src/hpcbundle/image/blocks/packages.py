"""The user's own Python packages (python_packages, requirements_file), installed with the stack held fixed."""

from __future__ import annotations

from ...config.packages import package_name
from ...knowledge.stack import HELD_AS_BUILT, owned_by, stack_pins
from ..spec import ImageSpec
from .base import BLOCKS, Block, Snippet

CONSTRAINTS = "hpcbundle-constraints.txt"
"""The stack's exact pins, in the venv (a later `pip install -c` of the user's own keeps them too)."""


@BLOCKS.register
class Packages(Block):
    """pip installs the recipe's `python_packages` and `requirements_file` pins into the same venv, after the
    frameworks and Horovod, with `-c` a constraints file written first: the recipe's pins of the frameworks
    and Horovod (where the recipe has it), then every package the venv holds at that point (numpy, the NVIDIA
    wheels, Horovod's helpers; the user's own names left out but for numpy and the stack's own, so that a re-run of the
    install script may change them).
    A pin the stack cannot take stops pip, which names both; the `user-packages` rule refuses the ones
    the recipe alone shows. On a base that freezes its packages (NGC's /etc/pip/constraint.txt) they
    install against that file too. Recipes without either key render nothing here.

    Parameters: `python_packages`, `requirements_file` (read beside the recipe at render time).

    Example (a recipe with python_packages: [timm==1.0.9])::

        printf '%s\\n' torch==2.13.0+cpu horovod==0.28.1 > /opt/venv/hpcbundle-constraints.txt
        /opt/venv/bin/python -m pip list --format=freeze | grep -viE '^(timm)==' >> ...
        /opt/venv/bin/python -m pip install --no-cache-dir --find-links /wheelhouse -c ... timm==1.0.9
    """

    name, position = "packages", 75
    shell = ("packages",)

    def build(self, spec: ImageSpec) -> tuple[Snippet, ...]:
        pins = tuple(pin for _, pin in spec.recipe.user_packages)
        if not pins:
            return ()
        names = sorted({name.replace("-", "[-_.]+") for pin in pins if not _held(name := package_name(pin))})
        values = {
            "stack": tuple(pin.pin for pin in stack_pins(spec.recipe, spec.kb).values()),
            "constraints": f"{spec.venv}/{CONSTRAINTS}",
            "own": f"^({'|'.join(names)})==" if names else "",
            "packages": pins,
        }
        return (Snippet(f"your own Python packages ({len(pins)}), the stack held fixed", "packages", values),)


def _held(name: str) -> bool:
    """Whether the stack holds `name` at its built version even where the user pins it too (numpy, torch...)."""
    return name in HELD_AS_BUILT or owned_by(name) is not None
