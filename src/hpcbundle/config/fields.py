"""Validated scalar types shared by recipes and sites: versions, checksums, URLs, names."""

from __future__ import annotations

import re
from typing import Annotated, Any

from packaging.version import Version as _PkgVersion
from pydantic import AfterValidator, BeforeValidator

_VERSION = re.compile(r"^\d+(\.\d+){0,3}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _version(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f'write versions as quoted strings, e.g. "{value}" (YAML reads 12.10 as the number 12.1)')
    if not isinstance(value, str) or not _VERSION.match(value):
        raise ValueError(f'not a version like "4.1.6": {value!r}')
    return value


def _sha256(value: Any) -> str:
    if not isinstance(value, str) or not _SHA256.match(value):
        raise ValueError("a sha256 is 64 lowercase hex digits (run sha256sum on the file)")
    return value


def _url(value: Any) -> str:
    if not isinstance(value, str) or not re.match(r"^https?://[^\s/]+/\S+$", value):
        raise ValueError(f"not an http(s) URL to a file: {value!r}")
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError("use letters, digits, '.', '_' and '-' only, starting with a letter or digit")
    return value


Version = Annotated[str, BeforeValidator(_version)]
"""A dotted version string ("11.8", "4.1.6"); a bare YAML number is refused with the fix."""

Sha256 = Annotated[str, BeforeValidator(_sha256)]
Url = Annotated[str, BeforeValidator(_url)]
Name = Annotated[str, AfterValidator(_name)]


def parse_version(text: str) -> _PkgVersion:
    """Compare versions numerically: parse_version("12.10") > parse_version("12.9")."""
    return _PkgVersion(text)


def major_minor(text: str) -> str:
    """'4.1.6' -> '4.1'; '12' -> '12.0'."""
    parts = (text.split(".") + ["0"])[:2]
    return ".".join(parts)
