"""``mmrl data synth --kind stream``: the streaming world (``mmrl.data.synth_stream``: MP4s, OVO-Bench annotations,
oracle) plus its blocks as annotation files of stream samples (``train.json``, ``test.json``: one sample per block,
``meta.stream`` with the teacher's memory, answers and recalls carried in from the blocks before) and the teacher's
model turns per training block (``teacher.jsonl``: ``{"id", "turns"}``, the masked-SFT targets)."""
from __future__ import annotations

import json
import os
from typing import Any, Dict

from mmrl.data.annotations import save_samples
from mmrl.data.synth_stream import make_stream_world
from mmrl.stream.config import DEFAULT_PATH, load_stream_config
from mmrl.stream.ovo import block_samples
from mmrl.stream.teacher import teacher_episode, teacher_texts


def make_stream_dataset(out_dir: str, n_train: int, n_test: int, seed: int = 0, size: int = 56,
                        duration: int = 16, fps: float = 2.0, stream_config: str = DEFAULT_PATH) -> Dict[str, Any]:
    cfg = load_stream_config(stream_config)
    info = make_stream_world(out_dir, n_train, n_test, seed=seed, size=size, duration=duration, fps=fps,
                             window=cfg.window_chunks)
    for split in ("train", "test"):
        with open(info[f"ovo_{split}"]) as f:
            items = json.load(f)
        with open(info[f"oracle_{split}"]) as f:
            oracles = json.load(f)
        samples = block_samples(items, info["video_root"], cfg, oracles)
        path = os.path.join(out_dir, f"{split}.json")
        save_samples(samples, path)
        info[split] = path
        info[f"{split}_blocks"] = len(samples)
        if split == "train":
            tpath = os.path.join(out_dir, "teacher.jsonl")
            with open(tpath, "w") as f:
                for s in samples:
                    f.write(json.dumps({"id": s.id, "turns": teacher_texts(teacher_episode(s, cfg))}) + "\n")
            info["teacher"] = tpath
    return info
