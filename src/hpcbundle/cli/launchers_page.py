"""docs/reference/launchers.md, rendered from the launcher and runtime rows (knowledge/launching.py) and the
launch classes' summaries; and the names a site key takes from those rows, for the site keys page.

The schema (config/) stands below knowledge/ and cannot read the rows, so its descriptions of launcher.name and
container.runtime point here, and the reference pages fill the names in.
"""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any

from ..config.sites import LauncherSettings
from ..knowledge.launching import COMMON_KEYS, LAUNCHERS_KNOWN, RUNTIMES_KNOWN, LauncherKnown, RuntimeKnown
from ..launch import LAUNCHERS, RUNTIMES

NAMED_BY_ROWS: dict[str, dict[str, Any]] = {"launcher.name": LAUNCHERS_KNOWN, "container.runtime": RUNTIMES_KNOWN}
"""The site keys whose value is the name of a row."""


def with_names(key: str, description: str) -> str:
    """A site key's description, with the names its rows allow when the key names a row.

    >>> with_names("container.runtime", "the runtime").split(": ")[1].split(", ")[:2]
    ['apptainer', 'charliecloud']
    """
    rows = NAMED_BY_ROWS.get(key)
    return f"{description}: {', '.join(rows)}" if rows is not None else description


def _meanings(row_type: type) -> dict[str, str]:
    """field -> its meaning, from the lines of the row type's docstring that start with a field's name
    (indented lines after one continue it)."""
    names = {field.name for field in fields(row_type)}
    meanings: dict[str, str] = {}
    last = ""
    for line in inspect.cleandoc(row_type.__doc__ or "").splitlines():
        word, _, rest = line.partition(" ")
        if word in names and rest.strip():
            last = word
            meanings[last] = rest.strip()
        elif last and line.startswith(" ") and line.strip():
            meanings[last] += " " + line.strip()
        else:
            last = ""
    return meanings


def _value(value: object) -> str:
    """A row's value in a table cell: yes for True, lists comma-joined, code for words."""
    if value is True:
        return "yes"
    if value is False or value is None or value == "" or value == ():
        return ""
    if isinstance(value, frozenset):
        value = sorted(value)
    if isinstance(value, (tuple, list)):
        return ", ".join(_value(item) for item in value)
    return f"`{value}`".replace("|", "\\|")


def _rows_table(rows: dict[str, Any], row_type: type) -> list[str]:
    """One line per field of `row_type`, one column per row: what each launcher or runtime is known to do."""
    meanings = _meanings(row_type)
    lines = ["| field | " + " | ".join(f"`{name}`" for name in rows) + " | what it says |"]
    lines.append("|---" * (len(rows) + 2) + "|")
    for field in fields(row_type):
        cells = [_value(getattr(row, field.name)) for row in rows.values()]
        lines.append(f"| `{field.name}` | " + " | ".join(cells) + f" | {meanings.get(field.name, '')} |")
    return lines


def _keys_table() -> list[str]:
    """One line per launcher.* key, one column per launcher: yes where the launcher honours it."""
    lines = ["| key | " + " | ".join(f"`{name}`" for name in LAUNCHERS_KNOWN) + " |"]
    lines.append("|---" * (len(LAUNCHERS_KNOWN) + 1) + "|")
    for key in LauncherSettings.model_fields:
        cells = ["yes" if key in COMMON_KEYS | known.options else "" for known in LAUNCHERS_KNOWN.values()]
        lines.append(f"| `launcher.{key}` | " + " | ".join(cells) + " |")
    return lines


def launchers_page(header: list[str]) -> str:
    """The page under `header`: each launcher and runtime with its summary, the launcher keys each launcher
    honours (the rule launcher-options refuses the others), and every field of every row."""
    lines = [*header, "## Launchers", ""]
    for name in LAUNCHERS_KNOWN:
        launcher = LAUNCHERS.get(name)
        lines.append(f"- `{name}`: {launcher.summary if launcher else '(no launch class)'}")
    lines += ["", "## Which launcher honours which site key", "", *_keys_table(), ""]
    lines += ["## What each launcher does", "", *_rows_table(LAUNCHERS_KNOWN, LauncherKnown), ""]
    lines += ["## Container runtimes", ""]
    for name in RUNTIMES_KNOWN:
        runtime = RUNTIMES.get(name)
        lines.append(f"- `{name}`: {runtime.summary if runtime else '(no launch class)'}")
    lines += ["", "## What each runtime does", "", *_rows_table(RUNTIMES_KNOWN, RuntimeKnown)]
    return "\n".join(lines) + "\n"
