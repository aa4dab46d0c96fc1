"""The resolved protocol: a benchmark YAML plus command-line overrides, checked against its hooks, as lines.

``load_protocol`` loads ``eval/<name>.yaml`` with the overrides the user gave (a flag overrides a field only
when given), finds its hooks, and rejects every key that would change nothing: a key the hooks do not read
(``BenchmarkHooks.fields``), a ``sampling`` key the frame rule does not read (``FrameRule.uses``), an
``aggregate`` the hooks do not implement. ``describe`` flattens every resolved value (defaults included) to
``key: value`` lines; ``mmrl eval <benchmark> --show-protocol`` prints them and every report records them.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from mmrl.errors import ConfigError
from mmrl.eval.benchmark_def import BenchmarkDef, TaskDef, load_benchmark
from mmrl.eval.frame_rules import FrameRule, frame_rule_info
from mmrl.eval.hooks import BenchmarkHooks, get_hooks
from mmrl.eval.parsers import PARSERS

ALWAYS = ("name", "hooks", "protocol", "description")
_TASK_DEFAULTS = TaskDef(name="")


def _honoured(key: str, fields: Tuple[str, ...]) -> bool:
    return any(key == f or key.startswith(f + ".") for f in fields)


def frame_rule(bdef: BenchmarkDef, hooks: BenchmarkHooks) -> Optional[FrameRule]:
    """The frame rule the runner applies (None when the hooks sample frames themselves)."""
    if not _honoured("sampling.rule", hooks.fields):
        return None
    try:
        return frame_rule_info(bdef.sampling.rule)
    except KeyError as e:
        raise ConfigError(f"{bdef.path}: key 'sampling.rule': {e.args[0]}") from None


def check_fields(bdef: BenchmarkDef, hooks: BenchmarkHooks) -> None:
    """Reject every given key the hooks, the frame rule or the aggregates would ignore; require what they need."""
    for key, name in [("parser", bdef.parser)] + [(f"tasks[{i}].parser", t.parser) for i, t in enumerate(bdef.tasks)]:
        if name is not None:
            try:
                PARSERS.get(name)
            except KeyError as e:
                raise ConfigError(f"{bdef.path}: key '{key}': {e.args[0]}") from None
    rule = frame_rule(bdef, hooks)
    if not bdef.tasks and any(f.startswith("tasks.") for f in hooks.fields):
        raise ConfigError(f"{bdef.path}: missing key 'tasks' (the '{hooks.name}' hooks run per task)")
    for key in bdef.given:
        base = re.sub(r"\[\d+\]", "", key)
        if base in ALWAYS or (base == "tasks.name" and any(f.startswith("tasks.") for f in hooks.fields)):
            continue
        if not _honoured(base, hooks.fields):
            raise ConfigError(f"{bdef.path}: key '{key}' is not used by the '{hooks.name}' hooks (it would change "
                              f"nothing); they read: {', '.join(hooks.fields)}")
        if rule is not None and base.startswith("sampling.") and base != "sampling.rule":
            if base.split(".")[1] not in rule.uses:
                raise ConfigError(f"{bdef.path}: key '{key}' is not read by frame rule '{bdef.sampling.rule}' "
                                  f"(it reads: {', '.join(rule.uses)})")
    if rule is not None:
        for name in rule.needs:
            if getattr(bdef.sampling, name) is None:
                raise ConfigError(f"{bdef.path}: missing key 'sampling.{name}' (frame rule '{bdef.sampling.rule}')")
    if hooks.aggregates:
        if bdef.aggregate not in hooks.aggregates:
            raise ConfigError(f"{bdef.path}: key 'aggregate' = {bdef.aggregate!r} is not one of "
                              f"{', '.join(hooks.aggregates)}")
    elif bdef.aggregate is not None:
        raise ConfigError(f"{bdef.path}: key 'aggregate' is not used by the '{hooks.name}' hooks")


def load_protocol(name_or_path: Union[str, Path], overrides: Optional[Mapping[str, Any]] = None,
                  search_dirs: Optional[List[Path]] = None) -> Tuple[BenchmarkDef, BenchmarkHooks]:
    """``(definition, hooks)`` of a benchmark with ``overrides`` (dotted key -> value) applied and checked."""
    bdef = load_benchmark(name_or_path, search_dirs, dict(overrides or {}))
    try:
        hooks = get_hooks(bdef.hooks)
    except KeyError as e:
        raise ConfigError(f"{bdef.path}: key 'hooks': {e.args[0]}") from None
    check_fields(bdef, hooks)
    return bdef, hooks


def _fmt(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value), ensure_ascii=False)
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _task_lines(tasks: List[TaskDef], fields: Tuple[str, ...]) -> Dict[str, str]:
    out = {"tasks": ", ".join(t.name for t in tasks)}
    for f in dataclasses.fields(TaskDef):
        if f.name == "name" or not _honoured(f"tasks.{f.name}", fields):
            continue
        default = getattr(_TASK_DEFAULTS, f.name)
        vals = [(t.name, getattr(t, f.name)) for t in tasks if getattr(t, f.name) != default]
        if vals:
            out[f"tasks.{f.name}"] = "; ".join(f"{n}={v if isinstance(v, str) else _fmt(v)}" for n, v in vals)
    return out


def describe(bdef: BenchmarkDef, hooks: BenchmarkHooks) -> Dict[str, str]:
    """Every resolved value the hooks read, flattened to ``key -> value`` (strings JSON-quoted)."""
    lines: Dict[str, str] = {"benchmark": bdef.name, "definition": str(bdef.path), "hooks": hooks.name,
                             "protocol": bdef.protocol, "description": bdef.description}
    for f in dataclasses.fields(BenchmarkDef):
        name, val = f.name, getattr(bdef, f.name)
        if name in ALWAYS or name in ("path", "given"):
            continue
        if not (_honoured(name, hooks.fields) or any(f.startswith(name + ".") for f in hooks.fields)):
            continue
        if name == "tasks":
            lines.update(_task_lines(val, hooks.fields))
        elif dataclasses.is_dataclass(val):
            for sub in dataclasses.fields(val):
                key, v = f"{name}.{sub.name}", getattr(val, sub.name)
                if not _honoured(key, hooks.fields):
                    continue
                if isinstance(v, dict):
                    lines.update({f"{key}.{k}": _fmt(x) for k, x in v.items()})
                else:
                    lines[key] = _fmt(v)
        else:
            lines[name] = _fmt(val)
    if not bdef.generation.do_sample:  # greedy: the sampling knobs do not apply
        for key in ("generation.temperature", "generation.top_p", "generation.seed"):
            lines.pop(key, None)
    if bdef.parser is None:
        lines.pop("parser", None)
    rule = frame_rule(bdef, hooks)
    if rule is not None:
        lines = {k: v for k, v in lines.items() if not (k.startswith("sampling.") and k != "sampling.rule"
                                                        and k.split(".")[1] not in rule.uses)}
        at = list(lines).index("sampling.rule") + 1 if "sampling.rule" in lines else len(lines)
        items = list(lines.items())
        lines = dict(items[:at] + [("sampling.rule.source", rule.source)] + items[at:])
    if hooks.describe is not None:
        lines.update({k: _fmt(v) if not isinstance(v, str) else v for k, v in hooks.describe(bdef).items()})
    return lines


def protocol_text(lines: Mapping[str, str]) -> str:
    """One ``key: value`` per line (``--show-protocol``)."""
    return "".join(f"{k}: {v}\n" for k, v in lines.items())
