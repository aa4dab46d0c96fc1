"""The tool registry: a tool is a function with a JSON schema for its arguments, run on the episode's own state.

    @tool("video_seek", schema={...}, description="...")
    def video_seek(state: EpisodeState, start: float, end: float, nframes: int | None = None) -> ToolOutput: ...

A suite (``tools/*.yaml``) names registered tools or gives ``module:function`` (a function decorated with
``@tool``, or a plain function with its ``schema`` in the YAML). A tool receives schema-validated arguments and
the ``EpisodeState`` (the episode's sample, its media and its budget) and nothing else: no file path comes from
the model. It raises ``ToolError(reason, message)`` for a call it refuses; the environment turns that into an
error observation and a counted reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

from mmrl.data.schema import Media
from mmrl.registry import Registry

TOOLS = Registry("tool", builtins={"mmrl.tools.builtin": ("video_seek", "zoom"), "mmrl.tools.memory": ("memory_recall",),
                                  "mmrl.tools.retrieve": ("visual_retrieve",)})


class ToolError(Exception):
    """A refused call: ``reason`` is the metric key (``tools/invalid/<reason>``), the message what the model sees."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class ToolOutput:
    text: str
    media: Optional[Media] = None  # frames (video) or one image returned to the model
    info: Dict[str, Any] = field(default_factory=dict)  # recorded in the call's turn (e.g. the seeked interval)


@dataclass
class ToolSpec:
    name: str
    fn: Callable[..., ToolOutput]
    schema: Dict[str, Any]
    description: str = ""

    def signature(self) -> Dict[str, Any]:
        """The function signature in the format Qwen2.5's chat template lists inside ``<tools></tools>``."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.schema}}


def tool(name: str, schema: Dict[str, Any], description: str = ""):
    """Register ``fn(state, **arguments) -> ToolOutput`` as tool ``name`` with a JSON schema for its arguments."""
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(schema)

    def deco(fn):
        return TOOLS.register(name, schema=schema, description=description)(fn)

    return deco


def resolve_tool(name: str, schema: Optional[Dict[str, Any]] = None, description: str = "") -> ToolSpec:
    """The ``ToolSpec`` of a registered tool or of ``module:function`` (a ``@tool`` function, or a plain function
    plus ``schema``); a ``schema`` / ``description`` given here (in the suite) replaces the registered one."""
    from jsonschema import Draft202012Validator

    obj = TOOLS.get(name)
    if not callable(obj):
        raise KeyError(f"tool '{name}' is neither a @tool nor a function")
    meta = TOOLS.meta(name)
    if schema is None and "schema" not in meta:
        raise KeyError(f"tool '{name}' is a plain function: give its argument 'schema' in the suite")
    if schema is not None:
        Draft202012Validator.check_schema(schema)
    doc = (obj.__doc__ or "").strip().split("\n")[0]
    return ToolSpec((TOOLS.name_of(obj) or name).rsplit(":", 1)[-1], obj, schema if schema is not None else meta["schema"],
                    description or meta.get("description") or doc)
