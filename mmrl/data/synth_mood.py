"""The mood world: a subjective image task with a known rule from one cue region to a point in VAD space.

Each image (``size`` x ``size`` PNG) has a mid-grey background, ``n_distractors`` grey checkerboard squares (no
affect) and one solid-colour **cue** square. The rule, with (V, A, D) in [0, 1] (``mmrl.data.affect``):

    cue colour (R, G, B) = (255 A, 255 V, 255 (1 - V)),   cue side = (0.25 + 0.25 D) * size

so valence is the green/blue balance, arousal the red channel and dominance the size. A sample draws an emotion e
of ``EMOTION6`` (balanced), its cue point z = VAD(e) + N(0, ``cue_noise``^2) clipped to [0, 1], and
``n_annotators`` simulated annotators: annotator j perceives z + N(0, ``annotator_noise``^2) and picks the emotion
whose lexicon point is nearest. The counts give ``meta.emotion_dist``; the label (``answer``) is the majority
(ties to the drawn e, then to ``EMOTION6`` order). The cue's box is the evidence (``evidence.boxes`` at t=0).
Deterministic given ``seed``.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional

import numpy as np
from PIL import Image

from mmrl.data.affect import BUILTIN_VAD, EMOTION6
from mmrl.data.synth_video import split_rng, write_json

QUESTION = "Which emotion does this image most likely evoke in a viewer?"


def cue_color(z) -> tuple:
    """The rule's colour of a VAD point: (255 A, 255 V, 255 (1 - V))."""
    v, a, _ = (float(x) for x in z)
    return int(round(255 * a)), int(round(255 * v)), int(round(255 * (1 - v)))


def cue_side(d: float, size: int) -> int:
    return max(2, int(round((0.25 + 0.25 * float(d)) * size)))


def decode_cue(rgb, side: int, size: int) -> tuple:
    """The inverse rule: (V, A, D) from a cue's colour and side (for tests and the eval)."""
    r, g, _ = (float(x) for x in rgb)
    return g / 255.0, r / 255.0, min(1.0, max(0.0, (side / size - 0.25) / 0.25))


def annotate(z: np.ndarray, rng: np.random.Generator, n: int, noise: float) -> Dict[str, float]:
    """The annotator distribution over ``EMOTION6`` (nearest lexicon point to each noisy perception)."""
    pts = np.array([BUILTIN_VAD[e] for e in EMOTION6])
    seen = z[None] + rng.normal(0.0, noise, size=(n, 3))
    picks = ((seen[:, None, :] - pts[None]) ** 2).sum(-1).argmin(1)
    counts = np.bincount(picks, minlength=len(EMOTION6))
    return {e: float(c) / n for e, c in zip(EMOTION6, counts)}


def _place(rng, size: int, side: int, taken: List[tuple], tries: int = 50) -> tuple:
    for _ in range(tries):
        x, y = int(rng.integers(0, size - side + 1)), int(rng.integers(0, size - side + 1))
        if all(x + side <= a or a + s <= x or y + side <= b or b + s <= y for a, b, s in taken):
            return x, y
    return int(rng.integers(0, size - side + 1)), int(rng.integers(0, size - side + 1))


def mood_scene(label: str, rng: np.random.Generator, size: int = 56, n_distractors: int = 2,
               cue_noise: float = 0.05, n_annotators: int = 10, annotator_noise: float = 0.15) -> dict:
    """One image (uint8 [H, W, 3]) with its cue box [x0, y0, x1, y1], cue point and annotator distribution."""
    img = np.full((size, size, 3), 128, dtype=np.uint8)
    z = np.clip(np.array(BUILTIN_VAD[label]) + rng.normal(0.0, cue_noise, 3), 0.0, 1.0)
    side = cue_side(z[2], size)
    cx, cy = _place(rng, size, side, [])
    taken = [(cx, cy, side)]
    for _ in range(n_distractors):
        s = max(2, int(rng.integers(size // 8, size // 4 + 1)))
        x, y = _place(rng, size, s, taken)
        taken.append((x, y, s))
        lo, hi = int(rng.integers(40, 100)), int(rng.integers(150, 220))
        yy, xx = np.mgrid[0:s, 0:s]
        img[y:y + s, x:x + s] = np.where((((yy // 2) + (xx // 2)) % 2 == 0)[..., None], lo, hi).astype(np.uint8)
    img[cy:cy + side, cx:cx + side] = cue_color(z)
    dist = annotate(z, rng, n_annotators, annotator_noise)
    best = max(dist.values())
    top = [e for e in EMOTION6 if dist[e] == best]
    answer = label if label in top else top[0]
    return {"image": img, "box": [cx, cy, cx + side, cy + side], "cue_vad": [float(x) for x in z],
            "dist": dist, "answer": answer, "drawn": label}


def reference_response(box, size: int, z, dist: Dict[str, float], answer: str, k: int = 5) -> str:
    """A gold four-step response (the DSPO format of ``mmrl.rewards.dspo_format``) for SFT: the cue's colour as
    evidence with its box normalised to [0, 1], its VAD point as the reflection, the ``k`` emotions the annotators
    chose most (ties: nearest to the cue in VAD) as candidates, the label as the choice."""
    x0, y0, x1, y1 = (float(v) / size for v in box)
    r, g, b = cue_color(z)
    near = {e: float(((np.array(BUILTIN_VAD[e]) - np.array(z)) ** 2).sum()) for e in EMOTION6}
    cands = sorted(EMOTION6, key=lambda e: (-dist.get(e, 0.0), near[e]))[: max(1, min(k, len(EMOTION6)))]
    return (f"<step1>colour {r} {g} {b} "
            f"\\bboxed{{[{y0:.2f}, {x0:.2f}, {y1:.2f}, {x1:.2f}]}}</step1>"
            f"<step2>V {z[0]:.1f} A {z[1]:.1f} D {z[2]:.1f}</step2>"
            f"<step3>\\list{{{', '.join(cands)}}}</step3><step4>\\boxed{{{answer}}}</step4>")


def make_mood_world(out_dir: str, n_train: int, n_test: int, seed: int = 0, size: int = 56, n_distractors: int = 2,
                    cue_noise: float = 0.05, n_annotators: int = 10, annotator_noise: float = 0.15, k: int = 5) -> dict:
    """Write ``out_dir/images/*.png``, ``train.json`` and ``test.json`` (mmrl annotation format, choice answers
    over ``EMOTION6``; ``meta.reference_response`` a gold four-step response with ``k`` candidates). Returns the
    paths and per-split label counts."""
    if size < 16:
        raise ValueError(f"mood world size must be >= 16 pixels, got {size}")
    if n_annotators < 1:
        raise ValueError(f"n_annotators must be >= 1, got {n_annotators}")
    os.makedirs(os.path.join(out_dir, "images"), exist_ok=True)
    result: dict = {"out_dir": out_dir, "counts": {}}
    for split, n in (("train", n_train), ("test", n_test)):
        rng = split_rng(seed, split)
        order = [EMOTION6[i % len(EMOTION6)] for i in range(n)]
        rng.shuffle(order)
        items = []
        for i, label in enumerate(order):
            sc = mood_scene(label, rng, size, n_distractors, cue_noise, n_annotators, annotator_noise)
            rel = f"images/{split}_{i:05d}.png"
            Image.fromarray(sc["image"]).save(os.path.join(out_dir, rel))
            items.append({
                "id": f"mood-{split}-{i:05d}", "image": rel, "question": QUESTION, "candidates": list(EMOTION6),
                "answer": sc["answer"], "qtype": "emotion",
                "evidence": {"segments": [], "boxes": [[0.0, sc["box"]]], "source_size": [size, size]},
                "meta": {"emotion_dist": sc["dist"], "cue_vad": sc["cue_vad"], "drawn_emotion": sc["drawn"],
                         "seed": int(seed), "size": size,
                         "reference_response": reference_response(sc["box"], size, sc["cue_vad"], sc["dist"],
                                                                  sc["answer"], k)},
            })
        path = os.path.join(out_dir, f"{split}.json")
        write_json(items, path)
        result[split] = path
        result["counts"][split] = {e: sum(it["answer"] == e for it in items) for e in EMOTION6}
    return result
