"""One small generic registry for every extension point (sources, builders, detectors, ...).

Each extension point creates one :class:`Registry` and registers its implementations with
its decorator, so adding a detector, an aggregator, a model builder, a data source or an
attack is one class plus one decorator. Lookups of an unknown name raise the extension
point's own error class with the list of valid names, so every registry speaks alike.
This module imports nothing else of engage but the error root.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from engage.errors import EngageError

T = TypeVar("T")


class Registry(Generic[T]):
    """Named implementations of one extension point.

    Parameters
    ----------
    kind:
        What the registry holds, as a user reads it ("drift detector", "aggregator").
    error:
        The exception class an unknown name raises; any :class:`EngageError` subclass
        (it gets a message and a hint) or a plain exception class such as ``KeyError``.
    """

    def __init__(self, kind: str, error: type[Exception] = KeyError) -> None:
        self.kind = kind
        self._error = error
        self._items: dict[str, T] = {}

    def register(self, name: str | None = None) -> Callable[[T], T]:
        """A decorator that registers its target under ``name`` (default: its ``name`` attribute).

        Raises
        ------
        ValueError
            If the name is empty or already registered to a different object.
        """

        def decorate(item: T) -> T:
            self.add(item, name)
            return item

        return decorate

    def add(self, item: T, name: str | None = None) -> T:
        """Register ``item`` directly (the non-decorator form of :meth:`register`)."""
        key = name if name is not None else getattr(item, "name", None)
        if not isinstance(key, str) or not key:
            raise ValueError(f"a {self.kind} needs a non-empty string name, got {key!r}")
        existing = self._items.get(key)
        if existing is not None and existing is not item:
            raise ValueError(f"{self.kind} {key!r} is already registered")
        self._items[key] = item
        return item

    def get(self, name: str) -> T:
        """The implementation registered as ``name``; an unknown name lists the valid ones."""
        try:
            return self._items[name]
        except KeyError:
            raise self.unknown(name) from None

    def unknown(self, name: str) -> Exception:
        """The error for an unknown ``name``, naming the valid ones (for callers that raise it)."""
        valid = ", ".join(self.names()) or "(none registered)"
        if issubclass(self._error, EngageError):
            return self._error(f"unknown {self.kind} {name!r}", hint=f"use one of: {valid}")
        return self._error(f"unknown {self.kind} {name!r}; registered: {valid}")

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        """``(name, implementation)`` pairs, sorted by name."""
        return sorted(self._items.items())

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
