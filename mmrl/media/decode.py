"""Decode media: a sample's video frames ``uint8 [T, C, H, W]`` with timestamps, or one image; or exact indices.

Two entries: ``load_media`` / ``decode_video`` (training and the synthetic eval) choose frames by Qwen's rules;
``probe`` + ``decode_indices`` (benchmark protocols) decode exactly the indices a protocol chose. Both take
their frame indices from ``mmrl.media.sampling`` (the one home of index rules) and resize with qwen-vl-utils'
``smart_resize`` (sides multiples of the model's resize factor within the pixel budget: 28 for Qwen2-VL / Qwen2.5-VL,
32 for Qwen3-VL; ``mmrl.media.inputs.resize_factor`` reads it from the processor). Decoding is decord (MP4) or PIL (frame
folders: the sorted image files, images). Every failure is a ``DataError`` naming the sample and the file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import torch
from qwen_vl_utils.vision_process import smart_resize

from mmrl.data.schema import ImageRef, Media, Sample, VideoRef
from mmrl.errors import DataError
from mmrl.media.container import IMAGE_SUFFIXES, folder_frames, mp4_fps, open_mp4, quiet_stderr  # noqa: F401  (re-exported)
from mmrl.media.frame_budget import FOLDER_FPS, check_frames
from mmrl.media.sampling import qwen_indices, qwen_nframes

FACTOR = 28  # the default resize factor: patch 14 x spatial merge 2 (Qwen2-VL / Qwen2.5-VL); Qwen3-VL's is 32


@dataclass
class MediaBudget:
    """Defaults applied where a sample's own reference leaves them unset."""

    nframes: Optional[int] = 4
    fps: Optional[float] = None
    min_pixels: int = 28 * 28
    max_pixels: int = 112 * 112
    max_frames: int = 768
    factor: int = FACTOR  # sides are resized to multiples of it (the processor's patch x merge size)


def _resize(frames: torch.Tensor, min_pixels: int, max_pixels: int, factor: int = FACTOR) -> torch.Tensor:
    from torchvision.transforms.functional import InterpolationMode, resize

    h, w = frames.shape[-2:]
    rh, rw = smart_resize(h, w, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    if (rh, rw) == (h, w):
        return frames.contiguous()
    return resize(frames, [rh, rw], interpolation=InterpolationMode.BICUBIC, antialias=True).contiguous()


def _choose_indices(ref: VideoRef, budget: MediaBudget, total: int, fps: float, sample_id: str) -> List[int]:
    start, end, nframes = check_frames(ref, budget.nframes, total, fps, sample_id)  # the pre-flight's rule too
    available = end - start + 1
    try:
        n = qwen_nframes(available, fps, nframes=nframes, sample_fps=ref.fps or budget.fps or 2.0,
                         max_frames=budget.max_frames)
    except ValueError as e:
        raise DataError(f"cannot sample frames: {e}", sample_id=sample_id, path=ref.path) from e
    return qwen_indices(start, end, n)


def _read_frame_folder(ref: VideoRef, budget: MediaBudget, sample_id: str):
    from PIL import Image

    files = folder_frames(ref.path)
    if not files:
        raise DataError("frame folder holds no frames", sample_id=sample_id, path=ref.path)
    fps = ref.frame_fps or FOLDER_FPS
    idx = _choose_indices(ref, budget, len(files), fps, sample_id)
    arrays = [np.asarray(Image.open(files[i]).convert("RGB")) for i in idx]
    return np.stack(arrays), idx, fps


def _read_mp4(ref: VideoRef, budget: MediaBudget, sample_id: str):
    vr = open_mp4(ref.path, sample_id)
    total = len(vr)
    if total == 0:
        raise DataError("video has zero frames", sample_id=sample_id, path=ref.path)
    fps = mp4_fps(vr)
    idx = _choose_indices(ref, budget, total, fps, sample_id)
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
    frames = _resize(frames, budget.min_pixels, max_pixels, budget.factor)
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
    img = _resize(img.unsqueeze(0), budget.min_pixels, ref.max_pixels or budget.max_pixels, budget.factor)[0]
    return Media(sample_id=sample_id, image=img, source_size=source_size)


def load_media(sample: Sample, budget: MediaBudget | None = None) -> Media:
    """Decode the sample's video or image (exactly one must be set)."""
    if sample.video is not None:
        return decode_video(sample.video, sample.id, budget)
    if sample.image is not None:
        return decode_image(sample.image, sample.id, budget)
    raise DataError("sample has neither a video nor an image", sample_id=sample.id)


# --- exact indices (benchmark protocols) -------------------------------------------------------------------------
@dataclass
class VideoInfo:
    """What index selection needs: frame count and rate; ``files`` for a frame folder (index i = i-th file)."""

    path: str
    num_frames: int
    fps: float
    files: Optional[List[str]] = None

    @property
    def is_folder(self) -> bool:
        return self.files is not None

    @property
    def duration(self) -> float:
        return self.num_frames / self.fps


def probe(path: str, sample_id: str, frame_fps: Optional[float] = None) -> VideoInfo:
    """Frame count and rate of an MP4 (decord) or a frame folder (its ``frame_fps``, default 3)."""
    if not os.path.exists(path):
        raise DataError("video not found", sample_id=sample_id, path=path)
    if os.path.isdir(path):
        files = folder_frames(path)
        if not files:
            raise DataError("frame folder holds no frames", sample_id=sample_id, path=path)
        return VideoInfo(path, len(files), float(frame_fps or FOLDER_FPS), files=files)
    vr = open_mp4(path, sample_id)
    if len(vr) == 0:
        raise DataError("video has zero frames", sample_id=sample_id, path=path)
    return VideoInfo(path, len(vr), mp4_fps(vr))


def _read_indices(info: VideoInfo, indices: List[int], sample_id: str) -> np.ndarray:
    bad = [i for i in indices if not 0 <= i < info.num_frames]
    if bad:
        raise DataError(f"frame indices {bad[:4]} outside [0, {info.num_frames})", sample_id=sample_id, path=info.path)
    if info.files is not None:
        from PIL import Image

        arrays = []
        for i in indices:
            try:
                with Image.open(info.files[i]) as im:
                    arrays.append(np.asarray(im.convert("RGB")))
            except (OSError, ValueError) as e:
                raise DataError(f"unreadable frame {os.path.basename(info.files[i])} ({type(e).__name__})",
                                sample_id=sample_id, path=info.path) from None
        return np.stack(arrays)
    vr = open_mp4(info.path, sample_id)
    try:
        return vr.get_batch(list(indices)).asnumpy()
    except Exception as e:  # noqa: BLE001 - decord's error types vary
        raise DataError(f"failed to decode frames {list(indices)[:4]}... ({type(e).__name__})", sample_id=sample_id,
                        path=info.path) from None


def decode_indices(info: VideoInfo, indices: List[int], sample_id: str, max_pixels: int,
                   min_pixels: int = 28 * 28, factor: int = FACTOR) -> Media:
    """Exactly the frames ``indices`` (0-based), each resized by ``smart_resize`` within ``[min, max]_pixels`` to
    sides that are multiples of ``factor``.

    Timestamps are ``i / fps``; ``Media.fps`` is the sampled rate (for M-RoPE time ids).
    """
    if not indices:
        raise DataError("no frame indices to decode", sample_id=sample_id, path=info.path)
    arr = _read_indices(info, list(indices), sample_id)
    frames = torch.from_numpy(np.ascontiguousarray(arr)).permute(0, 3, 1, 2)
    source_size = (int(frames.shape[-1]), int(frames.shape[-2]))
    frames = _resize(frames, min_pixels, max_pixels, factor)
    ts = [i / info.fps for i in indices]
    span = ts[-1] - ts[0]
    fps = (len(ts) - 1) / span if len(ts) > 1 and span > 0 else info.fps
    return Media(sample_id=sample_id, frames=frames, timestamps=ts, source_size=source_size, fps=fps)
