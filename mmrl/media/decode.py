"""Decode a sample's media once per step: video frames ``uint8 [T, C, H, W]`` with timestamps, or one image.

Frame selection and resizing follow Qwen's rules from ``qwen-vl-utils`` (``smart_nframes``: frame count a
multiple of 2; ``smart_resize``: sides multiples of 28 within the pixel budget); decoding is decord (MP4) or
PIL (JPEG frame folders, images). Every failure is a ``DataError`` naming the sample and the file.
"""
from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch
from qwen_vl_utils.vision_process import smart_nframes, smart_resize

from mmrl.data.schema import ImageRef, Media, Sample, VideoRef
from mmrl.errors import DataError

FACTOR = 28  # patch 14 x spatial merge 2


@dataclass
class MediaBudget:
    """Defaults applied where a sample's own reference leaves them unset."""

    nframes: Optional[int] = 4
    fps: Optional[float] = None
    min_pixels: int = 28 * 28
    max_pixels: int = 112 * 112
    max_frames: int = 768


def _resize(frames: torch.Tensor, min_pixels: int, max_pixels: int) -> torch.Tensor:
    from torchvision.transforms.functional import InterpolationMode, resize

    h, w = frames.shape[-2:]
    rh, rw = smart_resize(h, w, factor=FACTOR, min_pixels=min_pixels, max_pixels=max_pixels)
    if (rh, rw) == (h, w):
        return frames.contiguous()
    return resize(frames, [rh, rw], interpolation=InterpolationMode.BICUBIC, antialias=True).contiguous()


def _frame_range(ref: VideoRef, total: int, fps: float, sample_id: str) -> tuple[int, int]:
    start = 0 if ref.start is None else math.ceil(max(0.0, ref.start) * fps)
    end = total - 1 if ref.end is None else min(total - 1, math.floor(ref.end * fps))
    if start > end:
        raise DataError(f"time range [{ref.start}, {ref.end}] s selects no frame (video has {total} frames at {fps:.3f} fps)",
                        sample_id=sample_id, path=ref.path)
    return start, end


def _choose_indices(ref: VideoRef, budget: MediaBudget, start: int, end: int, fps: float, sample_id: str) -> List[int]:
    available = end - start + 1
    nframes = ref.nframes if ref.nframes is not None else (None if ref.fps is not None else budget.nframes)
    ele = {"nframes": nframes} if nframes is not None else {"fps": ref.fps or budget.fps or 2.0, "max_frames": budget.max_frames}
    if nframes is not None and nframes > available:
        raise DataError(f"clip has {available} frames in range but {nframes} were requested", sample_id=sample_id, path=ref.path)
    try:
        n = smart_nframes(ele, total_frames=available, video_fps=fps)
    except ValueError as e:
        if "nframes should in interval" in str(e):  # qwen-vl-utils' wording; frames are sampled in pairs
            raise DataError(f"clip has {available} frame(s) in range; Qwen2-VL samples frames in pairs, so at least 2 "
                            "are needed", sample_id=sample_id, path=ref.path) from None
        raise DataError(f"cannot sample frames: {e}", sample_id=sample_id, path=ref.path) from e
    return torch.linspace(start, end, n).round().long().tolist()


def _read_frame_folder(ref: VideoRef, budget: MediaBudget, sample_id: str):
    from PIL import Image

    files = sorted(p for p in Path(ref.path).iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    if not files:
        raise DataError("frame folder holds no frames", sample_id=sample_id, path=ref.path)
    fps = ref.frame_fps or 3.0
    start, end = _frame_range(ref, len(files), fps, sample_id)
    idx = _choose_indices(ref, budget, start, end, fps, sample_id)
    arrays = [np.asarray(Image.open(files[i]).convert("RGB")) for i in idx]
    return np.stack(arrays), idx, fps


@contextmanager
def quiet_stderr():
    """Silence what C libraries (decord, ffmpeg) write to file descriptor 2 while the block runs."""
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (e.g. captured): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _read_mp4(ref: VideoRef, budget: MediaBudget, sample_id: str):
    import decord

    try:
        with quiet_stderr():  # decord/ffmpeg print their own lines; the DataError below carries the reason
            vr = decord.VideoReader(ref.path, num_threads=1)
    except Exception as e:  # decord raises its own DECORDError and RuntimeError
        raise DataError(f"unreadable video ({type(e).__name__}: {str(e).splitlines()[0][:200]})", sample_id=sample_id, path=ref.path) from None
    total = len(vr)
    if total == 0:
        raise DataError("video has zero frames", sample_id=sample_id, path=ref.path)
    fps = float(vr.get_avg_fps()) or 1.0
    start, end = _frame_range(ref, total, fps, sample_id)
    idx = _choose_indices(ref, budget, start, end, fps, sample_id)
    try:
        arr = vr.get_batch(idx).asnumpy()
    except Exception as e:
        raise DataError(f"failed to decode frames {idx[:4]}... ({type(e).__name__})", sample_id=sample_id, path=ref.path) from None
    return arr, idx, fps


def decode_video(ref: VideoRef, sample_id: str, budget: MediaBudget | None = None) -> Media:
    budget = budget or MediaBudget()
    if not os.path.exists(ref.path):
        raise DataError("video file not found", sample_id=sample_id, path=ref.path)
    reader = _read_frame_folder if os.path.isdir(ref.path) else _read_mp4
    arr, idx, fps = reader(ref, budget, sample_id)
    frames = torch.from_numpy(np.ascontiguousarray(arr)).permute(0, 3, 1, 2)
    source_size = (int(frames.shape[-1]), int(frames.shape[-2]))
    max_pixels = ref.max_pixels or budget.max_pixels
    frames = _resize(frames, budget.min_pixels, max_pixels)
    timestamps = [i / fps for i in idx]
    sampled_fps = (len(idx) - 1) / max(timestamps[-1] - timestamps[0], 1e-6) if len(idx) > 1 else fps
    return Media(sample_id=sample_id, frames=frames, timestamps=timestamps, source_size=source_size, fps=sampled_fps)


def decode_image(ref: ImageRef, sample_id: str, budget: MediaBudget | None = None) -> Media:
    from PIL import Image, UnidentifiedImageError

    budget = budget or MediaBudget()
    if not os.path.exists(ref.path):
        raise DataError("image file not found", sample_id=sample_id, path=ref.path)
    try:
        with Image.open(ref.path) as im:
            arr = np.asarray(im.convert("RGB"))
    except (UnidentifiedImageError, OSError) as e:
        raise DataError(f"unreadable image ({e})", sample_id=sample_id, path=ref.path) from None
    img = torch.from_numpy(arr.copy()).permute(2, 0, 1)
    source_size = (int(img.shape[-1]), int(img.shape[-2]))
    img = _resize(img.unsqueeze(0), budget.min_pixels, ref.max_pixels or budget.max_pixels)[0]
    return Media(sample_id=sample_id, image=img, source_size=source_size)


def load_media(sample: Sample, budget: MediaBudget | None = None) -> Media:
    """Decode the sample's video or image (exactly one must be set)."""
    if sample.video is not None:
        return decode_video(sample.video, sample.id, budget)
    if sample.image is not None:
        return decode_image(sample.image, sample.id, budget)
    raise DataError("sample has neither a video nor an image", sample_id=sample.id)
