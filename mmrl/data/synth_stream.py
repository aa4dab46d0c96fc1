"""A streaming world in OVO-Bench's own annotation format (``mmrl data synth --kind stream``; issue 18).

Each stream is an MP4 of ``duration`` one-second chunks at ``fps`` (2 frames per chunk at 2 fps). Chunk ``k``
shows one coloured square (red / green / blue / yellow) at a random place, except the flash chunks (the whole
frame white: the repeated action of REC) and one clue chunk (a purple square: the clue of CRR). Per stream the
annotations hold four OVO-Bench items, written exactly as ``ovo_bench_new.json`` writes them so that
``mmrl eval ovobench`` scores them with the official rules unchanged:

- backward tracing, ``EPM``: asked at ``realtime`` about a chunk that left the 8-chunk window by then
  ("What colour was the square at second j?"; options, ``answer``, ``gt``);
- real-time, ``ATR``: "What colour is the square now?" about the chunk ending at ``realtime``;
- forward, ``CRR``: asked at ``ask_time``, clue at ``clue_time`` (the middle of the clue chunk), probes
  ``test_info[{realtime, type}]`` (type 1 at and after the clue chunk's end);
- forward, ``REC``: "How many times did they flash the screen white?", ``start_times``/``end_times`` of the
  flashes, probes ``test_info[{realtime, count}]`` (count = flashes ended by ``realtime``).

Every question time is a whole second and the times at which an ideal streaming agent must speak (a choice
question's ``realtime``, each change of a forward answer) are distinct, so one action per decision suffices.
The oracle (``oracle_<split>.json``, per video: what each chunk shows, the salient facts with their ranges, each
choice item's evidence interval) drives the teacher (``mmrl.stream.teacher``); the policy never sees it.
Deterministic given ``seed``; ``train`` and ``test`` streams come from independent generators.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional

import numpy as np

from mmrl.data.synth_video import BACKGROUND, PALETTE, Balancer, available_codec, split_rng, write_json, write_mp4

WHITE = (240, 240, 240)
PURPLE = (170, 60, 220)
COLOURS = list(PALETTE)
ACTIVITY = "flash the screen white"
CRR_QUESTION = "Has a purple square appeared?"


def _frames(kinds: List[str], colours: List[str], boxes: List[List[int]], size: int, per: int) -> np.ndarray:
    out = np.empty((len(kinds) * per, size, size, 3), dtype=np.uint8)
    out[:] = BACKGROUND
    for k, (kind, col, (x0, y0, x1, y1)) in enumerate(zip(kinds, colours, boxes)):
        sl = slice(k * per, (k + 1) * per)
        if kind == "flash":
            out[sl] = WHITE
        else:
            out[sl, y0:y1, x0:x1] = PURPLE if kind == "clue" else PALETTE[col]
    return out


def _layout(rng: np.random.Generator, duration: int, window: int) -> Optional[Dict]:
    """Event chunks and question times, or ``None`` when the draw's speaking times collide (redrawn)."""
    flashes = sorted(int(f) for f in rng.choice(np.arange(1, duration - 1), size=2, replace=False))
    clue = int(rng.integers(3, duration - 2))
    if clue in flashes:
        return None
    t_epm = int(rng.integers(window + 2, duration + 1))  # realtime of the backward question
    normal = [k for k in range(t_epm - window - 1) if k not in flashes and k != clue]
    if not normal:
        return None
    j = int(normal[int(rng.integers(len(normal)))])  # the chunk it asks about: out of the window by t_epm
    t_atr = int(rng.integers(2, duration + 1))
    ask = int(rng.integers(1, clue + 1))  # CRR ask time (before the clue)
    speak = [1, ask, clue + 1, t_epm, t_atr] + [f + 1 for f in flashes]  # REC "0" at 1 s, CRR "No" at ask, ...
    if len(set(speak)) != len(speak) or t_atr - 1 in flashes or t_atr - 1 == clue:
        return None
    return {"flashes": flashes, "clue": clue, "t_epm": t_epm, "j": j, "t_atr": t_atr, "ask": ask}


def _stream(rng: np.random.Generator, bal: Balancer, vid: str, first_id: int, duration: int, size: int,
            window: int) -> tuple:
    lay = None
    while lay is None:
        lay = _layout(rng, duration, window)
    side = max(8, size // 4) // 2 * 2
    kinds = ["flash" if k in lay["flashes"] else "clue" if k == lay["clue"] else "square" for k in range(duration)]
    colours = [COLOURS[int(rng.integers(len(COLOURS)))] for _ in range(duration)]
    boxes = []
    for _ in range(duration):
        x, y = (int(v) // 2 * 2 for v in rng.integers(2, size - side - 2, size=2))
        boxes.append([x, y, x + side, y + side])
    notes = {k: {"flash": "white flash", "clue": "purple square"}.get(kinds[k], f"{colours[k]} square")
             for k in range(duration)}
    j, t_atr = lay["j"], lay["t_atr"]
    items, evidence = [], {}
    for off, (task, rt, chunk, question) in enumerate((
            ("EPM", lay["t_epm"], j, f"What colour was the square at second {j}?"),
            ("ATR", t_atr, t_atr - 1, "What colour is the square now?"))):
        gold = colours[chunk]
        cands = bal.candidates(gold, COLOURS)
        items.append({"id": first_id + off, "task": task, "video": vid, "realtime": float(rt), "question": question,
                      "options": cands, "answer": gold, "gt": cands.index(gold)})
        evidence[str(first_id + off)] = [[float(chunk), float(chunk + 1)]]
    probes = list(range(lay["ask"], duration + 1, 2))
    clue_t = lay["clue"] + 0.5
    items.append({"id": first_id + 2, "task": "CRR", "video": vid, "question": CRR_QUESTION, "answer": "Yes",
                  "ask_time": float(lay["ask"]), "clue_time": clue_t,
                  "test_info": [{"realtime": float(t), "type": int(t >= lay["clue"] + 1)} for t in probes]})
    starts = [float(f) for f in lay["flashes"]]
    ends = [float(f + 1) for f in lay["flashes"]]
    items.append({"id": first_id + 3, "task": "REC", "video": vid, "activity": ACTIVITY, "start_times": starts,
                  "end_times": ends, "test_info": [{"realtime": float(t), "count": sum(e <= t for e in ends)}
                                                   for t in range(2, duration + 1, 2)]})
    facts = sorted([[float(f), float(f + 1), "white flash"] for f in lay["flashes"]] +
                   [[float(lay["clue"]), float(lay["clue"] + 1), "purple square"],
                    [float(j), float(j + 1), f"{colours[j]} square"]])
    oracle = {"duration": float(duration), "chunk_notes": {str(k): v for k, v in notes.items()}, "facts": facts,
              "evidence": evidence}
    return (kinds, colours, boxes), items, oracle


def make_stream_world(out_dir: str, n_train: int, n_test: int, seed: int = 0, size: int = 56, duration: int = 16,
                      fps: float = 2.0, window: int = 8, codec: Optional[str] = None) -> Dict:
    """Write ``videos/<split>_<i>.mp4``, ``ovo_<split>.json`` (OVO-Bench annotations) and ``oracle_<split>.json``."""
    if size < 28 or size % 28:
        raise ValueError(f"size must be a multiple of 28 (whole visual patches), got {size}")
    per = int(round(fps))
    if per < 2 or per % 2 or abs(per - fps) > 1e-9:
        raise ValueError(f"fps must be an even whole number (2 frames per temporal patch), got {fps}")
    if duration < window + 4:
        raise ValueError(f"duration must be >= window + 4 = {window + 4} s so that a backward question's chunk can "
                         f"leave the window, got {duration}")
    codec = codec or available_codec()
    os.makedirs(os.path.join(out_dir, "videos"), exist_ok=True)
    result: Dict = {"out_dir": out_dir, "codec": codec, "duration": duration, "fps": fps}
    for split, n in (("train", n_train), ("test", n_test)):
        rng = split_rng(seed, split)
        bal = Balancer(rng)
        items: List[dict] = []
        oracle: Dict[str, dict] = {}
        for i in range(n):
            vid = f"{split}_{i:05d}.mp4"
            scene, its, orc = _stream(rng, bal, vid, len(items) + (0 if split == "train" else 10 ** 6), duration,
                                      size, window)
            write_mp4(os.path.join(out_dir, "videos", vid), _frames(*scene, size, per), fps, codec)
            items += its
            oracle[vid] = orc
        write_json(items, os.path.join(out_dir, f"ovo_{split}.json"))
        with open(os.path.join(out_dir, f"oracle_{split}.json"), "w") as f:
            json.dump(oracle, f, indent=1)
        result[f"ovo_{split}"] = os.path.join(out_dir, f"ovo_{split}.json")
        result[f"oracle_{split}"] = os.path.join(out_dir, f"oracle_{split}.json")
    result["video_root"] = os.path.join(out_dir, "videos")
    return result
