"""Load a YAML data file into a validated pydantic model, turning every mistake into a UserError."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .errors import UserError, did_you_mean, format_problem

M = TypeVar("M", bound=BaseModel)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML silently keeps the last)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, where: str) -> dict[str, Any]:
    """Parse YAML text that must hold one mapping; `where` names it in errors."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        place = f"{where}:{mark.line + 1}:{mark.column + 1}" if mark else where
        problem = getattr(exc, "problem", None) or str(exc)
        raise UserError.at(place, "", f"not valid YAML: {problem}", "fix the syntax at that line") from None
    if not isinstance(data, dict):
        raise UserError.at(where, "", "must be a YAML mapping of keys to values", "see the shipped examples")
    return data


def read_yaml(path: Path) -> dict[str, Any]:
    """Read and parse a YAML file; a missing or unreadable file is a UserError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError.at(str(path), "", "no such file", "check the name or path") from None
    except OSError as exc:
        raise UserError.at(str(path), "", f"cannot read: {exc.strerror}") from None
    return parse_yaml(text, str(path))


def named_file(ref: str, directory: Path, kind: str) -> Path:
    """Resolve a name in `directory` ('cpu-local', 'ib-v100') or a path to a YAML file.

    An unknown name is a UserError with the nearest known name, e.g.
    ``recipes: cpu-locl: no such recipe (did you mean cpu-local?)``.
    """
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        return Path(ref)
    path = directory / f"{ref}.yaml"
    if not path.exists():
        names = [p.stem for p in sorted(directory.glob("*.yaml"))]
        raise UserError.at(
            str(directory),
            ref,
            f"no such {kind}",
            did_you_mean(ref, names, f"known {kind}s") if names else f"{directory} has no {kind}s",
        )
    return path


def validate(model: type[M], data: dict[str, Any], where: str) -> M:
    """Validate `data` as `model`; all problems are raised together, one line each."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise UserError(*(_describe(model, err, where) for err in exc.errors())) from None


def _describe(model: type[BaseModel], err: Any, where: str) -> str:
    loc = tuple(err["loc"])
    key = ".".join(key_text(part) for part in loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        valid = sorted(_fields_at(model, loc[:-1]))
        return format_problem(where, key, "unknown key", did_you_mean(str(loc[-1]), valid, "valid keys here"))
    if kind == "missing":
        return format_problem(where, key, "missing required key", "add it; see the shipped files for examples")
    message = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind.endswith("_type") or kind in {"literal_error", "enum"}:
        message = f"{message[0].lower()}{message[1:]}, got {err.get('input')!r}"
    return format_problem(where, key, message)


def key_text(part: Any) -> str:
    """A key as the user typed it, quoted when it is not a plain word (spaces, newlines, '')."""
    text = str(part)
    return text if text and text.isprintable() and not any(c.isspace() for c in text) else repr(text)


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> set[str]:
    """The field names valid at `loc` inside `model` (following nested models, lists and dicts)."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return set()
            current = field.annotation
        else:  # list index or dict key: step into the element type
            args = typing.get_args(current)
            current = args[-1] if args else None
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return set(current.model_fields)
    return set()


def _unwrap(annotation: Any) -> Any:
    """Strip Optional/Annotated so the model or container type underneath shows."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            rest = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = rest[0] if len(rest) == 1 else annotation
            if len(rest) != 1:
                return annotation
        else:
            return annotation
