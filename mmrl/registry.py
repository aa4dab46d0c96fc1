"""One small registry per extension point (algorithms, losses, rewards, view transforms, tools, benchmarks, ...).

Every registry is filled the same way: ``@REG.register("name", **meta)`` returns what it decorates unchanged and
records ``meta`` (a transform's effect, a tool's schema, a frame rule's source) beside it in the registry;
``REG.meta(name)`` reads it back. The domain decorators (``@view_transform``, ``@tool``, ``@frame_rule``,
``@register_algorithm``) are this call with their metadata checked.

Built-ins are loaded by one mechanism: a registry names the module of each built-in (``builtins={module: names}``)
and imports that module on the first lookup of one of its names (``names()`` lists them without importing).
A name is either registered or given as ``module:function`` (a dotted path to user code).
Unknown names raise a ``KeyError`` that lists the known ones.
"""
from __future__ import annotations

import difflib
import importlib
import inspect
from typing import Any, Callable, Dict, Iterator, Mapping, Sequence


def import_object(path: str, kind: str) -> Any:
    """The object at ``module:attr`` (user code named in a config); a ``KeyError`` naming ``kind`` when it fails."""
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        hint = (f"; put the folder holding '{top}' on the module path, e.g. `PYTHONPATH=. mmrl ...` from the folder "
                f"with {top}{'/' if '.' in module else '.py'}") if e.name and top == e.name.split(".")[0] else ""
        raise KeyError(f"{kind} '{path}' could not be imported: {e}{hint}") from e
    except (ImportError, AttributeError, ValueError) as e:
        raise KeyError(f"{kind} '{path}' could not be imported: {e}") from e


def signature_params(fn: Callable, skip: int, fmt: Callable[[Any], str] = repr) -> list[str]:
    """``name=default`` (``name`` when required, ``**kw`` as is) for ``fn``'s parameters after its first ``skip``
    positional ones: what a config's ``params`` may give (a view transform skips ``media, sample, rng``)."""
    out = []
    for p in list(inspect.signature(fn).parameters.values())[skip:]:
        if p.kind is p.VAR_KEYWORD:
            out.append(f"**{p.name}")
        elif p.kind is not p.VAR_POSITIONAL:
            out.append(p.name if p.default is p.empty else f"{p.name}={fmt(p.default)}")
    return out


class Registry:
    def __init__(self, kind: str, builtins: Mapping[str, Sequence[str]] | None = None):
        self.kind = kind
        self._items: Dict[str, Any] = {}
        self._meta: Dict[str, Dict[str, Any]] = {}
        self._builtin_module: Dict[str, str] = {n: mod for mod, names in (builtins or {}).items() for n in names}

    def register(self, name: str | None = None, **meta: Any) -> Callable[[Any], Any]:
        """Decorator: record ``obj`` under ``name`` (default ``obj.__name__``) with ``meta``; returns ``obj``."""
        def deco(obj: Any) -> Any:
            key = name or getattr(obj, "__name__", None)
            if key is None:
                raise ValueError(f"{self.kind}: cannot register an object without a name")
            if key in self._items and self._items[key] is not obj:
                raise ValueError(f"{self.kind} '{key}' is registered twice")
            self._items[key] = obj
            self._meta[key] = dict(meta)
            return obj

        return deco

    def _load(self, name: str) -> None:
        module = self._builtin_module.get(name)
        if module is not None and name not in self._items:
            importlib.import_module(module)
            if name not in self._items:
                raise KeyError(f"built-in {self.kind} '{name}': {module} does not register it")

    def get(self, name: str) -> Any:
        self._load(name)
        if name in self._items:
            return self._items[name]
        if ":" in name:
            obj = import_object(name, self.kind)
            self._items[name] = obj
            return obj
        known = self.names()
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise KeyError(f"unknown {self.kind} '{name}'; {hint}known: {', '.join(known)} (or give module:function)")

    def meta(self, name: str) -> Dict[str, Any]:
        """The metadata recorded with ``name``; for ``module:function``, that of the registered entry holding the
        same object ({} for an undecorated function)."""
        obj = self.get(name)
        if name in self._meta:
            return self._meta[name]
        return self._meta.get(self.name_of(obj) or name, {})

    def name_of(self, obj: Any) -> str | None:
        """The first name ``obj`` is registered under (a plain name before a ``module:function``), or None."""
        keys = [k for k, v in self._items.items() if v is obj]
        return min(keys, key=lambda k: (":" in k, k)) if keys else None

    def builtin_names(self) -> list[str]:
        """The names this registry ships with (loaded on first lookup)."""
        return sorted(self._builtin_module)

    def builtin_module(self, name: str) -> str | None:
        return self._builtin_module.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._items or name in self._builtin_module

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(set(self._items) | set(self._builtin_module)))

    def names(self) -> list[str]:
        return sorted(k for k in set(self._items) | set(self._builtin_module) if ":" not in k)
