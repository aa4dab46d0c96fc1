"""Decode benchmark frames by EXACT index (MVBench ``get_index``) or as a uniform sample of a time prefix (OVO).

``mmrl.media.decode.decode_video`` picks frames itself (linspace over ``nframes``); benchmarks fix the indices,
so this module probes a video (``probe``: frame count and rate), lets the protocol choose indices, then decodes
exactly those (``decode_indices``) with decord (MP4) or PIL (JPEG folders ``%05d.jpg`` numbered from 1) and
resizes with ``mmrl.media.decode._resize`` (Qwen's ``smart_resize`` within ``max_pixels``). Failures are
``DataError``s naming the query and the file.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np
import torch

from mmrl.data.schema import Media
from mmrl.errors import DataError
from mmrl.media.decode import _resize

MIN_PIXELS = 28 * 28


@dataclass
class VideoInfo:
    """What index selection needs: frame count, rate, and whether it is a JPEG folder (indices from 1)."""

    path: str
    num_frames: int
    fps: float
    is_folder: bool = False

    @property
    def first_idx(self) -> int:
        return 1 if self.is_folder else 0

    @property
    def duration(self) -> float:
        return self.num_frames / self.fps


def _open_mp4(path: str, sample_id: str):
    import decord

    try:
        return decord.VideoReader(path, num_threads=1)
    except Exception as e:  # decord raises DECORDError / RuntimeError
        msg = str(e).splitlines()[0][:200] if str(e) else ""
        raise DataError(f"unreadable video ({type(e).__name__}: {msg})", sample_id=sample_id, path=path) from None


def _folder_count(path: str) -> int:
    return sum(1 for f in os.listdir(path) if f.lower().endswith((".jpg", ".jpeg")))


def probe(path: str, sample_id: str, frame_fps: Optional[float] = None) -> VideoInfo:
    """Frame count and rate of an MP4 (decord) or a JPEG folder (its ``frame_fps``, default 3)."""
    if not os.path.exists(path):
        raise DataError("video not found", sample_id=sample_id, path=path)
    if os.path.isdir(path):
        n = _folder_count(path)
        if n == 0:
            raise DataError("frame folder holds no JPEG frames", sample_id=sample_id, path=path)
        return VideoInfo(path, n, float(frame_fps or 3.0), is_folder=True)
    vr = _open_mp4(path, sample_id)
    n = len(vr)
    if n == 0:
        raise DataError("video has zero frames", sample_id=sample_id, path=path)
    return VideoInfo(path, n, float(vr.get_avg_fps()) or 1.0)


def _read(info: VideoInfo, indices: Sequence[int], sample_id: str) -> np.ndarray:
    if info.is_folder:
        from PIL import Image

        arrays = []
        for i in indices:
            f = os.path.join(info.path, f"{i:05d}.jpg")
            try:
                with Image.open(f) as im:
                    arrays.append(np.asarray(im.convert("RGB")))
            except (OSError, ValueError) as e:
                raise DataError(f"unreadable frame {i:05d}.jpg ({type(e).__name__})", sample_id=sample_id,
                                path=info.path) from None
        return np.stack(arrays)
    bad = [i for i in indices if not 0 <= i < info.num_frames]
    if bad:
        raise DataError(f"frame indices {bad[:4]} outside [0, {info.num_frames})", sample_id=sample_id, path=info.path)
    vr = _open_mp4(info.path, sample_id)
    try:
        return vr.get_batch(list(indices)).asnumpy()
    except Exception as e:  # noqa: BLE001 - decord's error types vary
        raise DataError(f"failed to decode frames {list(indices)[:4]}... ({type(e).__name__})", sample_id=sample_id,
                        path=info.path) from None


def decode_indices(info: VideoInfo, indices: Sequence[int], sample_id: str, max_pixels: int,
                   min_pixels: int = MIN_PIXELS) -> Media:
    """Exactly the frames ``indices`` (JPEG folders: file numbers from 1), resized within ``max_pixels``.

    Timestamps are ``(i - first_idx) / fps``; ``Media.fps`` is the sampled rate (for M-RoPE time ids).
    """
    if not indices:
        raise DataError("no frame indices to decode", sample_id=sample_id, path=info.path)
    arr = _read(info, indices, sample_id)
    frames = torch.from_numpy(np.ascontiguousarray(arr)).permute(0, 3, 1, 2)
    source_size = (int(frames.shape[-1]), int(frames.shape[-2]))
    frames = _resize(frames, min_pixels, max_pixels)
    ts = [(i - info.first_idx) / info.fps for i in indices]
    span = ts[-1] - ts[0]
    fps = (len(ts) - 1) / span if len(ts) > 1 and span > 0 else info.fps
    return Media(sample_id=sample_id, frames=frames, timestamps=ts, source_size=source_size, fps=fps)


def even_count(n: int) -> int:
    """Frame counts are multiples of 2 (Qwen's temporal patch; qwen-vl-utils ``FRAME_FACTOR``), at least 2."""
    return max(2, n - n % 2)


def uniform_indices(first: int, last: int, nframes: int) -> List[int]:
    """``linspace(first, last, n).round()`` with n = ``nframes`` made even (qwen-vl-utils ``fetch_video``)."""
    n = even_count(nframes)
    return torch.linspace(first, last, n).round().long().tolist()


def prefix_indices(info: VideoInfo, end: Optional[float], nframes: int) -> List[int]:
    """Up to ``nframes`` uniform indices over the frames with timestamp <= ``end`` (the whole video if None).

    The official OVO wrappers sample the prefix chunk uniformly (at most 64 frames); frames past the end
    are never decoded, so the model cannot see the future. ``end`` past the video is capped at its last frame.
    """
    first = info.first_idx
    last = first + info.num_frames - 1
    if end is not None:
        last = min(last, first + int(math.floor(end * info.fps + 1e-6)))
    if last < first:
        raise DataError(f"prefix [0, {end}] s holds no frame", path=info.path)
    return uniform_indices(first, last, min(nframes, last - first + 1))
