"""The frame rule of a training clip, without torch: which frames of the clip lie in its time range, and whether the
run's frame request fits them. ``check_frames`` is the one function training's decoder (``mmrl.media.decode``) and
the data pre-flight (``mmrl.train.preflight``) both call, so the pre-flight refuses exactly the clips a run would.

- ``frame_range``: qwen-vl-utils ``vision_process.calculate_video_frame_range`` (mirrored here so that it needs no
  torch; tests/eval/test_eval_frames.py compares the two): ``first = ceil(clamp(start) * fps)``,
  ``last = min(floor(clamp(end) * fps), total - 1)``, times clamped to ``[0, total / fps]``; a bounded range must
  hold ``first < last``.
- the request: the reference's own ``nframes``; else none when it sets ``fps`` (frames follow the rate); else
  ``data.nframes``. More frames requested than the range holds, or fewer than 2 frames in range or requested
  (Qwen2-VL samples frames in pairs), is a ``DataError`` naming the sample and the file.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

from mmrl.errors import DataError

FOLDER_FPS = 3.0  # a frame folder's rate when its reference gives none (VideoRef.frame_fps)


def frame_range(total: int, fps: float, start: Optional[float] = None, end: Optional[float] = None
                ) -> Tuple[int, int]:
    """``(first, last)`` frame of the time range ``[start, end]`` s (module doc); ``ValueError`` when it holds none."""
    msg = f"time range [{start}, {end}] s selects no frame ({total} frames at {fps:.3f} fps)"
    if fps <= 0 or total <= 0:
        raise ValueError(msg)
    if start is None and end is None:
        return 0, total - 1
    duration = total / fps
    first = math.ceil(max(0.0, min(start, duration)) * fps) if start is not None else 0
    last = min(math.floor(max(0.0, min(end, duration)) * fps), total - 1) if end is not None else total - 1
    if first >= last:  # qwen-vl-utils refuses a range of one frame too
        raise ValueError(msg)
    return int(first), int(last)


def requested_frames(ref, default_nframes: Optional[int]) -> Optional[int]:
    """Frames the run asks of clip ``ref``: its own ``nframes``, None when it sets ``fps``, else ``data.nframes``."""
    if ref.nframes is not None:
        return ref.nframes
    return None if ref.fps is not None else default_nframes


def check_frames(ref, default_nframes: Optional[int], total: int, fps: float, sample_id: str
                 ) -> Tuple[int, int, Optional[int]]:
    """``(first, last, frames requested)`` of clip ``ref`` holding ``total`` frames at ``fps``; ``DataError`` when
    the range selects no frame, holds fewer frames than requested, or fewer than 2 are in range or requested."""
    try:
        first, last = frame_range(total, fps, ref.start, ref.end)
    except ValueError as e:
        raise DataError(str(e), sample_id=sample_id, path=ref.path) from None
    available = last - first + 1
    nframes = requested_frames(ref, default_nframes)
    if nframes is not None and nframes > available:
        raise DataError(f"clip has {available} frames in range but {nframes} were requested", sample_id=sample_id,
                        path=ref.path)
    if available < 2 or (nframes is not None and nframes < 2):
        what = f"{nframes} frame(s) requested" if available >= 2 else f"clip has {available} frame(s) in range"
        raise DataError(f"{what}; Qwen2-VL samples frames in pairs, so at least 2 are needed", sample_id=sample_id,
                        path=ref.path)
    return first, last, nframes
