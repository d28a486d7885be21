"""Registries of small classes by name, each class in a file of its own (launchers, container
runtimes, image building blocks): importing the package registers every file, so adding one is
adding a file.

    >>> PLUGINS: Registry[object] = Registry("plugin")
    >>> @PLUGINS.register
    ... class Hello:
    ...     name = "hello"
    >>> PLUGINS.names(), type(PLUGINS.get("hello")).__name__, PLUGINS.get("nope")
    (['hello'], 'Hello', None)
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Generic, Iterable, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Classes by their `name`; `get` and `all` give instances."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._classes: dict[str, type[T]] = {}

    def register(self, cls: type[T]) -> type[T]:
        name: str = cls.name  # type: ignore[attr-defined]
        if name in self._classes:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._classes[name] = cls
        return cls

    def names(self) -> list[str]:
        return sorted(self._classes)

    def get(self, name: str) -> T | None:
        cls = self._classes.get(name)
        return cls() if cls else None

    def all(self) -> list[T]:
        return [self._classes[name]() for name in self.names()]


def import_all(package: str, path: Iterable[str]) -> None:
    """Import every module of a package, so each file registers its class."""
    for module in pkgutil.iter_modules(path):
        importlib.import_module(f"{package}.{module.name}")
