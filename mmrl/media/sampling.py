"""Which frames of a video a model sees, and how many pixels each may keep: every index rule in one place.

The training loader (``mmrl.media.decode.decode_video``) and every benchmark protocol (``mmrl.eval.frame_rules``)
choose frames here; ``mmrl.media.decode.decode_indices`` then decodes exactly those indices. Indices are 0-based
positions in the video (or in the sorted frame files of a folder); MVBench's ``get_index`` takes ``first_idx=1``
for its ``%05d.jpg`` folders numbered from 1. Sources, per function:

- ``get_index``: OpenGVLab/Ask-Anything ``video_chat2/mvbench.ipynb`` (``MVBench_dataset.get_index``).
- ``frame_range``, ``qwen_indices``, ``qwen_video_max_pixels``: qwen-vl-utils ``vision_process.py``
  (``calculate_video_frame_range``, ``smart_nframes`` + ``_read_video_decord``'s ``linspace(...).round()``,
  ``fetch_video``'s per-frame pixel cap), called or mirrored with the installed package's own constants.
- ``lmms_subsample``: lmms-eval ``lmms_eval/models/simple/qwen2_5_vl.py`` (``generate_until``: ``np.linspace(0,
  total_frames - 1, max_num_frames, dtype=int)``, ``np.unique``, the last frame appended if missing).
- ``prefix_last``: JoeLeelyf/OVO-Bench ``utils/chunk_videos.py`` (moviepy ``subclip(0, ceil(realtime))`` capped at
  the duration: a chunk holds the frames with timestamp ``< end``).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from qwen_vl_utils import vision_process as qvp

from mmrl.media.frame_budget import frame_range  # torch-free: the data pre-flight applies it too


def get_index(num_frames: int, fps: float, bound: Optional[Tuple[float, float]], first_idx: int = 0,
              num_segments: int = 16) -> List[int]:
    """Segment-midpoint frame indices of the MVBench notebook's ``get_index``.

    ``max_frame = num_frames - 1 + first_idx`` (``len(vr) - 1`` for a video, the file count for a folder numbered
    from 1). With a bound ``(start, end)`` in seconds: ``start_idx = max(first_idx, round(start*fps))``,
    ``end_idx = min(round(end*fps), max_frame)``; without, the whole range. Then ``seg = (end_idx - start_idx)/N``
    and ``idx_i = int(start_idx + seg/2 + round(seg*i))`` (``round`` half-to-even, as ``np.round``).
    """
    max_frame = num_frames - 1 + first_idx
    start, end = bound if bound else (-100000, 100000)
    start_idx = max(first_idx, round(start * fps))
    end_idx = min(round(end * fps), max_frame)
    seg_size = float(end_idx - start_idx) / num_segments
    return [int(start_idx + (seg_size / 2) + np.round(seg_size * i)) for i in range(num_segments)]


def qwen_nframes(count: int, fps: float, nframes: Optional[int] = None, sample_fps: Optional[float] = None,
                 min_frames: Optional[int] = None, max_frames: Optional[int] = None) -> int:
    """qwen-vl-utils ``smart_nframes`` over ``count`` frames: ``nframes`` rounded to a multiple of 2, or
    ``count / fps * sample_fps`` clamped to ``[min_frames, max_frames]`` and floored to a multiple of 2."""
    ele: Dict[str, Any] = {}
    if nframes is not None:
        ele["nframes"] = nframes
    else:
        ele["fps"] = sample_fps if sample_fps is not None else qvp.FPS
        if min_frames is not None:
            ele["min_frames"] = min_frames
        if max_frames is not None:
            ele["max_frames"] = max_frames
    return int(qvp.smart_nframes(ele, total_frames=count, video_fps=fps))


def qwen_indices(first: int, last: int, n: int) -> List[int]:
    """``torch.linspace(first, last, n).round()``: qwen-vl-utils ``_read_video_decord`` over a frame range."""
    return torch.linspace(first, last, n).round().long().tolist()


def lmms_subsample(n: int, max_num_frames: int) -> List[int]:
    """Positions kept by lmms-eval's Qwen2.5-VL wrapper among ``n`` decoded frames: ``linspace(0, n-1,
    max_num_frames, dtype=int)``, unique, plus ``n - 1`` if missing (so at most ``max_num_frames`` + 1)."""
    pos = np.unique(np.linspace(0, n - 1, max_num_frames, dtype=int))
    if n - 1 not in pos:
        pos = np.unique(np.append(pos, n - 1))
    return [int(p) for p in pos]


def prefix_last(total: int, fps: float, end: Optional[float]) -> int:
    """Last frame of the prefix ``[0, end)`` (moviepy ``subclip(0, end)``: frames with ``t < end``), capped at
    the video; ``end=None`` is the whole video. Raises ``ValueError`` when the prefix holds no frame."""
    if end is None:
        return total - 1
    last = min(total - 1, math.ceil(end * fps - 1e-9) - 1)
    if last < 0:
        raise ValueError(f"prefix [0, {end}) s holds no frame")
    return last


def qwen_video_max_pixels(nframes: int, min_pixels: Optional[int] = None, max_pixels: Optional[int] = None,
                          factor: int = 28) -> Tuple[int, int]:
    """``(min_pixels, max_pixels)`` per frame as qwen-vl-utils ``fetch_video`` resolves them for ``nframes``.

    ``min = ele.min_pixels or VIDEO_MIN_TOKEN_NUM * factor**2``; cap ``= max(min(VIDEO_MAX_TOKEN_NUM * factor**2,
    total_pixels / nframes * FRAME_FACTOR), int(min * 1.05))`` with ``total_pixels = MODEL_SEQ_LEN * factor**2 *
    0.9``; ``max = min(ele.max_pixels, cap)``. (0.0.14: min 100,352, cap 602,112 up to 300 frames.)
    """
    lo = min_pixels if min_pixels is not None else qvp.VIDEO_MIN_TOKEN_NUM * factor * factor
    total_pixels = qvp.MODEL_SEQ_LEN * factor * factor * 0.9
    cap = max(min(qvp.VIDEO_MAX_TOKEN_NUM * factor * factor, total_pixels / nframes * qvp.FRAME_FACTOR),
              int(lo * 1.05))
    hi = cap if max_pixels is None else min(max_pixels, cap)
    return int(lo), int(hi)


__all__ = ["get_index", "frame_range", "qwen_nframes", "qwen_indices", "lmms_subsample", "prefix_last",
           "qwen_video_max_pixels"]
