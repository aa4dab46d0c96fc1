"""One small registry per extension point (algorithms, losses, rewards, view transforms, tools, benchmarks).

A name is either registered with the decorator or given as ``module:function`` (a dotted path to user code).
Unknown names raise a ``KeyError`` that lists the known ones.
"""
from __future__ import annotations

import difflib
import importlib
from typing import Any, Callable, Dict, Iterator


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._items: Dict[str, Any] = {}

    def register(self, name: str | None = None) -> Callable[[Any], Any]:
        def deco(obj: Any) -> Any:
            key = name or getattr(obj, "__name__", None)
            if key is None:
                raise ValueError(f"{self.kind}: cannot register an object without a name")
            if key in self._items and self._items[key] is not obj:
                raise ValueError(f"{self.kind} '{key}' is registered twice")
            self._items[key] = obj
            return obj

        return deco

    def get(self, name: str) -> Any:
        if name in self._items:
            return self._items[name]
        if ":" in name:
            module, _, attr = name.partition(":")
            try:
                obj = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as e:
                raise KeyError(f"{self.kind} '{name}' could not be imported: {e}") from e
            self._items[name] = obj
            return obj
        known = sorted(k for k in self._items if ":" not in k)
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise KeyError(f"unknown {self.kind} '{name}'; {hint}known: {', '.join(known)} (or give module:function)")

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def names(self) -> list[str]:
        return sorted(k for k in self._items if ":" not in k)
