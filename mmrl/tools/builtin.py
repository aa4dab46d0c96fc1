"""Built-in tools: ``video_seek`` (frames of the episode's own video in an interval) and ``zoom`` (a crop of one
frame or of the image at a higher resolution). Both read only the episode's sample: its ``VideoRef``/``ImageRef``
come from the dataset; the model gives numbers, checked by the schema and here against the video's duration."""
from __future__ import annotations

import math
from typing import List, Optional

import numpy as np
import torch

from mmrl.data.schema import Media, VideoRef
from mmrl.media.decode import _resize, decode_indices, probe
from mmrl.media.sampling import qwen_indices
from mmrl.tools.episode import EpisodeState
from mmrl.tools.registry import ToolError, ToolOutput, tool

_SECONDS = {"type": "number", "minimum": 0, "maximum": 86400}

SEEK_SCHEMA = {
    "type": "object",
    "properties": {
        "start": {**_SECONDS, "description": "start of the interval, seconds from the start of the video"},
        "end": {**_SECONDS, "description": "end of the interval, seconds"},
        "nframes": {"type": "integer", "minimum": 2, "maximum": 256, "description": "frames to return"},
        "fps": {"type": "number", "exclusiveMinimum": 0, "maximum": 60, "description": "or frames per second"},
    },
    "required": ["start", "end"],
    "additionalProperties": False,
    "not": {"required": ["nframes", "fps"]},
}

ZOOM_SCHEMA = {
    "type": "object",
    "properties": {
        "time": {**_SECONDS, "description": "for a video: the time of the frame to zoom into, seconds"},
        "box": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}, "minItems": 4, "maxItems": 4,
                "description": "[x0, y0, x1, y1] as fractions of the frame's width and height"},
    },
    "required": ["box"],
    "additionalProperties": False,
}


def _video(state: EpisodeState) -> VideoRef:
    if state.sample is None or state.sample.video is None:
        raise ToolError("out_of_range", "this episode has no video")
    return state.sample.video


def _source(ref: VideoRef, sample_id: str):
    """The file (``VideoInfo``: frame count, rate) and the clip's ``[offset, duration]`` in seconds."""
    info = probe(ref.path, sample_id, ref.frame_fps)
    offset = max(0.0, ref.start or 0.0)
    end = info.duration if ref.end is None else min(ref.end, info.duration)
    return info, offset, max(0.0, end - offset)


def _check_interval(start: float, end: float, duration: float) -> None:
    if not start < end:
        raise ToolError("out_of_range", f"start ({start}) must be before end ({end})")
    if start >= duration:
        raise ToolError("out_of_range", f"the video is {duration:.2f} s long; start {start} is past its end")


@tool("video_seek", SEEK_SCHEMA, "Frames of the video that cover [start, end) seconds (nframes frames, or at fps).")
def video_seek(state: EpisodeState, start: float, end: float, nframes: Optional[int] = None,
               fps: Optional[float] = None) -> ToolOutput:
    ref = _video(state)
    info, offset, duration = _source(ref, state.sample_id)
    _check_interval(start, end, duration)
    end = min(end, duration)
    b = state.budget
    if nframes is None and fps is None:
        nframes = b.max_frames
    if nframes is not None and nframes > b.max_frames:
        raise ToolError("over_budget", f"at most {b.max_frames} frames per call; {nframes} were asked")
    if fps is not None:  # the frame count the rate gives, capped by the budget (an even count, as Qwen samples)
        nframes = min(b.max_frames, max(2, 2 * round(fps * (end - start) / 2)))
    # the frames that cover [start, end): frame i covers [i / fps, (i + 1) / fps) of the file
    first = math.floor((offset + start) * info.fps + 1e-9)
    last = min(math.ceil((offset + end) * info.fps - 1e-9) - 1, info.num_frames - 1)
    available = last - first + 1
    nframes = min(nframes, available - available % 2) if available >= 2 else 0
    if nframes < 2:
        raise ToolError("out_of_range", f"[{start}, {end}] s covers fewer than 2 frames at {info.fps:.2f} fps")
    media = decode_indices(info, qwen_indices(first, last, nframes), state.sample_id, max_pixels=b.frame_max_pixels,
                           min_pixels=b.frame_min_pixels, factor=b.factor)
    media.timestamps = [t - offset for t in media.timestamps]
    times = media.timestamps
    return ToolOutput(text=f"{len(times)} frames from {times[0]:.2f} s to {times[-1]:.2f} s.", media=media,
                      info={"interval": [float(start), float(end)], "frames": len(times)})


SOURCE_PIXELS = 1 << 40  # "no pixel cap": the source frame, its sides only rounded to multiples of 28


def _source_frame(ref: VideoRef, t: float, sample_id: str) -> torch.Tensor:
    """The frame covering clip time ``t`` at (about) the file's own resolution, ``uint8 [C, H, W]``."""
    info, offset, _ = _source(ref, sample_id)
    idx = min(info.num_frames - 1, max(0, math.floor((offset + t) * info.fps + 1e-9)))
    return decode_indices(info, [idx], sample_id, max_pixels=SOURCE_PIXELS).frames[0]


def _source_image(state: EpisodeState) -> torch.Tensor:
    from PIL import Image

    with Image.open(state.sample.image.path) as im:
        return torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1)


@tool("zoom", ZOOM_SCHEMA, "A crop of the image, or of the video frame at `time`, at a higher resolution.")
def zoom(state: EpisodeState, box: List[float], time: Optional[float] = None) -> ToolOutput:
    x0, y0, x1, y1 = box
    if not (x0 < x1 and y0 < y1):
        raise ToolError("out_of_range", f"box {box}: need x0 < x1 and y0 < y1")
    sample = state.sample
    if sample is not None and sample.video is not None:
        if time is None:
            raise ToolError("invalid_arguments", "zoom: a video needs 'time'")
        duration = _source(sample.video, state.sample_id)[2]
        if time >= duration:
            raise ToolError("out_of_range", f"the video is {duration:.2f} s long; time {time} is past its end")
        frame = _source_frame(sample.video, time, state.sample_id)
    elif sample is not None and sample.image is not None:
        frame = _source_image(state)
    else:
        raise ToolError("out_of_range", "this episode has no video or image")
    h, w = frame.shape[-2:]
    crop = frame[:, int(y0 * h): max(int(y0 * h) + 1, math.ceil(y1 * h)), int(x0 * w): max(int(x0 * w) + 1, math.ceil(x1 * w))]
    b = state.budget
    image = _resize(crop.unsqueeze(0), b.frame_min_pixels, b.frame_max_pixels, b.factor)[0]
    return ToolOutput(text=f"Zoomed into {[round(v, 3) for v in box]}" + (f" at {time:.2f} s." if time is not None else "."),
                      media=Media(sample_id=state.sample_id, image=image),
                      info={"box": [float(v) for v in box], **({"time": float(time)} if time is not None else {})})
