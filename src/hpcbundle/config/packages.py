"""The user's own Python packages in a recipe: exact PEP 508 pins, validated, never executed.

A recipe lists them in `python_packages` and/or names a `requirements_file` beside it; both hold only
`name[extras]==version` (no URL, path, option, or environment marker: an image is one Python on one
platform, so a marker has nothing to choose). A requirements file is read here, once, line by line:
it may not include other files or set pip options (-r, -c, -e, --index-url ...).

    >>> package_spec("requests==2.31.0")
    'requests==2.31.0'
    >>> package_name("Typing_Extensions[all]==4.12.2")
    'typing-extensions'
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import AfterValidator, BeforeValidator, StrictStr

from .errors import UserError, clip
from .loading import read_text

MAX_SPEC_CHARS = 200
"""The longest package spec accepted (a name, extras and one pin)."""
REQUIREMENTS_BYTES = 64 << 10
"""The largest requirements file read."""
INCLUDES = ("-r", "-c", "-e", "--requirement", "--constraint", "--editable")
"""Requirements lines that pull in other files or sources."""
PIN_FIX = "write name==VERSION or name[extra]==VERSION"


def package_spec(value: Any) -> str:
    """`value` if it is one exact pin `name[extras]==version`, else a ValueError saying what it is instead."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"not a package spec: {clip(value)} ({PIN_FIX})")
    text = value.strip()
    if len(text) > MAX_SPEC_CHARS:
        raise ValueError(f"a package spec longer than {MAX_SPEC_CHARS} characters ({PIN_FIX})")
    if text.startswith("-"):
        raise ValueError(f"{clip(text)} is a pip option, not a package ({PIN_FIX}; the image's indexes are fixed)")
    try:
        req = Requirement(text)
    except InvalidRequirement:
        raise ValueError(f"{clip(text)} is not a PEP 508 name with a pin, e.g. a URL or a path ({PIN_FIX})") from None
    if req.url:
        raise ValueError(f"{clip(text)} names a URL ({PIN_FIX}; put the wheel in wheelhouse/ instead)")
    if req.marker is not None:
        raise ValueError(f"{clip(text)} has an environment marker (an image is one Python on one platform: drop it)")
    pins = list(req.specifier)
    if len(pins) != 1 or pins[0].operator != "==" or "*" in pins[0].version:
        raise ValueError(f"{clip(text)} is not pinned to one exact version ({PIN_FIX})")
    return str(req)


def package_name(spec: str) -> str:
    """The canonical project name of a validated spec, e.g. 'torch' for 'Torch==2.1.0'."""
    return canonicalize_name(Requirement(spec).name)


def package_version(spec: str) -> str:
    """The version a validated spec pins, e.g. '2.1.0' for 'torch==2.1.0'."""
    return next(iter(Requirement(spec).specifier)).version


PackageSpec = Annotated[StrictStr, AfterValidator(package_spec)]
"""One exact pin, `name[extras]==version` (pip reads it, never a shell: the templates quote it)."""


def requirements_path(value: Any) -> str:
    """A relative path to a file at or below the recipe's directory, e.g. 'requirements.txt'."""
    if not isinstance(value, str) or not value or "\x00" in value or "\\" in value:
        raise ValueError(f"not a file path: {clip(value)} (give a file beside the recipe, e.g. requirements.txt)")
    parts = PurePosixPath(value).parts
    if value.startswith("/") or ".." in parts:
        raise ValueError(f"{clip(value)} is outside the recipe's directory (give a file beside the recipe)")
    return value


RequirementsPath = Annotated[str, BeforeValidator(requirements_path)]


def read_requirements(path: Path, where: str) -> tuple[str, ...]:
    """The pins of a requirements file, validated line by line; `where` names the recipe in errors.

    Blank lines and comments are skipped; any other line must be one exact pin. A line that includes
    another file or sets an option (-r, -c, -e, --index-url ...) is refused, as is a line continued with '\\'.
    """
    text = read_text(path, "requirements_file", REQUIREMENTS_BYTES)
    pins = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        try:
            if line.endswith("\\"):
                raise ValueError(f"{clip(line)} continues on the next line (write each pin on one line)")
            if line.startswith(INCLUDES):
                raise ValueError(f"{clip(line)} includes another file or source (list its pins here instead)")
            pins.append(package_spec(line))
        except ValueError as exc:
            raise UserError.at(where, "requirements_file", f"{path.name} line {number}: {exc}") from None
    return tuple(pins)
