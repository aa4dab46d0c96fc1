"""Synthetic video world: coloured squares on a dark background, written as real MP4 files.

Each clip has ``n_frames`` frames at ``fps`` (frame ``i`` is shown at ``t = i / fps`` and covers
``[i / fps, (i + 1) / fps)``). Static question types (``color``, ``location``) show the same scene in every
frame; their evidence is the whole clip. Event and temporal types (``count``, ``direction``, ``order``) show
the squares only in a contiguous run of ``n_frames // 2`` frames (the evidence segment); the frames before and
after are empty background, so masking the evidence segment leaves nothing to answer from (and the masked clip
is the clip with the squares removed), masking the rest changes nothing, and reordering the frames changes
the pixels. Boxes are ``[x0, y0, x1, y1]`` in source pixels with exclusive ``x1``/``y1``.
Everything is deterministic given ``seed``.

A world with a prior to unlearn (``prior``): in the train split (and ``test_biased.json``) the answer
correlates with something other than the pixels, while ``test.json`` is debiased (balanced answers, phrasing
drawn independently of the answer):

- ``frequent``: with probability ``prior_strength`` the gold is the question type's prior answer (the first
  value of its pool: red, left, 1, ...); otherwise a balanced draw among the other values;
- ``phrasing``: each answer value has its own wording of the question (``QUESTION_VARIANTS``); with probability
  ``prior_strength`` the question uses the gold's wording, otherwise a uniformly drawn one;
- ``tint``: each answer value has its own background tint (``TINTS``, the i-th value of the pool the i-th tint);
  with probability ``prior_strength`` the clip's background is the gold's tint, otherwise a uniformly drawn one
  (``meta["tint"]``). The prior is in the pixels, so a null canvas (no background at all) carries none of it.
"""
from __future__ import annotations

import json
import os
from fractions import Fraction
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

PALETTE: Dict[str, Tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 190, 60),
    "blue": (40, 80, 230),
    "yellow": (230, 210, 40),
}
BACKGROUND = (16, 16, 16)
TINTS = [(56, 16, 16), (16, 52, 16), (16, 16, 64), (48, 48, 16)]  # prior="tint": dark, far apart, far from PALETTE
DIRECTIONS = ["left", "right", "up", "down"]
OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up"}
LOCATIONS = ["left", "right", "top", "bottom"]
COUNTS = ["1", "2", "3"]
QUESTIONS = {
    "color": "What colour is the square?",
    "direction": "Which way does the square move?",
    "order": "Which colour appears first?",
    "count": "How many squares are there?",
    "location": "Where is the square?",
}
QUESTION_VARIANTS = {  # prior="phrasing": wording i goes with the i-th value of the question type's pool
    "color": ["What colour is the square?", "Which colour is the square?", "What is the colour of the square?",
              "Name the colour of the square."],
    "direction": ["Which way does the square move?", "In which direction does the square move?",
                  "Where does the square go?", "Which direction is the square moving in?"],
    "order": ["Which colour appears first?", "Which colour is shown first?", "What colour comes first?",
              "Which colour is seen first?"],
    "count": ["How many squares are there?", "How many squares are shown?", "What is the number of squares?"],
    "location": ["Where is the square?", "In which part of the frame is the square?", "Where is the square placed?",
                 "Which side of the frame is the square on?"],
}
VIDEO_QTYPES = ("color", "direction", "order", "count", "location")
TEMPORAL_QTYPES = ("direction", "order")
EVENT_QTYPES = ("count",)  # shown in an evidence segment, like the temporal types, but order-free
PRIORS = ("frequent", "phrasing", "tint")
MARGIN = 2  # pixels kept free at the frame border

Obj = Tuple[List[int], str]  # (box, colour name)


# ---------------------------------------------------------------- geometry and drawing
def square_side(size: int) -> int:
    """Side of a square in a ``size`` x ``size`` frame (even, so yuv420p chroma stays clean)."""
    return max(4, (size // 4) // 2 * 2)


def _even(v: float) -> int:
    return int(round(v / 2.0)) * 2


def _even_in(rng: np.random.Generator, lo: int, hi: int) -> int:
    """A random even integer in ``[lo, hi]`` (``lo`` and ``hi`` rounded inward to even)."""
    lo2, hi2 = (lo + 1) // 2, hi // 2
    return 2 * int(rng.integers(lo2, max(lo2, hi2) + 1))


def _box(x: int, y: int, s: int) -> List[int]:
    return [int(x), int(y), int(x + s), int(y + s)]


def _overlaps(a: Sequence[int], b: Sequence[int], gap: int = MARGIN) -> bool:
    return not (a[2] + gap <= b[0] or b[2] + gap <= a[0] or a[3] + gap <= b[1] or b[3] + gap <= a[1])


def render(objs: Sequence[Obj], size: int, background: Sequence[int] = BACKGROUND) -> np.ndarray:
    """One ``uint8 [H, W, 3]`` frame with the given squares on ``background``."""
    img = np.empty((size, size, 3), dtype=np.uint8)
    img[:] = background
    for box, colour in objs:
        x0, y0, x1, y1 = box
        img[y0:y1, x0:x1] = PALETTE[colour]
    return img


def place_free(rng: np.random.Generator, size: int, s: int, taken: Sequence[Sequence[int]] = ()) -> List[int]:
    """A random square box anywhere in the frame that does not touch ``taken`` boxes."""
    for _ in range(1000):
        b = _box(_even_in(rng, MARGIN, size - s - MARGIN), _even_in(rng, MARGIN, size - s - MARGIN), s)
        if not any(_overlaps(b, t) for t in taken):
            return b
    raise RuntimeError(f"cannot place {len(taken) + 1} squares of side {s} in a {size}px frame")


def place_region(rng: np.random.Generator, size: int, s: int, where: str) -> List[int]:
    """A square in the ``left``/``right``/``top``/``bottom`` part of the frame, centred on the other axis."""
    if where not in LOCATIONS:
        raise ValueError(f"unknown location {where!r}; known: {', '.join(LOCATIONS)}")
    j = max(2, size // 14)
    c = (size - s) // 2
    near, far = MARGIN, size - s - MARGIN
    along = (near, near + j) if where in ("left", "top") else (far - j, far)
    a = _even_in(rng, *along)
    b = _even_in(rng, c - j, c + j)
    return _box(a, b, s) if where in ("left", "right") else _box(b, a, s)


# ---------------------------------------------------------------- balancing and candidates
class Balancer:
    """Balances gold values (shuffled cycles per question type) and gold letter positions (per candidate count)."""

    def __init__(self, rng: np.random.Generator, fixed_options: bool = False, frequent: float = 0.0):
        self.rng = rng
        self.fixed_options = fixed_options
        self.frequent = float(frequent)  # prior="frequent": P(gold = the pool's first value)
        self.cycles: Dict[str, List[str]] = {}
        self.pos_counts: Dict[int, List[int]] = {}

    def value(self, key: str, values: Sequence[str]) -> str:
        if self.frequent > 0:
            if float(self.rng.random()) < self.frequent:
                return values[0]
            key, values = key + "/rest", list(values[1:])
        cyc = self.cycles.setdefault(key, [])
        if not cyc:
            cyc.extend(values[i] for i in self.rng.permutation(len(values)))
        return cyc.pop()

    def candidates(self, gold: str, pool: Sequence[str], must: Sequence[str] = (), kmax: int = 4) -> List[str]:
        """2..kmax candidates from ``pool`` containing ``gold`` and ``must``; gold placed at the least-used letter.

        With ``fixed_options`` the candidates are the whole pool in its canonical order (a letter always means
        the same value: a classification task a tiny model learns in minutes; used by the demo)."""
        if self.fixed_options:
            return list(pool)
        kmin = max(2, 1 + len(set(must) - {gold}))
        k = int(self.rng.integers(kmin, min(kmax, len(pool)) + 1))
        required = [m for m in dict.fromkeys(must) if m != gold]
        rest = [p for p in pool if p != gold and p not in required]
        extra = [rest[i] for i in self.rng.permutation(len(rest))[: k - 1 - len(required)]]
        others = required + extra
        others = [others[i] for i in self.rng.permutation(len(others))]
        counts = self.pos_counts.setdefault(k, [0] * k)
        low = min(counts)
        choices = [i for i, c in enumerate(counts) if c == low]
        pos = choices[int(self.rng.integers(len(choices)))]
        counts[pos] += 1
        return others[:pos] + [gold] + others[pos:]


# ---------------------------------------------------------------- scenes
def static_scene(qtype: str, rng: np.random.Generator, bal: Balancer, size: int) -> dict:
    """One still scene for ``color`` / ``location`` / ``count`` (shared with the image world)."""
    s = square_side(size)
    if qtype == "color":
        gold = bal.value(qtype, list(PALETTE))
        objs = [(place_free(rng, size, s), gold)]
        cands = bal.candidates(gold, list(PALETTE))
        meta = {"colors": [gold]}
    elif qtype == "location":
        gold = bal.value(qtype, LOCATIONS)
        colour = list(PALETTE)[int(rng.integers(len(PALETTE)))]
        objs = [(place_region(rng, size, s, gold), colour)]
        cands = bal.candidates(gold, LOCATIONS)
        meta = {"colors": [colour], "location": gold}
    elif qtype == "count":
        gold = bal.value(qtype, COUNTS)
        boxes: List[List[int]] = []
        for _ in range(int(gold)):
            boxes.append(place_free(rng, size, s, boxes))
        names = list(PALETTE)
        objs = [(b, names[int(rng.integers(len(names)))]) for b in boxes]
        cands = bal.candidates(gold, COUNTS)
        meta = {"colors": [c for _, c in objs], "count": int(gold)}
    else:
        raise ValueError(f"unknown static question type {qtype!r}; known: color, location, count")
    meta.update({"temporal": False, "square": s})
    return {"objs": objs, "answer": gold, "candidates": cands, "meta": meta}


def _temporal_scene(qtype: str, rng: np.random.Generator, bal: Balancer, size: int, n: int):
    """Per-frame objects for ``direction`` / ``order`` / ``count``; squares visible only in frames
    ``[lead, lead + L)``."""
    s = square_side(size)
    L = n // 2
    lead = int(rng.integers(1, n - L))  # at least one empty frame before and after
    frames: List[List[Obj]] = [[] for _ in range(n)]
    colours = list(PALETTE)
    if qtype == "count":
        sc = static_scene("count", rng, bal, size)
        for k in range(L):
            frames[lead + k] = list(sc["objs"])
        meta = dict(sc["meta"], reversed_answer=sc["answer"])
        meta.update({"temporal": False, "event": True})
        return frames, sc["answer"], sc["candidates"], meta, (lead, lead + L - 1)
    if qtype == "direction":
        gold = bal.value(qtype, DIRECTIONS)
        colour = colours[int(rng.integers(len(colours)))]
        span = size - s - 2 * MARGIN
        dist = _even_in(rng, max(2, size // 3), span)
        a = _even_in(rng, MARGIN, size - s - MARGIN - dist)
        cross = _even_in(rng, MARGIN, size - s - MARGIN)
        for k in range(L):
            p = a + _even(dist * k / (L - 1))
            if gold in ("left", "up"):
                p = 2 * a + dist - p
            frames[lead + k] = [(_box(p, cross, s) if gold in ("left", "right") else _box(cross, p, s), colour)]
        cands = bal.candidates(gold, DIRECTIONS, must=[OPPOSITE[gold]])
        meta = {"colors": [colour], "direction": gold, "axis": "x" if gold in ("left", "right") else "y",
                "distance": dist, "reversed_answer": OPPOSITE[gold]}
    elif qtype == "order":
        gold = bal.value(qtype, colours)
        second = [c for c in colours if c != gold][int(rng.integers(len(colours) - 1))]
        b1 = place_free(rng, size, s)
        b2 = place_free(rng, size, s, [b1])
        h = L // 2
        for k in range(L):
            frames[lead + k] = [(b1, gold)] if k < h else [(b2, second)]
        cands = bal.candidates(gold, colours, must=[second])
        meta = {"colors": [gold, second], "order": [gold, second], "reversed_answer": second,
                "spans_frames": [[lead, lead + h - 1], [lead + h, lead + L - 1]]}
    else:
        raise ValueError(f"unknown temporal question type {qtype!r}; known: direction, order")
    meta.update({"temporal": True, "square": s})
    return frames, gold, cands, meta, (lead, lead + L - 1)


def video_scene(qtype: str, rng: np.random.Generator, bal: Balancer, size: int, n: int, fps: float,
                tint: Optional[Tuple[np.random.Generator, float]] = None) -> dict:
    """Frames ``uint8 [T, H, W, 3]`` plus the annotation fields of one clip. ``tint = (rng, strength)``: the
    background is a ``TINTS`` entry tied to the gold with that strength (``prior_index``; ``meta["tint"]``)."""
    if qtype in TEMPORAL_QTYPES or qtype in EVENT_QTYPES:
        frames, gold, cands, meta, (f0, f1) = _temporal_scene(qtype, rng, bal, size, n)
    else:
        sc = static_scene(qtype, rng, bal, size)
        frames, gold, cands, meta = [list(sc["objs"]) for _ in range(n)], sc["answer"], sc["candidates"], sc["meta"]
        meta["reversed_answer"] = gold
        f0, f1 = 0, n - 1
    if "spans_frames" in meta:  # order: when each square is on screen, in seconds
        meta["spans"] = [[_t(a, fps), _t(b + 1, fps)] for a, b in meta["spans_frames"]]
    meta["evidence_frames"] = [f0, f1]
    evidence = {
        "segments": [[_t(f0, fps), _t(f1 + 1, fps)]],
        "boxes": [[_t(i, fps), list(box)] for i, objs in enumerate(frames) for box, _ in objs],
        "source_size": [size, size],
    }
    background = BACKGROUND
    if tint is not None:
        meta["tint"] = prior_index(qtype, gold, tint[0], tint[1], len(TINTS))
        background = TINTS[meta["tint"]]
    pixels = np.stack([render(objs, size, background) for objs in frames])
    return {"pixels": pixels, "answer": gold, "candidates": cands, "meta": meta, "evidence": evidence,
            "frame_objs": frames}  # the scene itself: tests re-render it without the target


def _t(i: int, fps: float) -> float:
    return round(i / fps, 6)


# ---------------------------------------------------------------- MP4 writing
def available_codec() -> str:
    """``libx264`` when this PyAV build has it, else ``mpeg4``."""
    import av

    try:
        av.codec.Codec("libx264", "w")
        return "libx264"
    except Exception:  # noqa: BLE001 - PyAV raises different types across versions
        return "mpeg4"


def write_mp4(path: str, frames: np.ndarray, fps: float, codec: Optional[str] = None) -> str:
    """Write ``uint8 [T, H, W, 3]`` RGB frames to ``path`` (yuv420p, high quality); returns the codec used."""
    import av

    codec = codec or available_codec()
    rate = Fraction(fps).limit_denominator(1000)
    t, h, w, _ = frames.shape
    with av.open(path, mode="w", format="mp4") as container:
        stream = container.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.codec_context.thread_count = 1  # deterministic output
        if codec == "libx264":
            stream.options = {"crf": "6", "preset": "medium", "x264-params": "bframes=0:threads=1"}
        else:
            stream.bit_rate = 8_000_000
            stream.options = {"qmin": "1", "qmax": "3", "bf": "0"}
        for i in range(t):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(frames[i]), format="rgb24")
            frame.pts = i
            frame.time_base = 1 / rate
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return codec


# ---------------------------------------------------------------- the world
def check_world_args(size: int, n_frames: int, fps: float) -> None:
    if size < 24 or size % 2:
        raise ValueError(f"size must be an even number >= 24, got {size}")
    if n_frames < 4:
        raise ValueError(f"n_frames must be >= 4 (temporal clips need empty frames around them), got {n_frames}")
    if fps <= 0:
        raise ValueError(f"fps must be > 0, got {fps}")


def resolve_qtypes(qtypes: Optional[Sequence[str]], known: Sequence[str]) -> List[str]:
    qs = list(qtypes) if qtypes else list(known)
    bad = [q for q in qs if q not in known]
    if bad:
        raise ValueError(f"unknown question type(s) {bad}; known: {', '.join(known)}")
    return qs


def split_rng(seed: int, split: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), {"train": 0, "test": 1, "test_biased": 2}[split]]))


def _pool(qtype: str) -> List[str]:
    return {"color": list(PALETTE), "direction": DIRECTIONS, "order": list(PALETTE), "count": COUNTS,
            "location": LOCATIONS}[qtype]


def prior_index(qtype: str, gold: str, rng: np.random.Generator, strength: float, k: int) -> int:
    """Which of ``k`` cues (wordings, tints) a clip gets: the gold's own (its pool index mod ``k``) with probability
    ``strength``, else a uniform draw (``strength=0``: independent of the answer)."""
    if float(rng.random()) < strength:
        return _pool(qtype).index(gold) % k
    return int(rng.integers(k))


def phrase(qtype: str, gold: str, rng: np.random.Generator, strength: float) -> Tuple[str, int]:
    """prior="phrasing": the question's wording and its index (``prior_index`` over ``QUESTION_VARIANTS``)."""
    variants = QUESTION_VARIANTS[qtype]
    k = prior_index(qtype, gold, rng, strength, len(variants))
    return variants[k], k


def write_json(items: List[dict], path: str) -> None:
    with open(path, "w") as f:
        json.dump(items, f, indent=1)
        f.write("\n")


def make_video_world(
    out_dir: str,
    n_train: int,
    n_test: int,
    seed: int = 0,
    size: int = 56,
    n_frames: int = 8,
    fps: float = 4,
    qtypes: Optional[Sequence[str]] = None,
    codec: Optional[str] = None,
    fixed_options: bool = False,
    prior: Optional[str] = None,
    prior_strength: float = 0.8,
) -> dict:
    """Write ``out_dir/videos/*.mp4``, ``out_dir/train.json`` and ``out_dir/test.json``.

    Question types cycle over ``qtypes`` (default: all of ``VIDEO_QTYPES``). ``fixed_options``: every
    question lists its whole answer pool in a fixed order (see ``Balancer.candidates``). ``prior``
    (``frequent`` | ``phrasing`` | ``tint``, module docstring): the train split leans on it with ``prior_strength``,
    ``test.json`` is debiased and ``test_biased.json`` (as many clips as the test split) keeps the train
    split's prior. Returns the paths, the codec and per-split question-type counts.
    """
    check_world_args(size, n_frames, fps)
    qs = resolve_qtypes(qtypes, VIDEO_QTYPES)
    if prior is not None and prior not in PRIORS:
        raise ValueError(f"unknown prior {prior!r}; known: {', '.join(PRIORS)}")
    if prior is not None and not 0.0 < prior_strength <= 1.0:
        raise ValueError(f"prior_strength must be in (0, 1], got {prior_strength}")
    codec = codec or available_codec()
    os.makedirs(os.path.join(out_dir, "videos"), exist_ok=True)
    result = {"out_dir": out_dir, "codec": codec, "qtypes": qs, "counts": {}, "prior": prior}
    splits = [("train", n_train, True), ("test", n_test, False)] + ([("test_biased", n_test, True)] if prior else [])
    for split, n, biased in splits:
        rng = split_rng(seed, split)
        strength = prior_strength if (prior and biased) else 0.0
        bal = Balancer(rng, fixed_options, frequent=strength if prior == "frequent" else 0.0)
        items = []
        for i in range(n):
            qtype = qs[i % len(qs)]
            sc = video_scene(qtype, rng, bal, size, n_frames, fps, tint=(rng, strength) if prior == "tint" else None)
            rel = f"videos/{split}_{i:05d}.mp4"
            write_mp4(os.path.join(out_dir, rel), sc["pixels"], fps, codec)
            meta = dict(sc["meta"], seed=int(seed), size=size, n_frames=n_frames, fps=fps)
            question = QUESTIONS[qtype]
            if prior == "phrasing":
                question, meta["phrasing"] = phrase(qtype, sc["answer"], rng, strength)
            if prior:
                meta["prior_answer"] = _pool(qtype)[0] if prior == "frequent" else None
            items.append({
                "id": f"{split}-{i:05d}", "video": rel, "question": question,
                "candidates": sc["candidates"], "answer": sc["answer"], "qtype": qtype,
                "evidence": sc["evidence"], "meta": meta,
            })
        path = os.path.join(out_dir, f"{split}.json")
        write_json(items, path)
        result[split] = path
        result["counts"][split] = {q: sum(it["qtype"] == q for it in items) for q in qs}
    return result
