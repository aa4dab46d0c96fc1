"""A scripted ``video_seek`` on an evidence segment ``[t0, t1)`` (seconds), as the seek world's teacher and
``mmrl rectify`` write it.

- ``exact``: the segment's own seconds and ``nframes`` frames: ``{"start": 13.25, "end": 13.75, "nframes": 4}``.
- ``whole``: a window of whole seconds from ``floor(t0)``, ``width`` seconds long or up to ``ceil(t1)`` if the
  segment is longer: ``{"start": 13, "end": 15}``; the tool returns up to its suite's ``max_frames`` frames (all 8
  of 2 s at 4 fps). Two small integers are far easier for a small model to write than float seconds.
"""
from __future__ import annotations

import json
import math
from typing import Dict

SEEK_STYLES = ("exact", "whole")


def seek_arguments(t0: float, t1: float, style: str = "exact", width: int = 2, nframes: int = 4) -> Dict:
    """``video_seek``'s arguments covering ``[t0, t1)`` in ``style`` (``SEEK_STYLES``)."""
    if style == "exact":
        return {"start": round(t0, 6), "end": round(t1, 6), "nframes": nframes}
    if style == "whole":
        if width < 1:
            raise ValueError(f"a whole-second seek window must be >= 1 s wide, got {width}")
        start = math.floor(t0 + 1e-9)
        return {"start": start, "end": max(start + width, math.ceil(t1 - 1e-9))}
    raise ValueError(f"seek style must be one of {', '.join(SEEK_STYLES)}, got {style!r}")


def seek_call(t0: float, t1: float, style: str = "exact", width: int = 2, nframes: int = 4) -> str:
    """The model turn ``<tool_call>{"name": "video_seek", "arguments": ...}</tool_call>``."""
    call = {"name": "video_seek", "arguments": seek_arguments(t0, t1, style, width, nframes)}
    return f"<tool_call>{json.dumps(call)}</tool_call>"
