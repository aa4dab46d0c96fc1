"""Small MVBench- and OVO-Bench-format sets drawn from the synthetic video world (real MP4s and JPEGs).

They exercise the real evaluators without the licensed data: ``make_mvbench_set`` writes the official layout
(``json/<task>.json`` + video folders, a bound task with ``start``/``end`` and the frame-folder task with
``%05d.jpg`` frames at fps 3) and the HF ``video``-branch layout (``test.json``) over the same clips;
``make_ovobench_set`` writes ``ovo_bench_new.json`` (backward / real-time multiple choice, forward REC / SSR /
CRR items with ``test_info`` probes), the source videos and, optionally, the released-style prefix chunks
``{id}.mp4`` / ``{id}_{i}.mp4``. Deterministic given ``seed``.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from mmrl.data.synth_video import Balancer, QUESTIONS, video_scene, write_mp4
from mmrl.media.sampling import prefix_last

# task -> (video prefix, reader, bound, synthetic question type); prefixes as in eval/mvbench.yaml
MV_TASKS = {
    "action_antonym": ("ssv2_video", "video", False, "color"),
    "action_sequence": ("star/Charades_v1_480", "video", True, "direction"),
    "episodic_reasoning": ("tvqa/frames_fps3_hq", "frame", True, "order"),
}
HF_FRAME_PREFIX = "tvqa/video_fps3_hq_segment"  # the video branch ships the frame task as MP4 segments
FRAME_FPS = 3.0


def _write_json(path: str, data: Any) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
    return path


def write_frame_folder(folder: str, frames: np.ndarray) -> str:
    """JPEG frames ``00001.jpg``, ``00002.jpg``, ... (numbered from 1, as MVBench's tvqa folders)."""
    from PIL import Image

    os.makedirs(folder, exist_ok=True)
    for i, fr in enumerate(frames, start=1):
        Image.fromarray(np.ascontiguousarray(fr)).save(os.path.join(folder, f"{i:05d}.jpg"), quality=95)
    return folder


def make_mvbench_set(root: str, seed: int = 0, n_per_task: int = 3, size: int = 56, n_frames: int = 16,
                     fps: float = 8.0) -> Dict[str, Any]:
    """Write ``root/json/<task>.json``, ``root/test.json`` and ``root/video/<prefix>/...``; returns counts/paths."""
    rng = np.random.default_rng(seed)
    bal = Balancer(rng)
    official: Dict[str, List[dict]] = {}
    hf_meta: Dict[str, List[dict]] = {}
    for task, (prefix, reader, bound, qtype) in MV_TASKS.items():
        rate = FRAME_FPS if reader == "frame" else fps
        official[task], hf_meta[task] = [], []
        for i in range(n_per_task):
            sc = video_scene(qtype, rng, bal, size, n_frames, rate)
            name = f"{task}_{i:03d}"
            item = {"video": name if reader == "frame" else f"{name}.mp4", "question": QUESTIONS[qtype],
                    "candidates": list(sc["candidates"]), "answer": sc["answer"]}
            if bound:
                item.update(start=round(2 / rate, 3), end=round((n_frames - 3) / rate, 3))  # cuts both ends
            vdir = os.path.join(root, "video", prefix)
            if reader == "frame":
                write_frame_folder(os.path.join(vdir, name), sc["pixels"])
                os.makedirs(os.path.join(root, "video", HF_FRAME_PREFIX), exist_ok=True)
                write_mp4(os.path.join(root, "video", HF_FRAME_PREFIX, f"{name}.mp4"), sc["pixels"], rate)
            else:
                os.makedirs(vdir, exist_ok=True)
                write_mp4(os.path.join(vdir, f"{name}.mp4"), sc["pixels"], rate)
            official[task].append(item)
            hf_meta[task].append(dict(item, video=f"{name}.mp4"))
        _write_json(os.path.join(root, "json", f"{task}.json"), official[task])
    hf_root = {t: (HF_FRAME_PREFIX if MV_TASKS[t][1] == "frame" else MV_TASKS[t][0]) for t in MV_TASKS}
    _write_json(os.path.join(root, "test.json"), {"meta": hf_meta, "root": hf_root})
    return {"root": root, "tasks": list(MV_TASKS), "counts": {t: len(v) for t, v in official.items()},
            "n_items": sum(len(v) for v in official.values())}


# --- OVO-Bench ---------------------------------------------------------------------------------------------------
MC_TASKS = {"backward": ["EPM", "ASI"], "realtime": ["OCR", "STU"]}


def _mc_item(task: str, sc: dict, realtime: float) -> dict:
    options = list(sc["candidates"])
    return {"task": task, "realtime": realtime, "question": QUESTIONS["color"], "options": options,
            "answer": sc["answer"], "gt": options.index(sc["answer"])}


def _forward_items(duration: float) -> List[dict]:
    """One REC, SSR and CRR item each, with two probes inside the clip."""
    a, b = round(0.35 * duration, 2), round(0.8 * duration, 2)
    steps = ["paint the square red", "move the square to the left"]
    return [
        {"task": "REC", "activity": "move the square", "start_times": [0.5, a + 0.5],
         "end_times": [a - 0.2, b - 0.2], "test_info": [{"realtime": a, "count": 1}, {"realtime": b, "count": 2}]},
        {"task": "SSR", "tutorial": "SquareTutorial", "all_steps": steps, "start_time": [0, a + 0.5],
         "end_time": [a, b], "test_info": [{"realtime": a - 0.3, "step": steps[0], "type": 1},
                                           {"realtime": b, "step": steps[0], "type": 0}]},
        {"task": "CRR", "question": QUESTIONS["color"], "answer": "red", "ask_time": a - 0.5, "clue_time": b - 0.5,
         "test_info": [{"realtime": a - 0.5, "type": 0}, {"realtime": b, "type": 1}]},
    ]


def _chunk_frames(frames: np.ndarray, realtime: float, fps: float) -> np.ndarray:
    """Frames of ``[0, ceil(realtime))`` capped at the clip (what ``chunk_videos.py``'s moviepy subclip keeps)."""
    return frames[: prefix_last(len(frames), fps, math.ceil(realtime)) + 1]


def make_ovobench_set(root: str, seed: int = 0, n_per_task: int = 1, size: int = 56, n_frames: int = 24,
                      fps: float = 4.0, chunked: bool = True, beyond_end: bool = True) -> Dict[str, Any]:
    """Write ``root/ovo_bench_new.json``, ``root/src_videos/synth/*.mp4`` and (``chunked``) ``root/chunks/``.

    ``beyond_end`` gives the first real-time item a ``realtime`` past the clip (its prefix is capped).
    """
    rng = np.random.default_rng(seed)
    bal = Balancer(rng)
    duration = n_frames / fps
    items: List[dict] = []
    pixels: Dict[str, np.ndarray] = {}

    def video(name: str) -> Tuple[str, dict]:
        sc = video_scene("color", rng, bal, size, n_frames, fps)
        rel = f"synth/{name}.mp4"
        pixels[rel] = sc["pixels"]
        os.makedirs(os.path.join(root, "src_videos", "synth"), exist_ok=True)
        write_mp4(os.path.join(root, "src_videos", rel), sc["pixels"], fps)
        return rel, sc

    capped = not beyond_end
    for mode, tasks in MC_TASKS.items():
        for task in tasks:
            for i in range(n_per_task):
                rel, sc = video(f"{task}_{i}")
                rt = round(0.3 * duration + 0.7 * i, 2)
                if mode == "realtime" and not capped:
                    rt, capped = round(duration + 1.3, 2), True
                items.append(dict(_mc_item(task, sc, rt), video=rel))
    for i in range(n_per_task):
        for item in _forward_items(duration):
            rel, _ = video(f"{item['task']}_{i}")
            items.append(dict(item, video=rel))
    items = [dict({"id": k}, **it) for k, it in enumerate(items)]
    anno = _write_json(os.path.join(root, "ovo_bench_new.json"), items)
    n_chunks = 0
    if chunked:
        os.makedirs(os.path.join(root, "chunks"), exist_ok=True)
        for it in items:
            probes = it.get("test_info")
            times = [(f"{it['id']}_{j}", p["realtime"]) for j, p in enumerate(probes)] if probes else \
                [(str(it["id"]), it["realtime"])]
            for stem, rt in times:
                write_mp4(os.path.join(root, "chunks", f"{stem}.mp4"), _chunk_frames(pixels[it["video"]], rt, fps), fps)
                n_chunks += 1
    n_probes = sum(len(it.get("test_info", [])) for it in items)
    return {"root": root, "annotations": anno, "video_root": os.path.join(root, "src_videos"),
            "chunk_dir": os.path.join(root, "chunks") if chunked else None, "n_items": len(items),
            "n_queries": sum(1 for it in items if "test_info" not in it) + n_probes, "n_chunks": n_chunks,
            "duration": duration, "fps": fps}


def main(argv: Optional[List[str]] = None) -> None:
    """``python -m mmrl.eval.synth_bench OUT``: write both sets under OUT/mvbench and OUT/ovobench."""
    import sys

    out = (argv or sys.argv[1:] or ["runs/synth_bench"])[0]
    print(json.dumps({"mvbench": make_mvbench_set(os.path.join(out, "mvbench")),
                      "ovobench": make_ovobench_set(os.path.join(out, "ovobench"))}, indent=2))


if __name__ == "__main__":
    main()
