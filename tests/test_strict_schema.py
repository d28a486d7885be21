"""Property: the schema is strict about types, bounds and one-line text, anywhere in any shipped site or recipe.

A YAML boolean (`yes`, `true`) where a number is expected, a number where text is expected, a count above
its bound (config/limits.py) and a control, bidi or line-separator character in any string are each refused
with one line naming the file and the key, and saying what it got; the shipped files still load.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from hpcbundle.config.errors import UserError
from hpcbundle.config.limits import (
    MAX_CORES,
    MAX_GATE_SECONDS,
    MAX_GPUS,
    MAX_LINK_GBPS,
    MAX_NODES,
    MAX_NUMA_NODE,
    MAX_PORT,
    MAX_RANKS,
    MAX_RESTARTS,
    MAX_SECONDS,
    MAX_SIGNAL_SECONDS,
)
from hpcbundle.config.loading import _unwrap, key_path, validate
from hpcbundle.config.recipes import Recipe
from hpcbundle.config.sites import Site
from hpcbundle.rules.loading import load_recipe, load_site

from .helpers import RECIPES, SHIPPED, SHIPPED_RECIPES, SITES, examples, hpcbundle, recipe_data, site_variant

Path_ = tuple[Any, ...]

EVERY_COUNT = site_variant(
    "local",
    {
        "launcher": {"timeout": 3600},
        "node": {"gpus": 2, "ranks_per_node": 2, "cpus_per_rank": 1, "numa_memory": [0, 1], "gpu_numa": [0, 1]},
        "network": {"link_gbps": 100.0},
        "gate": {"threshold": 0.5, "timeout": 30},
        "torch": {"port": 29500, "max_restarts": 1, "join_timeout": 300},
        "faults": {
            "stall_seconds": 600,
            "signal_before_end": 300,
            "elastic": {"min_np": 1, "max_np": 2, "discovery": "hostfile", "cooldown": [10, 300], "ssh_port": 22},
        },
    },
    name="every-count",
)
"""The local site with every optional number of the schema set, so each one is tried."""

CORPUS: list[tuple[type[BaseModel], str, dict[str, Any]]] = [
    *[(Site, f"{name}.yaml", yaml.safe_load((SITES / f"{name}.yaml").read_text())) for name in SHIPPED],
    (Site, "every-count.yaml", EVERY_COUNT),
    *[(Recipe, f"{name}.yaml", recipe_data(name)) for name in SHIPPED_RECIPES],
]

BOUNDS: dict[Path_, int] = {
    ("launcher", "timeout"): MAX_SECONDS,
    ("node", "cores"): MAX_CORES,
    ("node", "gpus"): MAX_GPUS,
    ("node", "ranks_per_node"): MAX_CORES,
    ("node", "cpus_per_rank"): MAX_CORES,
    ("node", "numa_memory", 0): MAX_NUMA_NODE,
    ("node", "gpu_numa", 0): MAX_NUMA_NODE,
    ("network", "link_gbps"): MAX_LINK_GBPS,
    ("gate", "timeout"): MAX_GATE_SECONDS,
    ("faults", "stall_seconds"): MAX_SECONDS,
    ("faults", "signal_before_end"): MAX_SIGNAL_SECONDS,
    ("faults", "elastic", "min_np"): MAX_RANKS,
    ("faults", "elastic", "max_np"): MAX_RANKS,
    ("faults", "elastic", "cooldown", 0): 3600,
    ("faults", "elastic", "cooldown", 1): 3600,
    ("faults", "elastic", "ssh_port"): MAX_PORT,
    ("torch", "port"): MAX_PORT,
    ("torch", "max_restarts"): MAX_RESTARTS,
    ("torch", "join_timeout"): MAX_GATE_SECONDS,
}
"""Every count a site holds, with its upper bound."""


def _leaves(node: Any, kinds: tuple[type, ...], prefix: Path_ = ()) -> list[Path_]:
    """Every path to a value of `kinds` (never a boolean) in parsed YAML."""
    if isinstance(node, dict):
        return [path for key, value in node.items() for path in _leaves(value, kinds, (*prefix, key))]
    if isinstance(node, list):
        return [path for index, value in enumerate(node) for path in _leaves(value, kinds, (*prefix, index))]
    return [prefix] if isinstance(node, kinds) and not isinstance(node, bool) else []


def _set(data: dict[str, Any], path: Path_, value: Any) -> dict[str, Any]:
    changed = yaml.safe_load(yaml.safe_dump(data))
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return changed


def _places(kinds: tuple[type, ...], skip: tuple[str, ...] = ()) -> list[tuple[int, Path_]]:
    return [
        (index, path)
        for index, (_, _, data) in enumerate(CORPUS)
        for path in _leaves(data, kinds)
        if path[0] not in skip
    ]


NUMBERS = _places((int, float))
TEXTS = _places((str,), skip=("env", "mca"))  # env and mca values take an integer as its digits, by design
STRINGS = _places((str,))


def _refusal(index: int, path: Path_, value: Any) -> str:
    """The one line the corpus file at `index` is refused with when `path` holds `value`."""
    model, where, data = CORPUS[index]
    with pytest.raises(UserError) as refused:
        validate(model, _set(data, path, value), where)
    (line,) = [line for line in refused.value.lines if line.startswith(f"{where}: {key_path(path)}")]
    return line


def test_the_corpus_has_every_number_of_the_schema():
    """The properties below try every numeric key the schema has, not only the ones shipped files set."""
    tried = {tuple(p for p in path if not isinstance(p, int)) for _, path in NUMBERS}
    assert _numeric_keys(Site) | _numeric_keys(Recipe) <= tried


def test_every_count_of_a_site_has_an_upper_bound():
    """A new count in the schema fails here until it has a bound (gate.threshold is a fraction, judged by a rule)."""
    counts = {path for index, path in NUMBERS if CORPUS[index][1] == "every-count.yaml"} - {("gate", "threshold")}
    assert all(path in BOUNDS or (*path[:-1], 0) in BOUNDS for path in counts)


def _numeric_keys(model: type[BaseModel], prefix: Path_ = ()) -> set[Path_]:
    found: set[Path_] = set()
    for name, field in model.model_fields.items():
        inner = _unwrap(field.annotation)
        while getattr(inner, "__args__", None) and not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            inner = _unwrap(inner.__args__[0])
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            found |= _numeric_keys(inner, (*prefix, name))
        elif inner in (int, float):
            found.add((*prefix, name))
    return found


@settings(max_examples=examples(300), deadline=None)
@given(place=st.sampled_from(NUMBERS), value=st.booleans())
def test_a_boolean_where_a_number_is_expected_is_refused_naming_the_key(place, value):
    line = _refusal(*place, value)
    assert f"got a boolean ({str(value).lower()})" in line and "YAML reads yes" in line


@settings(max_examples=examples(300), deadline=None)
@given(place=st.sampled_from(TEXTS), value=st.one_of(st.integers(-(10**17), 10**17), st.floats(0.1, 1e6)))
def test_a_number_where_text_is_expected_is_refused_naming_the_key(place, value):
    assert "got a number" in _refusal(*place, value)


@settings(max_examples=examples(300), deadline=None)
@given(place=st.sampled_from(sorted(BOUNDS)), data=st.data())
def test_a_count_above_its_bound_is_refused_naming_the_key_and_the_bound(place, data):
    bound = BOUNDS[place]
    value = data.draw(st.integers(bound + 1, 10**18))
    index = [i for i, (_, where, _) in enumerate(CORPUS) if where == "every-count.yaml"][0]
    assert f"expected at most {bound}, got a number ({value})" in _refusal(index, place, value)


@pytest.mark.parametrize("place", sorted(BOUNDS), ids=key_path)
def test_a_count_at_its_bound_passes_the_schema(place):
    assert validate(Site, _set(EVERY_COUNT, place, BOUNDS[place]), "every-count.yaml")


OFF_LINE = st.one_of(
    st.characters(categories=("Cc", "Cf", "Zl", "Zp")),
    st.sampled_from(["\n", "\r", "\t", "\x1b", "\x7f", "\x85", "\u202e", "\u2066", "\u2028", "\u2029"]),
)
"""Characters no one-line value may hold: C0, DEL, C1, bidi overrides and isolates, zero-width, separators."""


@settings(max_examples=examples(400), deadline=None)
@given(place=st.sampled_from(STRINGS), char=OFF_LINE, data=st.data())
def test_a_control_or_bidi_character_in_any_string_is_refused_naming_the_key(place, char, data):
    index, path = place
    text = _get(CORPUS[index][2], path)
    at = data.draw(st.integers(0, len(text)))
    _refusal(index, path, text[:at] + char + text[at:])


def _get(data: Any, path: Path_) -> Any:
    for key in path:
        data = data[key]
    return data


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_site_still_loads(name):
    assert load_site(name, SITES).name == name


@pytest.mark.parametrize("name", SHIPPED_RECIPES)
def test_every_shipped_recipe_still_loads(name):
    assert load_recipe(name, RECIPES).name == name


def test_a_yaml_list_is_taken_as_a_pair_where_the_schema_holds_one():
    assert validate(Site, EVERY_COUNT, "every-count.yaml").faults.elastic.cooldown == (10, 300)


def test_a_file_that_is_not_a_site_is_refused_without_echoing_its_values(tmp_path):
    path = tmp_path / "creds.yaml"
    path.write_text("name: creds\nmpi: hunter2\nnode: s3cr3t\n")
    result = hpcbundle("launch", "--site", str(path), "--np", "1", "--", "python3", "t.py")
    assert result.returncode == 2 and "hunter2" not in result.stderr and "s3cr3t" not in result.stderr
    assert "mpi: expected a mapping, got text of 7 characters" in result.stderr


def test_the_count_options_state_their_bounds_in_help_and_refuse_above_them():
    assert f"[1<=x<={MAX_RANKS}; required]" in hpcbundle("launch", "--help").stdout
    sbatch_help = " ".join(hpcbundle("sbatch", "--help").stdout.split())
    assert f"[1<=x<={MAX_NODES}; required]" in sbatch_help and f"[1<=x<={MAX_CORES}]" in sbatch_help
    result = hpcbundle("launch", "--np", str(MAX_RANKS + 1), "--", "python3", "t.py")
    assert result.returncode == 2 and f"1<=x<={MAX_RANKS}" in result.stderr
    result = hpcbundle("launch", "--np", "1", "--timeout", str(MAX_SECONDS + 1), "--", "python3", "t.py")
    assert result.returncode == 2 and "--timeout" in result.stderr
    result = hpcbundle("sbatch", "--nodes", "1", "--time", "366-00:00:00", "--", "python3", "t.py")
    assert result.returncode == 2 and "--time: '366-00:00:00' is not a SLURM time of at most a year" in result.stderr


@pytest.mark.parametrize(
    "why, line",
    [
        ({"faults.kill_on_bad_exit": "x"}, "why.faults.kill_on_bad_exit: names no key this site sets"),
        ({"env..X": "x"}, "why: 'env..X' is not a key path"),
        ({"wrappers[" + "9" * 5000 + "]": "x"}, "is not a key path"),
        ({"launcher.oversubscribe": "two\nlines"}, "why.launcher.oversubscribe: holds U+000A (a newline)"),
    ],
)
def test_a_why_key_must_be_a_key_path_the_site_sets_and_its_line_one_line(tmp_path, why, line):
    data = site_variant("local", name="bad", why={**site_variant("local")["why"], **why})
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(UserError) as refused:
        load_site(str(tmp_path / "bad.yaml"), SITES)
    assert any(line in problem for problem in refused.value.lines), refused.value.lines
