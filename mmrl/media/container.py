"""Media files opened without torch: frame folders, MP4 containers (decord, the decoder training uses) and the data
pre-flight's probe (``probe_first_frame``: open the container, decode its first frame). ``mmrl.media.decode`` builds
tensors on top of these; this module imports neither torch nor qwen-vl-utils, so a bad file costs no heavy import.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional, Tuple

from mmrl.errors import DataError
from mmrl.media.frame_budget import FOLDER_FPS

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def folder_frames(path: str) -> List[str]:
    """A frame folder's image files in sorted order (MVBench's ``%05d.jpg`` from 1: file k is position k - 1)."""
    return sorted(str(p) for p in Path(path).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


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


def open_mp4(path: str, sample_id: str):
    """A decord ``VideoReader``; ``DataError`` (``unreadable video``) when the container does not open."""
    import decord

    try:
        with quiet_stderr():  # decord/ffmpeg print their own lines; the DataError below carries the reason
            return decord.VideoReader(path, num_threads=1)
    except Exception as e:  # decord raises its own DECORDError and RuntimeError
        msg = str(e).splitlines()[0][:200] if str(e) else ""
        raise DataError(f"unreadable video ({type(e).__name__}: {msg})", sample_id=sample_id, path=path) from None


def mp4_fps(vr) -> float:
    """A decord reader's average frame rate (1.0 when the container states none)."""
    return float(vr.get_avg_fps()) or 1.0


def _decode_image_file(path: str, sample_id: str, what: str) -> None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise DataError(f"unreadable {what} ({e})", sample_id=sample_id, path=path) from None


def probe_first_frame(sample) -> Optional[Tuple[int, float]]:
    """Open the sample's video container (or frame folder) and decode its first frame; an image: decode it.
    ``DataError`` naming the sample and the file when it cannot (the same reasons training's decoder gives).
    Returns a video's ``(frames, fps)`` (what ``mmrl.media.frame_budget.check_frames`` needs), None for an image."""
    if sample.video is not None:
        path = sample.video.path
        if not os.path.exists(path):
            raise DataError("video not found", sample_id=sample.id, path=path)
        if os.path.isdir(path):
            files = folder_frames(path)
            if not files:
                raise DataError("frame folder holds no frames", sample_id=sample.id, path=path)
            _decode_image_file(files[0], sample.id, f"frame {os.path.basename(files[0])}")
            return len(files), float(sample.video.frame_fps or FOLDER_FPS)
        vr = open_mp4(path, sample.id)
        if len(vr) == 0:
            raise DataError("video has zero frames", sample_id=sample.id, path=path)
        try:
            with quiet_stderr():
                vr.get_batch([0]).asnumpy()
        except Exception as e:  # noqa: BLE001 - decord's error types vary
            raise DataError(f"failed to decode frames [0]... ({type(e).__name__})", sample_id=sample.id,
                            path=path) from None
        return len(vr), mp4_fps(vr)
    elif sample.image is not None:
        if not os.path.exists(sample.image.path):
            raise DataError("image file not found", sample_id=sample.id, path=sample.image.path)
        _decode_image_file(sample.image.path, sample.id, "image")
    return None
