"""A small named registry for engines, offload backends and other pluggable parts."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from kvbench.errors import KvbenchError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to objects. Entries may be lazy ``"module:attr"`` strings so that
    heavy implementations are imported only when looked up."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T | str] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T | str) -> None:
        if name in self._entries:
            raise KvbenchError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = obj

    def get(self, name: str) -> T:
        try:
            obj = self._entries[name]
        except KeyError:
            raise KvbenchError(
                f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._entries))}"
            ) from None
        if isinstance(obj, str):
            module, _, attr = obj.partition(":")
            obj = getattr(importlib.import_module(module), attr)
            self._entries[name] = obj
        return obj  # type: ignore[return-value]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def lazy_exports(package: str, exports: dict[str, str], namespace: dict) -> Callable[[str], object]:
    """A package's module `__getattr__` that imports each export from its module on first
    use (and keeps it in `namespace`), so importing the package stays light."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        namespace[name] = value
        return value

    return __getattr__
