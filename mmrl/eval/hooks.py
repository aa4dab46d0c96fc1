"""The benchmark registry: a benchmark is a YAML (``eval/<name>.yaml``) plus one Python file of hooks.

The YAML's ``hooks`` key names a ``BenchmarkHooks`` registered with ``register_benchmark`` (``BENCHMARKS`` names the
module of each built-in, ``mmrl/eval/benchmarks/<name>/hooks.py``, and imports it on first lookup) or a module path ``pkg.module`` /
``pkg.module:ATTR`` of user code that registers or holds one. The generic runner (``mmrl.eval.runner``) calls:

1. ``load(bdef, inputs, tasks, limit)`` -> ``(items, notes)``: items of the hooks' own type (each has a
   ``task``), notes for the report (e.g. tasks without annotations);
2. ``queries(items, bdef, inputs, notes)`` -> ``EvalQuery`` list (prompt, gold, parser, ``meta`` for the frame
   rule); the runner generates them through ``mmrl.eval.driver`` with the frames of ``sampling.rule``; or,
   instead, ``evaluate(items, bdef, inputs, processor, engine, out_dir, notes)`` -> ``(records, stats)`` (a
   benchmark that drives the engine itself, e.g. the synthetic one with counterfactual view sets);
3. ``score(records, items, bdef, out_dir, notes)`` -> scores; ``table(scores)`` -> markdown; ``line(scores)``.

``fields`` lists the YAML keys (dotted, or a section prefix such as ``"prompt"``) the hooks honour; any other key
given in the YAML or on the command line is rejected when the benchmark loads (``mmrl.eval.protocol``).
``inputs`` names the command-line inputs the benchmark needs (``data_root``, ``anno``, ``video_root``, ``data``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from mmrl.registry import Registry

BENCHMARKS = Registry("benchmark hooks", builtins={f"mmrl.eval.benchmarks.{n}.hooks": (n,)
                                                   for n in ("emotion", "mvbench", "ovobench", "synthetic")})


@dataclass
class EvalInputs:
    """What the command line points at (each benchmark reads the ones it names in ``BenchmarkHooks.inputs``)."""

    data_root: Optional[str] = None  # MVBench root (json/ + video/, or test.json); OVO-Bench data folder
    video_root: Optional[str] = None  # overrides <data_root>/<data.video_dir>
    anno: Optional[str] = None  # OVO-Bench: overrides <data_root>/<data.annotations>
    data: Optional[str] = None  # synthetic: annotation file
    viewset: Optional[str] = None  # synthetic: a view set YAML (per-view metrics)


@dataclass(frozen=True)
class BenchmarkHooks:
    name: str
    fields: Tuple[str, ...]
    load: Callable[..., List[Any]]
    score: Callable[..., Dict[str, Any]]
    table: Callable[[Dict[str, Any]], str]
    queries: Optional[Callable[..., List[Any]]] = None
    evaluate: Optional[Callable[..., List[Dict[str, Any]]]] = None
    line: Optional[Callable[[Dict[str, Any]], str]] = None
    inputs: Tuple[str, ...] = ()
    aggregates: Tuple[str, ...] = ()  # allowed values of the YAML's ``aggregate`` (none: the key is rejected)
    describe: Optional[Callable[..., Dict[str, Any]]] = None  # extra resolved-protocol lines (derived values)
    score_only: Optional[Callable[..., Dict[str, Any]]] = None  # score existing result files (OVO --score-only)

    def __post_init__(self) -> None:
        if (self.queries is None) == (self.evaluate is None):
            raise ValueError(f"benchmark hooks '{self.name}': give exactly one of queries= or evaluate=")


def register_benchmark(hooks: BenchmarkHooks) -> BenchmarkHooks:
    """Register ``hooks`` under ``hooks.name`` (the value of a YAML's ``hooks`` key)."""
    BENCHMARKS.register(hooks.name)(hooks)
    return hooks


def get_hooks(name: str) -> BenchmarkHooks:
    """The hooks named ``name``: registered (built-ins are imported on first lookup), or a module path."""
    if name in BENCHMARKS:
        return BENCHMARKS.get(name)
    module, _, attr = name.partition(":")
    if "." in module:
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
        else:
            if attr:
                obj = getattr(loaded, attr, None)
                if not isinstance(obj, BenchmarkHooks):
                    raise KeyError(f"benchmark hooks '{name}': {module} has no BenchmarkHooks '{attr}'")
                return obj
            found = [v for v in vars(loaded).values() if isinstance(v, BenchmarkHooks)]
            if len(found) == 1:
                return found[0]
    known = ", ".join(BENCHMARKS.names())
    raise KeyError(f"unknown benchmark hooks '{name}'; known: {known} (or give a module path)")
