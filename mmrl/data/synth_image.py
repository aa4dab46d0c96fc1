"""Synthetic image world: the still scenes of the video world (``color``, ``location``, ``count``) as PNG files.

Annotations carry an ``image`` field (relative to ``out_dir``) instead of ``video``; evidence has no time
segments and one box per square at ``t = 0.0``. Deterministic given ``seed``.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

from PIL import Image

from mmrl.data.synth_video import (
    QUESTIONS,
    Balancer,
    check_world_args,
    render,
    resolve_qtypes,
    split_rng,
    static_scene,
    write_json,
)

IMAGE_QTYPES = ("color", "location", "count")


def make_image_world(
    out_dir: str,
    n_train: int,
    n_test: int,
    seed: int = 0,
    size: int = 56,
    qtypes: Optional[Sequence[str]] = None,
) -> dict:
    """Write ``out_dir/images/*.png``, ``out_dir/train.json`` and ``out_dir/test.json``.

    Question types cycle over ``qtypes`` (default: all of ``IMAGE_QTYPES``). Returns the paths and per-split
    question-type counts.
    """
    check_world_args(size, 4, 1.0)
    qs = resolve_qtypes(qtypes, IMAGE_QTYPES)
    os.makedirs(os.path.join(out_dir, "images"), exist_ok=True)
    result = {"out_dir": out_dir, "qtypes": qs, "counts": {}}
    for split, n in (("train", n_train), ("test", n_test)):
        rng = split_rng(seed, split)
        bal = Balancer(rng)
        items = []
        for i in range(n):
            qtype = qs[i % len(qs)]
            sc = static_scene(qtype, rng, bal, size)
            rel = f"images/{split}_{i:05d}.png"
            Image.fromarray(render(sc["objs"], size)).save(os.path.join(out_dir, rel))
            meta = dict(sc["meta"], seed=int(seed), size=size)
            items.append({
                "id": f"{split}-{i:05d}", "image": rel, "question": QUESTIONS[qtype],
                "candidates": sc["candidates"], "answer": sc["answer"], "qtype": qtype,
                "evidence": {"segments": [], "boxes": [[0.0, list(b)] for b, _ in sc["objs"]],
                             "source_size": [size, size]},
                "meta": meta,
            })
        path = os.path.join(out_dir, f"{split}.json")
        write_json(items, path)
        result[split] = path
        result["counts"][split] = {q: sum(it["qtype"] == q for it in items) for q in qs}
    return result
