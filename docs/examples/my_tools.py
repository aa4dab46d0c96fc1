"""A custom tool (docs/reference/tools.md): the length and frame count of the clip the prompt showed."""
from mmrl.tools import ToolError, ToolOutput, tool


@tool("clip_info", schema={"type": "object", "properties": {}, "additionalProperties": False},
      description="The duration in seconds and the number of frames of the clip you were shown.")
def clip_info(state) -> ToolOutput:
    media = state.media
    if media is None or media.frames is None:
        raise ToolError("out_of_range", "this episode shows no video")
    ts = media.timestamps or []
    span = (ts[-1] - ts[0]) if len(ts) > 1 else 0.0
    return ToolOutput(text=f"{media.frames.shape[0]} frames over {span:.2f} s")
