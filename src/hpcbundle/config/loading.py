"""Load a YAML data file into a validated pydantic model, turning every mistake into a UserError.

Loading is bounded so that a hostile or mistaken file costs little: regular files only (a FIFO
never blocks, a device is never read), at most MAX_FILE_BYTES, strict UTF-8, no YAML aliases
(billion laughs), no explicit tags, no complex keys, nesting, list lengths and integers bounded,
and no YAML 1.1 number spellings (010, 0x10, 1_000, 1:20) that silently change a value.
"""

from __future__ import annotations

import json
import os
import re
import stat
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .errors import UserError, clip, did_you_mean, format_problem, shape, yaml_scalar

M = TypeVar("M", bound=BaseModel)

MAX_FILE_BYTES = 1 << 20
"""The largest input file read (recipes and sites are a few KiB)."""
MAX_DEPTH = 32
"""The deepest nesting of YAML or JSON collections accepted."""
MAX_ITEMS = 4096
"""The most items in one YAML list or mapping."""
MAX_DIGITS = 18
"""The most digits of an integer (a 64-bit count fits)."""
MAX_PROBLEMS = 20
"""Validation problems printed before the rest are only counted."""

_INT_TAG = "tag:yaml.org,2002:int"
_WORD = re.compile(r"[A-Za-z0-9_.\[\]-]{1,40}")
_DECIMAL = re.compile(r"[-+]?(0|[1-9][0-9]*)")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice, aliases, explicit tags, complex keys, deep nesting,
    long collections, huge integers and YAML 1.1 number spellings; timestamps stay strings."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(
                "uses a YAML alias (*name)", event.start_mark, "write the value out; aliases are not accepted"
            )
        if getattr(event, "tag", None) not in (None, "!"):
            raise _Refused(
                f"uses the YAML tag {clip(event.tag)}", event.start_mark, "drop the tag; write the plain value"
            )
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(f"nests deeper than {MAX_DEPTH} levels", event.start_mark)
        node = super().compose_node(parent, index)
        self._depth -= 1
        if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)) and len(node.value) > MAX_ITEMS:
            raise _Refused(f"has more than {MAX_ITEMS} items in one list or mapping", node.start_mark)
        if isinstance(node, yaml.ScalarNode) and "\x00" in node.value:
            raise _Refused("holds a NUL character, which no command line can carry", node.start_mark, "remove it")
        if isinstance(node, yaml.ScalarNode) and node.tag == _INT_TAG and node.style is None:
            _check_integer(node)
        return node


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML this loader does not accept, with the fix."""

    def __init__(self, problem: str, mark: yaml.Mark | None, fix: str = "give the intended file") -> None:
        super().__init__(problem=problem, problem_mark=mark)
        self.fix = fix


def _check_integer(node: yaml.ScalarNode) -> None:
    """A plain integer must be decimal (YAML 1.1 reads 010 as 8, 0x10 as 16, 1:20 as 80) and short."""
    text = node.value
    if not _DECIMAL.fullmatch(text):
        shown = text[:20]
        raise _Refused(f"{shown} is a different number to YAML 1.1 (010 is 8)", node.start_mark, f'quote it: "{shown}"')
    if len(text.lstrip("+-")) > MAX_DIGITS:
        raise _Refused(f"has an integer of more than {MAX_DIGITS} digits", node.start_mark, "give a smaller number")


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise _Refused("has a list or mapping as a key", key_node.start_mark, "keys are plain words")
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise _Refused(f"key {clip(key)} is given twice", key_node.start_mark, "keep one of them")
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
        if isinstance(exc, _Refused):
            raise UserError.at(place, "", str(exc.problem), exc.fix) from None
        problem = getattr(exc, "problem", None) or "cannot be parsed"
        raise UserError.at(place, "", f"not valid YAML: {problem}", "fix the syntax at that line") from None
    if not isinstance(data, dict):
        raise UserError.at(where, "", "must be a YAML mapping of keys to values", "see the shipped examples")
    return data


def read_text(path: Path, option: str = "", limit: int = MAX_FILE_BYTES, lenient: bool = False) -> str:
    """Read a user's text file, bounded: a regular file of at most `limit` bytes, strict UTF-8 (`lenient`:
    undecodable bytes become U+FFFD, for logs).

    Every refusal is a UserError naming the file (and `option`, e.g. '--hostfile'); a FIFO or
    device is refused from its stat, before any open that could block or read forever.
    """
    where = str(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise UserError.at(where, option, "no such file", "check the name or path") from None
    except OSError as exc:
        raise UserError.at(where, option, f"cannot read: {exc.strerror}", "check the path") from None
    _regular(info, where, option, limit)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as handle:
            _regular(os.fstat(handle.fileno()), where, option, limit)
            data = handle.read(limit + 1)
    except OSError as exc:
        raise UserError.at(where, option, f"cannot read: {exc.strerror}", "check the path and permissions") from None
    if len(data) > limit:
        raise UserError.at(where, option, f"is larger than {limit} bytes", "give the intended file")
    try:
        return data.decode("utf-8", errors="replace" if lenient else "strict")
    except UnicodeDecodeError as exc:
        raise UserError.at(
            where, option, f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})", "save it as UTF-8"
        ) from None


def _regular(info: os.stat_result, where: str, option: str, limit: int) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise UserError.at(where, option, "is a directory", "give a file")
    if not stat.S_ISREG(info.st_mode):
        raise UserError.at(where, option, "is not a regular file (a FIFO, device or socket)", "give a regular file")
    if info.st_size > limit:
        raise UserError.at(where, option, f"is larger than {limit} bytes", "give the intended file")


def read_yaml(path: Path) -> dict[str, Any]:
    """Read and parse a YAML file; a missing, unreadable, oversized or non-UTF-8 file is a UserError."""
    return parse_yaml(read_text(path), str(path))


def parse_json(text: str, where: str) -> Any:
    """Parse JSON text bounded like YAML (nesting at most MAX_DEPTH); `where` names it in errors."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise UserError.at(where, "", f"nests deeper than {MAX_DEPTH} levels", "give the intended file") from None
    except ValueError as exc:
        problem = exc.msg if isinstance(exc, json.JSONDecodeError) else "cannot be parsed"
        raise UserError.at(where, "", f"cannot be read as JSON ({problem})", "give the file hpcbundle wrote") from None
    if _depth(data) > MAX_DEPTH:
        raise UserError.at(where, "", f"nests deeper than {MAX_DEPTH} levels", "give the intended file")
    return data


def _depth(data: Any) -> int:
    """How deeply lists and objects nest in parsed JSON (iterative: no recursion limit)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def named_file(ref: str, directory: Path, kind: str) -> Path:
    """Resolve a name in `directory` ('cpu-local', 'ib-v100') or a path to a YAML file.

    An unknown name is a UserError with the nearest known name, e.g.
    ``recipes: cpu-locl: no such recipe (did you mean cpu-local?)``.
    """
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        return Path(ref)
    path = directory / f"{ref}.yaml"
    if not _WORD.fullmatch(ref) or not path.exists():
        names = [p.stem for p in sorted(directory.glob("*.yaml"))]
        raise UserError.at(
            str(directory),
            key_text(ref),
            f"no such {kind}",
            did_you_mean(ref, names, f"known {kind}s") if names else f"{directory} has no {kind}s",
        )
    return path


def validate(model: type[M], data: dict[str, Any], where: str) -> M:
    """Validate `data` as `model`; all problems are raised together, one line each."""
    if data and not {str(key) for key in data} & set(model.model_fields):
        raise UserError.at(
            where,
            "",
            f"has none of the keys of a {model.__name__.lower()} file, so it is not one",
            f"give a YAML file with {', '.join(sorted(model.model_fields)[:4])}, ...",
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        lines = [_describe(model, err, where) for err in errors[:MAX_PROBLEMS]]
        if len(errors) > MAX_PROBLEMS:
            lines.append(format_problem(where, "", f"and {len(errors) - MAX_PROBLEMS} more problems"))
        raise UserError(*lines) from None


def _describe(model: type[BaseModel], err: Any, where: str) -> str:
    loc = tuple(err["loc"])
    key = key_path(loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        valid = sorted(_fields_at(model, loc[:-1]))
        return format_problem(where, key, "unknown key", did_you_mean(str(loc[-1]), valid, "valid keys here"))
    if kind == "missing":
        return format_problem(where, key, "missing required key", "add it; see the shipped files for examples")
    if kind == "one_line":
        key = key_path((*loc, *err["ctx"]["at"]))
        return format_problem(where, key, str(err["msg"]), "remove it: write the value on one line")
    if kind in _EXPECTED:
        return _wrong_type(where, key, _EXPECTED[kind], err.get("input"))
    if kind in _BOUNDS:
        words, bound = _BOUNDS[kind], next(iter(err["ctx"].values()))
        bound = int(bound) if isinstance(bound, float) and bound.is_integer() else bound
        problem = f"expected {words} {bound}, got {shape(err.get('input'))}"
        fix = "see docs/untrusted-input.md for the bounds and why" if kind.startswith("less") else ""
        return format_problem(where, key, problem, fix)
    message = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind.endswith("_type") or kind in {"literal_error", "enum"}:
        message = f"{message[0].lower()}{message[1:]}, got {shape(err.get('input'))}"
    return format_problem(where, key, message)


_EXPECTED = {
    "int_type": "a whole number",
    "float_type": "a number",
    "string_type": "text",
    "bool_type": "true or false",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}
"""What a strict type error expected, by pydantic's error type."""
_BOUNDS = {
    "less_than_equal": "at most",
    "less_than": "less than",
    "greater_than_equal": "at least",
    "greater_than": "more than",
}
"""A bound's words, by pydantic's error type (the bound itself is the error's only context value)."""


def _wrong_type(where: str, key: str, expected: str, value: Any) -> str:
    """`key: expected a whole number, got a boolean (true) (fix)`: what the key takes, what YAML made of the
    value, and how to write it (YAML reads yes/no/on/off as booleans and 3.10 as the number 3.1)."""
    if isinstance(value, bool) and expected != "text":
        fix = f"write {expected}: YAML reads yes, no, on, off, true and false as booleans"
    elif isinstance(value, (bool, int, float)) and expected == "text":
        fix = f'quote it: "{yaml_scalar(value)}"; YAML reads 3.10 as the number 3.1 and yes as true'
    elif isinstance(value, str) and expected in ("a whole number", "a number", "true or false"):
        fix = f"write {expected} without quotes"
    else:
        fix = "see docs/reference for the key's type"
    return format_problem(where, key, f"expected {expected}, got {shape(value)}", fix)


def key_path(loc: tuple[Any, ...]) -> str:
    """A key's path as a user writes it in `why:`: node.gpu_numa[1], env.X.

    >>> key_path(("wrappers", 0, 2)), key_path(("env", "NCCL_DEBUG"))
    ('wrappers[0][2]', 'env.NCCL_DEBUG')
    """
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{key_text(part)}" if text else key_text(part)
    return text


def key_text(part: Any) -> str:
    """A key as the user typed it, quoted when it is not a plain word (spaces, newlines, ''), clipped to a few
    characters so that an unrelated file given by mistake is not echoed back."""
    text = str(part)
    if _WORD.fullmatch(text):
        return text
    return clip(text, 16)


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
