"""Registries of named classes (control laws, sparsifiers): one decorator factory for all."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T", bound=type)


def registrar(table: dict[str, type], kind: str) -> Callable[[str], Callable[[T], T]]:
    """A class decorator factory: ``@register("name")`` sets ``cls.name`` and adds ``cls`` to
    ``table``; a name registered twice is a ValueError naming the ``kind`` of thing."""

    def register(name: str) -> Callable[[T], T]:
        def add(cls: T) -> T:
            if name in table:
                raise ValueError(f"{kind} {name!r} registered twice")
            cls.name = name
            table[name] = cls
            return cls

        return add

    return register
