"""Base class for every data model: strict keys, strict types, one-line text, frozen values."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .fields import off_line_character


class StrictModel(BaseModel):
    """Unknown keys are errors (a typo must never be silently ignored); values are immutable.

    Types are strict (pydantic's strict mode): a YAML boolean (`yes`, `true`) is never a number, and a
    number is never text, so `stall_seconds: yes` is refused instead of becoming 1. Every string, in a
    value, a list or a mapping's key, is one line of visible text: no control character (newline,
    tab, escape), bidi override or line separator can hide in a name or split a generated line.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _yaml_tuples(cls, data: Any) -> Any:
        """YAML has no tuples: a list where the schema holds a tuple (a [min, max] pair) is taken as one."""
        if not isinstance(data, dict):
            return data
        tuples = {name for name, field in cls.model_fields.items() if _is_tuple(field.annotation)}
        return {
            key: tuple(value) if key in tuples and isinstance(value, list) else value for key, value in data.items()
        }

    @field_validator("*", mode="after")
    @classmethod
    def _one_line(cls, value: Any) -> Any:
        for at, text in _strings(value, ()):
            char = off_line_character(text)
            if char is not None:
                raise PydanticCustomError(
                    "one_line", "holds {char}: values are one line of visible text", {"char": char, "at": at}
                )
        return value


def _is_tuple(annotation: Any) -> bool:
    """Whether a field holds a tuple, maybe optional (tuple[int, int] | None)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_is_tuple(arg) for arg in typing.get_args(annotation))
    return typing.get_origin(annotation) is tuple


def _strings(value: Any, at: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], str]]:
    """Every string in a validated field's value with where it is inside it (nested models check themselves)."""
    if isinstance(value, str):
        return [(at, value)]
    if isinstance(value, dict):
        found = []
        for key, item in value.items():
            found += _strings(key, (*at, key)) + _strings(item, (*at, key))
        return found
    if isinstance(value, (list, tuple)):
        return [found for index, item in enumerate(value) for found in _strings(item, (*at, index))]
    return []
