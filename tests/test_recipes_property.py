"""Property: any invalid recipe is refused with clear one-line errors, never a crash."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcbundle.config.errors import UserError
from hpcbundle.config.loading import key_text, validate
from hpcbundle.config.recipes import Recipe

from .helpers import examples, recipe_data

BASE = recipe_data("cuda12.2-tf2.15-torch2.1-ucx")
WHERE = "recipes/fuzz.yaml"

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into the recipe mapping."""
    found = []
    if isinstance(node, dict):
        for key, child in node.items():
            found.append(prefix + (key,))
            found.extend(_paths(child, prefix + (key,)))
    return found


PATHS = _paths(BASE)


def _with(data: dict, path: tuple, value: Any) -> dict:
    import copy

    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def _refused(data: dict) -> list[str]:
    try:
        validate(Recipe, data, WHERE)
    except UserError as exc:
        return list(exc.lines)
    return []


@settings(max_examples=examples(600), suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), name=st.text(min_size=1, max_size=10).filter(lambda s: s.strip()))
def test_unknown_key_anywhere_is_refused_by_name(path, name):
    name = f"unknown{name}"  # never an optional key the base recipe leaves out (build_env, ucx, ...)
    parent = path[:-1]
    node = BASE
    for key in parent:
        node = node[key]
    if not isinstance(node, dict) or name in node:
        return
    data = _with(BASE, parent + (name,), "x") if parent else {**BASE, name: "x"}
    lines = _refused(data)
    dotted = ".".join(key_text(p) for p in (*parent, name))
    assert any(line.startswith(f"{WHERE}: {dotted}: unknown key") for line in lines), lines


@settings(max_examples=examples(600), suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=values)
def test_any_value_anywhere_is_valid_or_refused_cleanly(path, value):
    lines = _refused(_with(BASE, path, value))
    for line in lines:
        assert line.startswith(f"{WHERE}: ") and "\n" not in line
