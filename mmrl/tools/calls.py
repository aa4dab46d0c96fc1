"""Tool calls in Qwen2.5's function-calling format, checked before anything runs.

The model writes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the format of Qwen2.5's chat
template). ``run_call`` takes the model's turn and returns ``None`` when it holds no call (the model answered),
else a ``CallRecord`` with the tool's output or the reason it was refused. Every bad input is a reason, never an
exception: ``too_long`` (body over ``max_call_chars``), ``malformed_json``, ``non_finite`` (NaN or ±Infinity,
also from overflowing literals such as ``1e999``), ``malformed_call`` (not ``{"name", "arguments": {...}}``),
``unknown_tool``, ``over_budget`` (calls or media tokens spent), ``invalid_arguments`` (the tool's JSON schema:
wrong types, missing or extra keys such as a path, numbers out of the schema's bounds), ``out_of_range`` (the
tool's own check, e.g. an interval outside the video), ``tool_failed`` (the tool raised; the message names it) and
``bad_media`` (a tool returned media the processor cannot take as is: see ``check_media``).
"""
from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

import torch

from mmrl.tools.episode import EpisodeState, media_tokens
from mmrl.tools.registry import ToolError, ToolOutput, ToolSpec

REASONS = ("too_long", "malformed_json", "non_finite", "malformed_call", "unknown_tool", "over_budget",
           "invalid_arguments", "out_of_range", "tool_failed", "bad_media")
CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


@dataclass
class CallRecord:
    name: str
    arguments: Any
    valid: bool
    reason: str = ""  # why it was refused (empty when valid)
    message: str = ""
    output: Optional[ToolOutput] = None
    latency_s: float = 0.0
    media_tokens: int = 0
    ignored_calls: int = 0  # further <tool_call> blocks in the same turn (one call per turn runs)

    def info(self) -> Dict[str, Any]:
        out = {"tool": self.name, "arguments": self.arguments, "valid": self.valid, "latency_s": self.latency_s,
               "call_media_tokens": self.media_tokens}
        if not self.valid:
            out.update(reason=self.reason, error=self.message)
        if self.ignored_calls:
            out["ignored_calls"] = self.ignored_calls
        if self.output is not None:
            out.update(self.output.info)
        return out


def _reject_constant(name: str):
    raise ToolError("non_finite", f"{name} is not a number JSON allows")


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def parse_call(body: str, max_chars: int) -> Dict[str, Any]:
    """``{"name": str, "arguments": dict}`` from a ``<tool_call>`` body, or ``ToolError``."""
    body = body.strip()
    if len(body) > max_chars:
        raise ToolError("too_long", f"the call has {len(body)} characters; at most {max_chars} are accepted")
    try:
        call = json.loads(body, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ToolError("malformed_json", f"the call is not valid JSON ({e.msg} at character {e.pos})") from None
    if not _finite(call):
        raise ToolError("non_finite", "the call holds a number that is not finite")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not isinstance(call.get("arguments", {}), dict):
        raise ToolError("malformed_call", 'a call is {"name": <tool name>, "arguments": {...}}')
    return {"name": call["name"], "arguments": call.get("arguments", {})}


def check_media(media, budget) -> None:
    """Media a tool returns must be what the processor takes without resizing: uint8, 3 channels, sides multiples
    of the model's resize factor (``budget.factor``: 28, or 32 for Qwen3-VL) within ``frame_max_pixels``, and for
    video an even number (>= 2) of frames with one timestamp each."""
    f = budget.factor
    x = media.frames if media.is_video else media.image
    if x is None:
        raise ToolError("bad_media", "the tool returned a Media without frames or image")
    shape = tuple(x.shape)
    if x.dtype != torch.uint8 or len(shape) != (4 if media.is_video else 3) or shape[-3] != 3:
        raise ToolError("bad_media", f"media must be uint8 [T, 3, H, W] or [3, H, W]; got {x.dtype} {list(shape)}")
    h, w = shape[-2:]
    if h % f or w % f or h * w > budget.frame_max_pixels:
        raise ToolError("bad_media", f"frames of {h}x{w}: sides must be multiples of {f} within "
                                     f"{budget.frame_max_pixels} pixels")
    if media.is_video and (shape[0] < 2 or shape[0] % 2 or len(media.timestamps or []) != shape[0]):
        raise ToolError("bad_media", f"a video needs an even number (>= 2) of frames with a timestamp each; got "
                                     f"{shape[0]} frames, {len(media.timestamps or [])} timestamps")


def run_call(text: str, tools: Mapping[str, ToolSpec], state: EpisodeState) -> Optional[CallRecord]:
    """Parse, check and run the first tool call in ``text`` on ``state``; ``None`` if ``text`` holds no call."""
    from jsonschema import Draft202012Validator

    bodies = CALL_RE.findall(text)
    if not bodies:
        return None
    rec = CallRecord(name="?", arguments=None, valid=False, ignored_calls=len(bodies) - 1)
    state.calls += 1
    t0 = time.perf_counter()
    try:
        call = parse_call(bodies[0], state.budget.max_call_chars)
        rec.name, rec.arguments = call["name"], call["arguments"]
        if rec.name not in tools:
            raise ToolError("unknown_tool", f"no tool '{rec.name[:64]}'; tools: {', '.join(sorted(tools))}")
        if state.calls > state.budget.max_calls:
            raise ToolError("over_budget", f"the episode's {state.budget.max_calls} tool calls are spent")
        spec = tools[rec.name]
        err = next(iter(sorted(Draft202012Validator(spec.schema).iter_errors(rec.arguments), key=str)), None)
        if err is not None:
            where = "/".join(str(p) for p in err.absolute_path) or "arguments"
            raise ToolError("invalid_arguments", f"{rec.name}: {where}: {err.message[:200]}")
        out = spec.fn(state, **rec.arguments)
        if not isinstance(out, ToolOutput):
            raise ToolError("tool_failed", f"{rec.name} returned {type(out).__name__}, not a ToolOutput")
        if out.media is not None:
            check_media(out.media, state.budget)
        used = media_tokens(out.media, state.budget.factor) if out.media is not None else 0
        if state.media_tokens_used + used > state.budget.max_media_tokens:
            left = state.budget.max_media_tokens - state.media_tokens_used
            raise ToolError("over_budget", f"the result has {used} visual tokens; {left} of the episode's media "
                                           f"budget are left")
        state.media_tokens_used += used
        rec.valid, rec.output, rec.media_tokens = True, out, used
    except ToolError as e:
        rec.reason, rec.message = e.reason, str(e)
    except Exception as e:  # a tool bug or an undecodable file: the episode goes on, the metric counts it
        rec.reason, rec.message = "tool_failed", f"{rec.name} failed: {type(e).__name__}: {str(e)[:200]}"
    rec.latency_s = time.perf_counter() - t0
    return rec
