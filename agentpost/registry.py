"""One small registry for the project's name -> implementation tables (advantage estimators, aggregations,
divergences, teacher syncs, credit methods): a decorator that refuses a second entry under one name, and a lookup
whose error names the unknown key and lists the known ones (TRL / verl register their estimators the same way)."""

from __future__ import annotations

from typing import Callable, TypeVar

T = TypeVar("T")


class UnknownName(KeyError, ValueError):
    """A name no entry is registered under: a ``KeyError`` (a failed lookup) and a ``ValueError`` (a bad argument),
    so callers that catch either keep working; its message reads plainly (no ``KeyError`` quotes)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Registry(dict):
    """A ``dict`` of name -> object with :meth:`register` (decorator) and :meth:`lookup` (clear ``KeyError``).

    ``kind`` names what is registered in messages, e.g. ``Registry("aggregation")``."""

    def __init__(self, kind: str, entries: dict | None = None):
        super().__init__()
        self.kind = kind
        for name, obj in (entries or {}).items():
            self.register(name)(obj)

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator registering its argument under ``name``; a name already taken raises ``ValueError``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} needs a non-empty string name, got {name!r}")

        def wrap(obj: T) -> T:
            if name in self:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self[name] = obj
            return obj

        return wrap

    def lookup(self, name: str):
        """The object registered as ``name``; :class:`UnknownName` naming it and the known names otherwise."""
        if name not in self:
            raise UnknownName(f"unknown {self.kind} {name!r}; known: {sorted(self)}")
        return self[name]
