"""The perception corpus of the tiny base (``mmrl base build``): what every synthetic world asks, drawn with the
worlds' own renderers, as one annotation file per split (``train.json``, ``test.json``; PNGs and MP4s).

Question types (``qtype``), each a multiple choice unless said otherwise:

- ``color``, ``location``, ``count``: the still scenes of the video/image worlds (``synth_video.static_scene``), as
  an image or a clip of identical frames (``count`` clips show the squares in an evidence segment only);
- ``direction``, ``order``: the video world's temporal clips (``synth_video.video_scene``);
- ``shape``: the VHOP world's main object (``synth_vhop.render``) in a random scene; ``emblem``: the shape or the
  colour of the emblem in its top-right plate;
- ``time``: the seek world's clip (``synth_seek.seek_clip``: a full-frame flash and the grey time marker) at 2 fps,
  the flash on one whole second; "When does the screen flash?" with candidates such as ``1 to 2 s``;
- ``null``: a uniform canvas (random grey level, image or clip) asked one of the other questions, with
  ``ABSTAIN`` among the candidates and as the answer; answerable items also list ``ABSTAIN`` with probability
  ``abstain_option_rate``, so that its presence gives nothing away;
- ``caption`` (``answer_type: text``): "a red square on the left" (image) or "a red square moves up" (clip);
- ``yesno``: "Is the square red?" / "Is the square on the left?" with ``Yes``/``No``, balanced.

Fixed options (``fixed_options``, both splits): every choice lists its whole pool in the pool's canonical order
(``Balancer(fixed_options=True)``, as the demo's world), ``cannot be determined`` last where it is listed, so a
letter always names the same value of a question: seeing is then enough to answer. With shuffled options the letter
also needs the seen value matched against the option list, which the tiny base had not learned after 800 steps
while it named some values directly (docs/base_model.md, "what we tried").

Direct answers (train split only, ``direct_rate``): each choice item is, with that probability, also written a
second time over the same media as an open item without options whose answer is the value itself (``red``,
``1 to 2 s``, ``cannot be determined``; ``answer_type: text``, ``meta.direct``). Naming the value is the perception
alone; the letter of a shuffled option list also needs the value matched against the options, which a tiny model
learns only once it sees (docs/base_model.md, "what we tried"). The held-out split keeps the letters.

Clips have ``n_frames`` frames at 4 fps (``time``: 2 fps). Counts per type follow the ``mix`` weights (largest
remainders), in a seeded random order. Deterministic given ``seed``; train and test come from independent streams.
"""
from __future__ import annotations

import os
import random
from typing import Dict, List, Optional, Sequence

import numpy as np
from PIL import Image

from mmrl.data.synth_seek import seek_clip
from mmrl.data.synth_video import (
    DIRECTIONS,
    LOCATIONS,
    PALETTE,
    QUESTIONS,
    Balancer,
    available_codec,
    render,
    split_rng,
    static_scene,
    video_scene,
    write_json,
    write_mp4,
)
from mmrl.data.synth_vhop import GROUNDS, OBJECT_COLOURS, SCENE_COLOURS, SHAPES
from mmrl.data.synth_vhop import render as render_vhop

ABSTAIN = "cannot be determined"
CLIP_FPS, TIME_FPS = 4.0, 2.0
EMBLEM_COLOURS = ("red", "green", "blue", "yellow", "magenta", "cyan")
CAPTION_QUESTION = "Describe the {media} in a few words."
TIME_QUESTION = "When does the screen flash?"
SHAPE_QUESTION = "What shape is the object?"
EMBLEM_QUESTIONS = {"shape": "What shape is the emblem?", "colour": "What colour is the emblem?"}
NULL_POOLS = {"color": list(PALETTE), "location": LOCATIONS, "count": ["1", "2", "3"], "direction": DIRECTIONS,
              "order": list(PALETTE), "shape": list(SHAPES)}


def allocate(n: int, mix: Dict[str, float]) -> Dict[str, int]:
    """Items per type: ``n * w / sum(w)`` rounded by largest remainders (ties to the sorted name)."""
    names = sorted(k for k, w in mix.items() if w > 0)
    total = sum(mix[k] for k in names)
    raw = {k: n * mix[k] / total for k in names}
    out = {k: int(raw[k]) for k in names}
    for k in sorted(names, key=lambda k: (-(raw[k] - out[k]), k))[: n - sum(out.values())]:
        out[k] += 1
    return out


def time_slot(k: int) -> str:
    return f"{k} to {k + 1} s"


class _Item:
    """One drawn item before it is written: media (an image or frames), its fps, and the annotation fields."""

    def __init__(self, pixels: np.ndarray, question: str, answer: str, candidates: Optional[List[str]],
                 meta: dict, fps: float = CLIP_FPS, answer_type: str = "choice"):
        self.pixels, self.question, self.answer, self.candidates = pixels, question, answer, candidates
        self.meta, self.fps, self.answer_type = meta, fps, answer_type


def _frames(img: np.ndarray, n: int) -> np.ndarray:
    return np.repeat(img[None], n, axis=0)


def _still(qtype: str, rng, bal, size, n, video: bool) -> _Item:
    if video and qtype == "count":  # the event clip: squares only inside the evidence segment
        sc = video_scene("count", rng, bal, size, n, CLIP_FPS)
        return _Item(sc["pixels"], QUESTIONS[qtype], sc["answer"], sc["candidates"], {"event": True})
    sc = static_scene(qtype, rng, bal, size)
    img = render(sc["objs"], size)
    return _Item(_frames(img, n) if video else img, QUESTIONS[qtype], sc["answer"], sc["candidates"], {})


def _temporal(qtype: str, rng, bal, size, n) -> _Item:
    sc = video_scene(qtype, rng, bal, size, n, CLIP_FPS)
    return _Item(sc["pixels"], QUESTIONS[qtype], sc["answer"], sc["candidates"], {})


def _vhop_image(rng, main, emblem, size) -> np.ndarray:
    scene = (list(SCENE_COLOURS)[int(rng.integers(len(SCENE_COLOURS)))], GROUNDS[int(rng.integers(len(GROUNDS)))])
    return np.asarray(render_vhop(main, scene, emblem, size, random.Random(int(rng.integers(2**31)))))


def _shape(rng, bal, size, n) -> _Item:
    gold = bal.value("shape", list(SHAPES))
    main = (list(OBJECT_COLOURS)[int(rng.integers(len(OBJECT_COLOURS)))], gold)
    return _Item(_vhop_image(rng, main, None, size), SHAPE_QUESTION, gold, bal.candidates(gold, list(SHAPES)), {})


def _emblem(rng, bal, size, n) -> _Item:
    what = ("shape", "colour")[int(rng.integers(2))]
    pool = list(SHAPES) if what == "shape" else list(EMBLEM_COLOURS)
    gold = bal.value(f"emblem/{what}", pool)
    other_shape = SHAPES[int(rng.integers(len(SHAPES)))]
    other_colour = EMBLEM_COLOURS[int(rng.integers(len(EMBLEM_COLOURS)))]
    emblem = (other_colour, gold) if what == "shape" else (gold, other_shape)
    main = (list(OBJECT_COLOURS)[int(rng.integers(len(OBJECT_COLOURS)))], SHAPES[int(rng.integers(len(SHAPES)))])
    return _Item(_vhop_image(rng, main, emblem, size), EMBLEM_QUESTIONS[what], gold, bal.candidates(gold, pool),
                 {"asked": what})


def _time(rng, bal, size, n) -> _Item:
    slots = [time_slot(k) for k in range(n // 2)]
    gold = bal.value("time", slots)
    k = slots.index(gold)
    colour = list(PALETTE)[int(rng.integers(len(PALETTE)))]
    return _Item(seek_clip(colour, 2 * k, 2, n, size), TIME_QUESTION, gold, bal.candidates(gold, slots),
                 {"flash": [float(k), float(k + 1)], "colour": colour}, fps=TIME_FPS)


def _null(rng, bal, size, n, video: bool) -> _Item:
    qtype = list(NULL_POOLS)[int(rng.integers(len(NULL_POOLS)))]
    if qtype in ("direction", "order"):
        video = True
    pool = NULL_POOLS[qtype]
    shown = bal.candidates(pool[int(rng.integers(len(pool)))], pool)
    pos = len(shown) if bal.fixed_options else int(rng.integers(len(shown) + 1))
    level = int(rng.integers(256))
    img = np.full((size, size, 3), level, dtype=np.uint8)
    question = SHAPE_QUESTION if qtype == "shape" else QUESTIONS[qtype]
    return _Item(_frames(img, n) if video else img, question, ABSTAIN, shown[:pos] + [ABSTAIN] + shown[pos:],
                 {"asked": qtype, "canvas": level})


def _caption(rng, bal, size, n, video: bool) -> _Item:
    if video:
        sc = video_scene("direction", rng, bal, size, n, CLIP_FPS)
        colour = sc["meta"]["colors"][0]
        text = f"a {colour} square moves {sc['answer']}"
        return _Item(sc["pixels"], CAPTION_QUESTION.format(media="video"), text, None, {}, answer_type="text")
    sc = static_scene("location", rng, bal, size)
    colour = sc["meta"]["colors"][0]
    text = f"a {colour} square on the {sc['answer']}"
    return _Item(render(sc["objs"], size), CAPTION_QUESTION.format(media="image"), text, None, {}, answer_type="text")


def _yesno(rng, bal, size, n, video: bool) -> _Item:
    asked = ("color", "location")[int(rng.integers(2))]
    sc = static_scene(asked, rng, bal, size)
    gold = bal.value("yesno", ["Yes", "No"])
    pool = list(PALETTE) if asked == "color" else LOCATIONS
    value = sc["answer"] if gold == "Yes" else [v for v in pool if v != sc["answer"]][int(rng.integers(len(pool) - 1))]
    question = f"Is the square {value}?" if asked == "color" else f"Is the square on the {value}?"
    img = render(sc["objs"], size)
    return _Item(_frames(img, n) if video else img, question, gold, ["Yes", "No"], {"asked": asked})


def draw_item(qtype: str, rng: np.random.Generator, bal: Balancer, size: int, n: int, video: bool) -> _Item:
    """One item of ``qtype``; ``video`` picks a clip over an image where the type has both."""
    if qtype in ("color", "location", "count"):
        return _still(qtype, rng, bal, size, n, video)
    if qtype in ("direction", "order"):
        return _temporal(qtype, rng, bal, size, n)
    if qtype == "shape":
        return _shape(rng, bal, size, n)
    if qtype == "emblem":
        return _emblem(rng, bal, size, n)
    if qtype == "time":
        return _time(rng, bal, size, n)
    if qtype == "null":
        return _null(rng, bal, size, n, video)
    if qtype == "caption":
        return _caption(rng, bal, size, n, video)
    if qtype == "yesno":
        return _yesno(rng, bal, size, n, video)
    raise ValueError(f"unknown perception question type {qtype!r}")


def _with_abstain_option(item: _Item, rng: np.random.Generator, rate: float, fixed: bool = False) -> None:
    if item.answer_type == "choice" and item.answer != ABSTAIN and item.candidates != ["Yes", "No"] \
            and float(rng.random()) < rate:
        pos = len(item.candidates) if fixed else int(rng.integers(len(item.candidates) + 1))
        item.candidates = item.candidates[:pos] + [ABSTAIN] + item.candidates[pos:]


def direct_twin(entry: dict) -> dict:
    """The direct-answer twin of a choice item: same media and question, no options, the value as an open answer."""
    twin = {k: v for k, v in entry.items() if k != "candidates"}
    twin.update(id=entry["id"] + "-direct", answer_type="text", meta=dict(entry["meta"], direct=True))
    return twin


def make_perception_corpus(out_dir: str, n_train: int, n_test: int, mix: Dict[str, float], seed: int = 0,
                           size: int = 112, n_frames: int = 8, abstain_option_rate: float = 0.25,
                           codec: Optional[str] = None, direct_rate: float = 0.0, fixed_options: bool = False) -> dict:
    """Write ``out_dir/{images,videos}/``, ``train.json`` and ``test.json``; returns the paths and per-type counts
    (of drawn items; ``n_direct``: the train split's direct-answer twins, drawn from their own seeded stream)."""
    codec = codec or available_codec()
    for sub in ("images", "videos"):
        os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
    result = {"out_dir": out_dir, "counts": {}}
    for split, n in (("train", n_train), ("test", n_test)):
        rng = split_rng(seed, split)
        bal = Balancer(rng, fixed_options=fixed_options)
        alloc = allocate(n, mix)
        order = [q for q in sorted(alloc) for _ in range(alloc[q])]
        order = [order[i] for i in rng.permutation(len(order))]
        seen: Dict[str, int] = {}
        items = []
        twins = np.random.default_rng(np.random.SeedSequence([int(seed), 7]))  # own stream: items do not move
        for i, qtype in enumerate(order):
            k = seen[qtype] = seen.get(qtype, -1) + 1
            it = draw_item(qtype, rng, bal, size, n_frames, video=bool(k % 2))
            _with_abstain_option(it, rng, abstain_option_rate, fixed_options)
            entry = {"id": f"{split}-{i:05d}", "question": it.question, "answer": it.answer, "qtype": qtype}
            if it.pixels.ndim == 4:
                rel = f"videos/{split}_{i:05d}.mp4"
                write_mp4(os.path.join(out_dir, rel), it.pixels, it.fps, codec)
                entry["video"] = rel
            else:
                rel = f"images/{split}_{i:05d}.png"
                Image.fromarray(it.pixels).save(os.path.join(out_dir, rel))
                entry["image"] = rel
            if it.candidates is not None:
                entry["candidates"] = it.candidates
            if it.answer_type != "choice":
                entry["answer_type"] = it.answer_type
            entry["meta"] = dict(it.meta, media="video" if "video" in entry else "image", seed=int(seed))
            items.append(entry)
            if split == "train" and entry.get("candidates") and it.answer_type == "choice" \
                    and float(twins.random()) < direct_rate:
                items.append(direct_twin(entry))
        path = os.path.join(out_dir, f"{split}.json")
        write_json(items, path)
        result[split] = path
        result["counts"][split] = dict(sorted(alloc.items()))
        if split == "train":
            result["n_direct"] = sum(1 for e in items if e["meta"].get("direct"))
    return result


def chance(item: dict) -> float:
    """Chance accuracy of one annotation item: 1 / candidates for a choice, 0 for an open caption."""
    return 1.0 / len(item["candidates"]) if item.get("candidates") and item.get("answer_type", "choice") == "choice" \
        else 0.0


def chance_per_type(items: Sequence[dict]) -> Dict[str, float]:
    out: Dict[str, List[float]] = {}
    for it in items:
        out.setdefault(it["qtype"], []).append(chance(it))
    return {k: sum(v) / len(v) for k, v in sorted(out.items())}

