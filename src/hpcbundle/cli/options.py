"""Bounded option types: counts and seconds in ASCII digits within a range (no 10**30, no '٣')."""

from __future__ import annotations

import re
from typing import Any

import click

MAX_COUNT = 1_000_000
"""The largest count an option takes unless it says otherwise (ranks, nodes, repeats, batch sizes)."""
MAX_SECONDS = 7 * 24 * 3600
"""The longest timeout an option takes: a week."""


class Count(click.IntRange):
    """An integer option written in ASCII digits, between `min` and `max` (inclusive).

    >>> Count(1, 10).convert("7", None, None)
    7
    """

    name = "integer"

    def __init__(self, min: int = 1, max: int = MAX_COUNT) -> None:  # noqa: A002 - click's own names
        super().__init__(min=min, max=max)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not re.fullmatch(r"[0-9]{1,18}", value):
            self.fail(f"{value[:20]!r} is not a whole number in ASCII digits from {self.min} to {self.max}", param, ctx)
        return super().convert(value, param, ctx)


def seconds(max: int = MAX_SECONDS) -> Count:  # noqa: A002
    """A timeout in seconds, from 1 to `max` (a week unless given)."""
    return Count(1, max)
