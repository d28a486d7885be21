"""Validated scalar types shared by recipes and sites: versions, checksums, URLs, names, shell-safe words.

Every pattern is ASCII and matched whole (fullmatch: a trailing newline never passes), so a value
that reaches a generated Dockerfile, .def or shell script cannot add a line or run a command.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any, Callable

from packaging.version import Version as _PkgVersion
from pydantic import AfterValidator, BeforeValidator

from .errors import clip, shape

_VERSION = re.compile(r"[0-9]{1,6}(\.[0-9]{1,6}){0,3}")


def _version(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(
            f'expected a version like "4.1.6", got {shape(value)}: write versions as quoted strings, e.g. "{value}" '
            "(YAML reads 12.10 as the number 12.1)"
        )
    if not isinstance(value, str):
        raise ValueError(f'expected a version like "4.1.6", got {shape(value)}: write it as a quoted string')
    if not _VERSION.fullmatch(value):
        raise ValueError(f'not a version like "4.1.6": {clip(value)}')
    return value


def _whole(pattern: str, what: str, rule: str = "") -> Callable[[Any], str]:
    """A validator: the value is a string that `pattern` matches whole, else 'not <what>: <value> (<rule>)'."""
    regex = re.compile(pattern)

    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"expected {what}, got {shape(value)}: write it as a quoted string")
        if not regex.fullmatch(value):
            raise ValueError(f"not {what}: {clip(value)}" + (f" ({rule})" if rule else ""))
        return value

    return check


_sha256 = _whole(r"[0-9a-f]{64}", "a sha256", "64 lowercase hex digits: run sha256sum on the file")
_url = _whole(
    r"https://[A-Za-z0-9.-]+(:[0-9]{1,5})?/[A-Za-z0-9._~/+%-]+",
    "an https URL to a file",
    "https://host/path, letters, digits and ._~/+%- only",
)
_name = _whole(
    r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}",
    "a name",
    "use letters, digits, '.', '_' and '-' only, starting with a letter or digit",
)
# An image reference as Docker's reference grammar spells it: [registry[:port]/]path[:tag][@sha256:<64 hex>].
IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(
    rf"(?:[A-Za-z0-9.-]+(?::[0-9]{{1,5}})?/)?{IMAGE_COMPONENT}(?:/{IMAGE_COMPONENT})*"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>[^@]*))?"
)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def _image(value: Any) -> str:
    """An image reference, whole; a digest is sha256 with 64 lowercase hex digits and follows a tag."""
    match = _IMAGE.fullmatch(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(
            f"{clip(value)} is not an image reference like debian:bookworm or nvidia/cuda:12.2.2-devel-ubuntu22.04"
        )
    digest = match.group("digest")
    if digest is not None and not _DIGEST.fullmatch(digest):
        raise ValueError(
            f"{clip(digest)} is not a digest: write @sha256: and the 64 lowercase hex digits "
            "(`docker buildx imagetools inspect IMAGE:TAG` prints it)"
        )
    if digest is not None and match.group("tag") is None:
        raise ValueError(
            f"{clip(value)} has a digest but no tag: write IMAGE:TAG@sha256:... so a reader sees the version"
        )
    return value


_option = _whole(
    r"--?[A-Za-z0-9][A-Za-z0-9_-]*(=[A-Za-z0-9_.,:/+=@%-]*)?",
    "a configure option like --with-cuda=/usr/local/cuda",
    "letters, digits and _.,:/+=@%- only: no spaces, quotes or shell characters",
)
_env_value = _whole(
    r"[A-Za-z0-9_.,:/+=@%^-]*", "a plain value", "letters, digits and _.,:/+=@%^- only: no spaces, quotes or $"
)
_env_name = _whole(r"[A-Z_][A-Z0-9_]{0,127}", "a variable name like HOROVOD_WITH_MPI", "A-Z, 0-9 and _")


def image_digest(reference: str) -> str | None:
    """The digest an image reference pins, if any::

    >>> image_digest("debian:bookworm@sha256:" + "0" * 64)[:12]
    'sha256:00000'
    >>> image_digest("debian:bookworm") is None
    True
    """
    return reference.rsplit("@", 1)[1] if "@" in reference else None


_INVISIBLE = {"Cc", "Cf", "Cs", "Zl", "Zp"}
"""Unicode categories no one-line value may hold: controls (C0, DEL, C1: newline, tab, escape), formats (bidi
overrides U+202A-202E and isolates U+2066-2069, zero-width characters), surrogates, line and paragraph separators."""


_CONTROLS = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x1b": "an escape"}


def off_line_character(text: str) -> str | None:
    r"""The first character of `text` that would break it out of one visible line, named; None when there is none.

    >>> off_line_character("ib0"), off_line_character("a\u202eb"), off_line_character("a\nb")
    (None, 'U+202E (RIGHT-TO-LEFT OVERRIDE)', 'U+000A (a newline)')
    """
    for char in text:
        if unicodedata.category(char) in _INVISIBLE:
            return f"U+{ord(char):04X} ({unicodedata.name(char, _CONTROLS.get(char, 'a control character'))})"
    return None


def _line(value: Any) -> str:
    if not isinstance(value, str) or not value.isprintable() or not 0 < len(value) <= 200:
        raise ValueError("one line of printable text of at most 200 characters (no newline or control character)")
    if value[0] in " %" or "{{" in value:
        raise ValueError("may not start with a space or %, nor hold {{ (a .def reads those as sections or arguments)")
    return value


Version = Annotated[str, BeforeValidator(_version)]
"""A dotted version string ("11.8", "4.1.6"); a bare YAML number is refused with the fix."""

Sha256 = Annotated[str, BeforeValidator(_sha256)]
Url = Annotated[str, BeforeValidator(_url)]
Name = Annotated[str, AfterValidator(_name)]
Image = Annotated[str, AfterValidator(_image)]
"""An image reference: [registry[:port]/]path[:tag][@sha256:digest]; one line, no shell characters."""
ConfigureOption = Annotated[str, AfterValidator(_option)]
"""One ./configure option, `--name` or `--name=value`, that the install line can carry unquoted."""
BuildEnvName = Annotated[str, AfterValidator(_env_name)]
"""An upper-case build variable name (a recipe's horovod.build_env), as Dockerfile ENV and `export` take it."""
EnvValue = Annotated[str, AfterValidator(_env_value)]
"""A variable's value that means the same unquoted, double-quoted, in a Dockerfile and in sh."""
Line = Annotated[str, AfterValidator(_line)]
"""One line of printable text (descriptions, labels): nothing can follow it onto a new line."""


def parse_version(text: str) -> _PkgVersion:
    """Compare versions numerically: parse_version("12.10") > parse_version("12.9")."""
    return _PkgVersion(text)


def major_minor(text: str) -> str:
    """'4.1.6' -> '4.1'; '12' -> '12.0'."""
    parts = (text.split(".") + ["0"])[:2]
    return ".".join(parts)
