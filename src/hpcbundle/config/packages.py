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

import os
import re
import string
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import AfterValidator, BeforeValidator, StrictStr

from .errors import CLIP, UserError, clip
from .loading import read_text

MAX_SPEC_CHARS = 200
"""The longest package spec accepted (a name, extras and one pin)."""
REQUIREMENTS_BYTES = 64 << 10
"""The largest requirements file read."""
INCLUDES = ("-r", "-c", "-e", "--requirement", "--constraint", "--editable")
"""Requirements lines that pull in other files or sources."""
PIN_FIX = "write name==VERSION or name[extra]==VERSION"
COMMENT = re.compile(r"(^|\s)#.*$")
"""A requirements comment as pip reads one: `#` at the line's start or after a blank (a tab included)."""


def package_spec(value: Any) -> str:
    """`value` if it is one exact pin `name[extras]==version`, else a ValueError saying what it is instead."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"not a package spec: {clip(value)} ({PIN_FIX})")
    text = value.strip()
    if len(text) > MAX_SPEC_CHARS:
        raise ValueError(f"a package spec longer than {MAX_SPEC_CHARS} characters ({PIN_FIX})")
    reason = not_a_pin(text)
    if reason:
        raise ValueError(f"{clip(text)} {reason}")
    return str(Requirement(text))


def not_a_pin(text: str) -> str | None:
    """Why `text` is not one exact pin, in words that repeat nothing of it (None: it is one)."""
    if text.startswith("-"):
        return f"is a pip option, not a package ({PIN_FIX}; the image's indexes are fixed)"
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return f"is not a PEP 508 name with a pin, e.g. a URL or a path ({PIN_FIX})"
    if req.url:
        return f"names a URL ({PIN_FIX}; put the wheel in wheelhouse/ instead)"
    if req.marker is not None:
        return "has an environment marker (an image is one Python on one platform: drop it)"
    pins = list(req.specifier)
    if len(pins) != 1 or pins[0].operator != "==" or "*" in pins[0].version:
        return f"is not pinned to one exact version ({PIN_FIX})"
    return None


def shape(text: str, limit: int = CLIP) -> str:
    """`text` with its letters and digits hidden: each run of letters is `a`, of digits `9`, of blanks one
    space, and any character but ASCII punctuation `?`; what a refusal shows of a file that may not be the
    one meant (a requirements file that is really a key or /etc/shadow).

    >>> shape("requests>=2.31.0"), shape("root:$6$sAlt$h4sh:19000:0:::")
    ("'a>=9.9.9'", "'a:$9$a$a9a:9:9:::'")
    """
    runs = re.sub(r"[A-Za-z]+", "a", re.sub(r"[0-9]+", "9", re.sub(r"\s+", " ", text)))
    hidden = "".join(c if c in string.punctuation or c in "a9 " else "?" for c in runs)
    return clip(hidden, limit)


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


def requirements_at(recipe: Path, relative: str) -> Path:
    """The requirements file `relative` names beside `recipe`, refused where it (or a folder on its way) is
    a symlink that leads out of the recipe's directory: a recipe is untrusted, and its pins reach an image."""
    folder = Path(os.path.realpath(recipe.parent))
    target = Path(os.path.realpath(recipe.parent / relative))
    if not target.is_relative_to(folder):
        raise UserError.at(
            str(recipe),
            "requirements_file",
            f"{clip(relative)} is a symlink out of the recipe's directory",
            "copy the file beside the recipe",
        )
    return target


def read_requirements(path: Path, where: str) -> tuple[str, ...]:
    """The pins of a requirements file, validated line by line; `where` names the recipe in errors.

    Blank lines and comments (`#` at a line's start or after a blank, as pip reads them) and a UTF-8 byte
    order mark are skipped; any other line must be one exact pin. A line that includes another file or sets
    an option (-r, -c, -e, --index-url ...) is refused, as is a line continued with '\\'. A refusal shows the
    line's shape only (shape()), never its text.
    """
    text = read_text(path, "requirements_file", REQUIREMENTS_BYTES).removeprefix("\ufeff")
    pins = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = COMMENT.sub("", raw).strip()
        if not line:
            continue
        if line.endswith("\\"):
            reason: str | None = "continues on the next line (write each pin on one line)"
        elif line.startswith(INCLUDES):
            reason = "includes another file or source (list its pins here instead)"
        elif len(line) > MAX_SPEC_CHARS:
            reason = f"is longer than {MAX_SPEC_CHARS} characters ({PIN_FIX})"
        else:
            reason = not_a_pin(line)
        if reason:
            problem = f"{path.name} line {number}: a line shaped {shape(line)} {reason}"
            raise UserError.at(where, "requirements_file", problem)
        pins.append(str(Requirement(line)))
    return tuple(pins)
