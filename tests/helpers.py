"""Small shared helpers for tests: the repository root, loading a shipped recipe as a dict."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"


def recipe_data(name: str) -> dict[str, Any]:
    """A shipped recipe as plain data, safe to mutate."""
    return copy.deepcopy(yaml.safe_load((RECIPES / f"{name}.yaml").read_text()))


def write_recipe(directory: Path, data: dict[str, Any]) -> Path:
    """Write `data` as <directory>/<data['name']>.yaml and return the path."""
    path = directory / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
