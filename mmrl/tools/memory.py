"""``memory_recall(start, end)``: archived chunks of a streaming episode, for the streaming environment.

Returns up to ``MAX_CHUNKS`` = 4 chunks of the episode's ``StreamMemory`` that lie strictly before the current
chunk, overlap ``[start, end]`` seconds and were not recalled before (each chunk at most once per episode), the
latest first chosen, shown in time order as one video (their frames concatenated; each chunk has an even number
of frames, so the temporal patches of 2 frames never straddle two chunks).
"""
from __future__ import annotations

import torch

from mmrl.data.schema import Media
from mmrl.tools.episode import EpisodeState
from mmrl.tools.registry import ToolError, ToolOutput, tool

MAX_CHUNKS = 4

RECALL_SCHEMA = {
    "type": "object",
    "properties": {
        "start": {"type": "number", "minimum": 0, "maximum": 86400, "description": "seconds since the stream began"},
        "end": {"type": "number", "minimum": 0, "maximum": 86400, "description": "seconds"},
    },
    "required": ["start", "end"],
    "additionalProperties": False,
}


@tool("memory_recall", RECALL_SCHEMA, "Frames of up to 4 earlier chunks of the stream that overlap [start, end] seconds.")
def memory_recall(state: EpisodeState, start: float, end: float) -> ToolOutput:
    mem = state.memory
    if mem is None:
        raise ToolError("out_of_range", "this episode is not a stream: there is no memory to recall")
    if not start < end:
        raise ToolError("out_of_range", f"start ({start}) must be before end ({end})")
    fits = [i for i in range(min(mem.current, len(mem.chunks)))
            if i not in mem.recalled and mem.chunks[i][0] < end and mem.chunks[i][1] > start]
    if not fits:
        raise ToolError("out_of_range", f"no earlier chunk in [{start}, {end}] s that was not recalled already")
    chosen = sorted(fits[-MAX_CHUNKS:])
    medias = [mem.chunks[i][2] for i in chosen]
    if any(m.frames is None or m.frames.shape[0] % 2 for m in medias):
        raise ToolError("tool_failed", "archived chunks must hold an even number of video frames")
    mem.recalled.update(chosen)
    video = Media(sample_id=state.sample_id, frames=torch.cat([m.frames for m in medias]),
                  timestamps=[t for m in medias for t in m.timestamps], fps=medias[0].fps)
    spans = [[float(mem.chunks[i][0]), float(mem.chunks[i][1])] for i in chosen]
    return ToolOutput(text=f"{len(chosen)} earlier chunks: " + ", ".join(f"{a:.1f}-{b:.1f} s" for a, b in spans) + ".",
                      media=video, info={"chunks": chosen, "intervals": spans})
