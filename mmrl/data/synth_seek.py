"""A world where seeking pays: long dark clips with one short flash of colour that a coarse overview misses.

Each clip lasts ``duration`` seconds at ``fps`` (frame ``i`` covers ``[i / fps, (i + 1) / fps)``). A full-frame
flash of one colour lasts ``flash_frames`` frames (at most 1 s), placed so that no frame a uniform overview of
``2, 4, ..., overview`` frames would sample (``linspace(0, T - 1, k).round()``, Qwen's rule in
``mmrl.media.decode``) falls within one frame of it: the prompt's overview shows only the dark background. Every
frame carries a cue: a grey marker on the bottom rows whose horizontal position is the flash's time as a fraction of
the clip, so a model can learn where to seek (``video_seek`` on ``[t0, t1]``, ``mmrl.tools``). The question asks
the flash's colour (optionally naming the whole seconds that hold it, ``time_in_question``); annotations carry the evidence segment ``[t0, t1]`` in seconds. ``teacher`` gives, per sample,
the model turns of a right episode: seek the evidence (by default a 2 s window of whole seconds from ``floor(t0)``),
then answer with the letter (an SFT warm-up).
Deterministic given ``seed``.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional

import numpy as np

from mmrl.data.schema import LETTERS
from mmrl.data.synth_video import BACKGROUND, PALETTE, Balancer, available_codec, split_rng, write_json, write_mp4
from mmrl.data.seek_script import SEEK_STYLES, seek_arguments, seek_call

QUESTION = "What colour flashes in the video?"
TIMED_QUESTION = "What colour flashes between {start} and {end} s?"
MARKER = (128, 128, 128)


def overview_indices(n_frames: int, max_overview: int) -> set:
    """Frame indices any uniform overview of 2, 4, ..., ``max_overview`` frames samples."""
    out = set()
    for k in range(2, max_overview + 1, 2):
        out.update(np.linspace(0, n_frames - 1, k).round().astype(int).tolist())
    return out


def flash_start(rng: np.random.Generator, n_frames: int, flash: int, avoid: set) -> int:
    """A first flash frame whose frames, one frame either side, miss every index in ``avoid``."""
    ok = [s for s in range(1, n_frames - flash - 1) if not any(i in avoid for i in range(s - 1, s + flash + 1))]
    if not ok:
        raise ValueError(f"no room for a {flash}-frame flash that {n_frames} frames' overviews miss; "
                         f"lengthen the clip or lower overview")
    return int(ok[int(rng.integers(len(ok)))])


def seek_clip(colour: str, start: int, flash: int, n_frames: int, size: int) -> np.ndarray:
    """Frames ``uint8 [T, size, size, 3]``: dark, the flash, and the time cue on the bottom rows of every frame."""
    frames = np.empty((n_frames, size, size, 3), dtype=np.uint8)
    frames[:] = BACKGROUND
    frames[start : start + flash, : size - 8] = PALETTE[colour]
    x = int(round((start + flash / 2) / n_frames * (size - 6)))
    frames[:, size - 6 :, x : x + 6] = MARKER
    return frames


def teacher(item: dict, seek: str = "whole", width: int = 2, nframes: int = 4) -> List[str]:
    """The model turns of a right episode on ``item``: seek the evidence ``[t0, t1)`` in style ``seek``
    (``mmrl.data.seek_script``: ``whole``, a ``width``-second window of whole seconds from ``floor(t0)``, whose
    start the cue tells; ``exact``, the evidence's float seconds with ``nframes`` frames), then answer with the
    gold letter."""
    t0, t1 = item["evidence"]["segments"][0]
    return [seek_call(t0, t1, seek, width, nframes), LETTERS[item["candidates"].index(item["answer"])]]


def make_seek_world(out_dir: str, n_train: int, n_test: int, seed: int = 0, size: int = 56, duration: float = 32.0,
                    fps: float = 4.0, flash_frames: int = 2, overview: int = 8, codec: Optional[str] = None,
                    teacher_seek: str = "whole", time_in_question: bool = False, fixed_options: bool = False,
                    n_val: int = 0) -> Dict:
    """Write ``out_dir/videos/*.mp4``, ``train.json``, ``test.json`` and ``teacher.jsonl`` (train teacher turns,
    ``teacher(item, seek=teacher_seek)``). ``time_in_question``: the question names the 2 s window of whole
    seconds that holds the flash (``TIMED_QUESTION``, the teacher's ``whole`` seek), a text cue besides the
    marker. ``fixed_options``: every question lists all colours in canonical order (``Balancer``).
    ``n_val``: ``val.json`` holds the next ``n_val`` clips of the train stream (the same generator after the
    ``n_train`` train clips, so train and test do not depend on it), without teacher scripts: a validation
    split of training clips that no training stage reads."""
    n_frames = int(round(duration * fps))
    if size < 24 or size % 2:
        raise ValueError(f"size must be an even number >= 24, got {size}")
    if not 1 <= flash_frames <= fps:
        raise ValueError(f"flash_frames must be between 1 and fps ({fps}): a flash lasts at most 1 s")
    if teacher_seek not in SEEK_STYLES:
        raise ValueError(f"teacher_seek must be one of {', '.join(SEEK_STYLES)}, got {teacher_seek!r}")
    if n_val < 0:
        raise ValueError(f"n_val must be >= 0, got {n_val}")
    avoid = overview_indices(n_frames, overview)
    codec = codec or available_codec()
    os.makedirs(os.path.join(out_dir, "videos"), exist_ok=True)
    result: Dict = {"out_dir": out_dir, "codec": codec, "n_frames": n_frames}
    for split, n in (("train", n_train + n_val), ("test", n_test)):
        rng = split_rng(seed, split)
        bal = Balancer(rng, fixed_options=fixed_options)
        items = []
        for j in range(n):
            name, i = ("val", j - n_train) if split == "train" and j >= n_train else (split, j)
            colour = bal.value("seek", list(PALETTE))
            start = flash_start(rng, n_frames, flash_frames, avoid)
            rel = f"videos/{name}_{i:05d}.mp4"
            write_mp4(os.path.join(out_dir, rel), seek_clip(colour, start, flash_frames, n_frames, size), fps, codec)
            t0, t1 = round(start / fps, 6), round((start + flash_frames) / fps, 6)
            question = TIMED_QUESTION.format(**seek_arguments(t0, t1, "whole")) if time_in_question else QUESTION
            items.append({"id": f"{name}-{i:05d}", "video": rel, "question": question,
                          "candidates": bal.candidates(colour, list(PALETTE)), "answer": colour, "qtype": "seek",
                          "evidence": {"segments": [[t0, t1]], "boxes": [], "source_size": [size, size]},
                          "meta": {"seed": int(seed), "flash_frames": [start, start + flash_frames - 1],
                                   "fps": fps, "duration": duration, "overview_max": overview}})
        if split == "train" and n_val:
            items, val = items[:n_train], items[n_train:]
            write_json(val, os.path.join(out_dir, "val.json"))
            result["val"] = os.path.join(out_dir, "val.json")
        write_json(items, os.path.join(out_dir, f"{split}.json"))
        result[split] = os.path.join(out_dir, f"{split}.json")
        if split == "train":
            with open(os.path.join(out_dir, "teacher.jsonl"), "w") as f:
                for it in items:
                    f.write(json.dumps({"id": it["id"], "turns": teacher(it, seek=teacher_seek)}) + "\n")
            result["teacher"] = os.path.join(out_dir, "teacher.jsonl")
    return result
