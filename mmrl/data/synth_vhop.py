"""Synthetic VHOP world: an image corpus whose images link visually, and multi-hop queries at levels L1-L5.

Every image shows a *scene* (background colour x ground: plain, horizon, stripes, dots) and a large *main object*
(shape x colour); all but the last image of a chain also carry an *emblem*: a small object on a black plate in the
top-right corner. A link ``a -> b``: the emblem of ``a`` is the main object of ``b`` and the scene continues
(``b`` has ``a``'s scene). Within a scene each main object appears at most once, so every emblem has exactly one
continuation: the chain from a start image is unique and ends at the first image without an emblem.

A query of level ``L`` describes only the chain's first image (its main object and scene; ``exact`` words, or
``fuzzy`` synonyms and phrasing) and asks for the end of the chain; its gold ``chain`` has ``L`` images
(``hops = L``: L1 is the described image itself). The images after the first are named nowhere in the query, so a
single-step top-k from the query alone cannot find them beyond chance; following emblems can.

Distractors look like a hop and lead nowhere: ``distractors`` branches per query, each at a hop ``j`` of the
chain, an image with the main object hop ``j`` has (the emblem of hop ``j - 1``; for ``j = 0`` the start's main
object) in another scene; half of them carry an emblem to one more image in that scene. Each branch ends in a
*dead end* (an image without an emblem, in a scene the query did not name). The files follow
``mmrl.data.vhop_format``; item ``meta`` holds ``main``, ``emblem``, ``scene``, ``role``. Deterministic given
``seed``; the test split is a different corpus (held out).
"""
from __future__ import annotations

import os
import random
from typing import Dict, List, Optional, Sequence, Tuple

from PIL import Image, ImageDraw

from mmrl.data.vhop_format import write_corpus, write_queries

SHAPES = ("circle", "square", "triangle", "diamond", "cross")
OBJECT_COLOURS = {"red": (230, 40, 40), "green": (40, 200, 60), "blue": (60, 100, 250), "yellow": (245, 225, 40),
                  "magenta": (225, 50, 225), "cyan": (40, 225, 235), "orange": (250, 140, 20), "white": (245, 245, 245),
                  "pink": (255, 160, 200), "lime": (175, 255, 90), "violet": (150, 90, 255), "sky": (140, 205, 255)}
SCENE_COLOURS = {"navy": (20, 25, 80), "maroon": (85, 20, 25), "olive": (75, 75, 20), "teal": (15, 75, 75),
                 "plum": (65, 25, 75), "grey": (62, 62, 62), "forest": (20, 60, 25), "brown": (95, 58, 22)}
GROUNDS = ("plain", "horizon", "stripes", "dots")
LEVELS = (1, 2, 3, 4, 5)

SYNONYMS = {
    "red": ("crimson", "scarlet"), "green": ("emerald", "grass-green"), "blue": ("azure", "cobalt"),
    "yellow": ("golden", "lemon"), "magenta": ("fuchsia", "pink-purple"), "cyan": ("aqua", "turquoise"),
    "orange": ("amber", "tangerine"), "white": ("snowy", "ivory"), "pink": ("rosy", "blush"),
    "lime": ("chartreuse", "lime-green"), "violet": ("lilac", "lavender"), "sky": ("sky-blue", "pale blue"),
    "circle": ("disc", "round shape"), "square": ("box", "block"), "triangle": ("wedge", "three-sided shape"),
    "diamond": ("rhombus", "lozenge"), "cross": ("plus sign", "cross mark"),
    "navy": ("midnight", "dark blue"), "maroon": ("wine", "dark red"), "olive": ("khaki", "dark olive"),
    "teal": ("sea-green", "dark teal"), "plum": ("aubergine", "dark purple"), "grey": ("slate", "charcoal"),
    "forest": ("pine", "dark green"), "brown": ("chocolate", "earthy brown"),
}
FUZZY_GROUND = {"plain": ("bare", "empty"), "horizon": ("with a low horizon", "with a lighter ground"),
                "stripes": ("striped", "banded"), "dots": ("spotted", "speckled")}

Main = Tuple[str, str]  # (colour, shape)
Scene = Tuple[str, str]  # (background colour, ground)


def scene_phrase(scene: Scene) -> str:
    colour, ground = scene
    return {"plain": f"the plain {colour} scene", "horizon": f"the {colour} scene with a horizon",
            "stripes": f"the striped {colour} scene", "dots": f"the dotted {colour} scene"}[ground]


def exact_query(main: Main, scene: Scene) -> str:
    return (f"Start at the {main[0]} {main[1]} in {scene_phrase(scene)}. Follow the emblems from image to image "
            f"and find the last image of the chain.")


def fuzzy_query(main: Main, scene: Scene, rng: random.Random) -> str:
    c, s = rng.choice(SYNONYMS[main[0]]), rng.choice(SYNONYMS[main[1]])
    bg, ground = rng.choice(SYNONYMS[scene[0]]), rng.choice(FUZZY_GROUND[scene[1]])
    place = f"{ground} {bg} setting" if scene[1] != "horizon" else f"{bg} setting {ground}"
    place = ("an " if place[0] in "aeiou" else "a ") + place
    return rng.choice((f"There is a {c} {s} in {place}; trace where its little badges lead and show the final picture.",
                       f"Begin with the {c} {s} set in {place}, then keep following the small corner marks to the end.",
                       f"From a {c} {s} in {place}, chase the corner badges until the trail stops."))


def _shape(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, fill) -> None:
    if shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif shape == "square":
        a = r * 0.85
        draw.rectangle([cx - a, cy - a, cx + a, cy + a], fill=fill)
    elif shape == "triangle":
        draw.polygon([(cx, cy - r), (cx + r, cy + r * 0.85), (cx - r, cy + r * 0.85)], fill=fill)
    elif shape == "diamond":
        draw.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=fill)
    else:  # cross
        t = r * 0.32
        draw.rectangle([cx - r, cy - t, cx + r, cy + t], fill=fill)
        draw.rectangle([cx - t, cy - r, cx + t, cy + r], fill=fill)


def render(main: Main, scene: Scene, emblem: Optional[Main], size: int, rng: random.Random,
           emblem_scale: float = 0.28) -> Image.Image:
    """One corpus image: the scene, the main object (slightly jittered) and, if any, the emblem plate (a square of
    side ``emblem_scale * size`` in the top-right corner)."""
    bg = SCENE_COLOURS[scene[0]]
    light = tuple(min(255, int(v * 1.7) + 25) for v in bg)
    im = Image.new("RGB", (size, size), bg)
    d = ImageDraw.Draw(im)
    if scene[1] == "horizon":
        d.rectangle([0, int(size * 0.66), size, size], fill=light)
    elif scene[1] == "stripes":
        w = max(2, size // 8)
        for x in range(0, size, 2 * w):
            d.rectangle([x, 0, x + w - 1, size], fill=light)
    elif scene[1] == "dots":
        step, r = max(6, size // 6), max(1, size // 28)
        for y in range(step // 2, size, step):
            for x in range(step // 2, size, step):
                d.ellipse([x - r, y - r, x + r, y + r], fill=light)
    j = size * 0.06
    cx, cy = size * 0.45 + rng.uniform(-j, j), size * 0.55 + rng.uniform(-j, j)
    _shape(d, main[1], cx, cy, size * rng.uniform(0.22, 0.26), OBJECT_COLOURS[main[0]])
    if emblem is not None:
        p0, p1 = size * (0.98 - emblem_scale), size * 0.98
        d.rectangle([p0, size * 0.02, p1, size * 0.02 + (p1 - p0)], fill=(0, 0, 0))
        _shape(d, emblem[1], (p0 + p1) / 2, size * 0.02 + (p1 - p0) / 2, (p1 - p0) * 0.36, OBJECT_COLOURS[emblem[0]])
    return im


class _Slots:
    """Which (scene, main) pairs are taken: a main object appears at most once per scene. New images go to scenes
    already in use while they hold fewer than ``cap`` images (then to a fresh scene), so scenes are dense and the
    scene a query names narrows its later hops down little."""

    def __init__(self, rng: random.Random, cap: int, vocab: Tuple[int, int, int, int]):
        self.rng, self.cap = rng, cap
        colours, shapes, scene_colours, grounds = vocab
        self.mains: List[Main] = [(c, s) for c in list(OBJECT_COLOURS)[:colours] for s in SHAPES[:shapes]]
        self.scenes: List[Scene] = [(c, g) for c in list(SCENE_COLOURS)[:scene_colours] for g in GROUNDS[:grounds]]
        self.free: Dict[Scene, List[Main]] = {sc: list(self.mains) for sc in self.scenes}

    def take(self, scene: Scene, main: Main) -> None:
        self.free[scene].remove(main)

    def scene_with(self, n: int, exclude: Sequence[Scene] = (), main: Optional[Main] = None) -> Scene:
        ok = [sc for sc in self.scenes if sc not in exclude and len(self.free[sc]) >= n
              and (main is None or main in self.free[sc])]
        used = {sc: len(self.mains) - len(self.free[sc]) for sc in ok}
        pool = ([sc for sc in ok if 0 < used[sc] and used[sc] + n <= self.cap]
                or [sc for sc in ok if used[sc] == 0] or ok)
        if not ok:
            raise ValueError("too many queries: the world ran out of free (scene, object) slots "
                             f"({len(self.scenes)} scenes x {len(self.mains)} objects); use fewer queries or distractors")
        return self.rng.choice(pool)


def _split(out_dir: str, split: str, n: int, rng: random.Random, size: int, levels: Sequence[int],
           distractors: int, scene_cap: int, vocab: Tuple[int, int, int, int],
           emblem_scale: float) -> Tuple[str, str, dict]:
    slots, items, queries = _Slots(rng, scene_cap, vocab), [], []

    def add(main, scene, emblem, role, qid, hop=None) -> int:
        slots.take(scene, main)
        items.append({"main": main, "scene": scene, "emblem": emblem, "role": role, "query": qid, "hop": hop})
        return len(items) - 1

    for qi in range(n):
        level, qid = levels[qi % len(levels)], f"{split}-q{qi:04d}"
        kind = "exact" if (qi // len(levels)) % 2 == 0 else "fuzzy"
        scene = slots.scene_with(level)
        mains = rng.sample(slots.free[scene], level)
        chain = [add(m, scene, mains[j + 1] if j + 1 < level else None, "chain", qid, j) for j, m in enumerate(mains)]
        distr, dead = [], []
        for j in sorted(rng.sample(range(level), min(distractors, level))):
            s2 = slots.scene_with(2, exclude=[scene], main=mains[j])
            onward = rng.random() < 0.5
            e2 = rng.choice([m for m in slots.free[s2] if m != mains[j]]) if onward else None
            d1 = add(mains[j], s2, e2, "distractor", qid, j)  # a dead end too when it has no emblem
            distr.append(d1)
            dead.append(add(e2, s2, None, "dead_end", qid, j) if onward else d1)
        start, target = items[chain[0]], items[chain[-1]]
        text = exact_query(start["main"], scene) if kind == "exact" else fuzzy_query(start["main"], scene, rng)
        queries.append({"id": qid, "query": text, "kind": kind, "level": level, "chain": chain, "distractors": distr,
                        "dead_ends": dead, "meta": {"start": _desc(start), "target": _desc(target),
                                                    "answer": " ".join(target["main"])}})
    order = list(range(len(items)))
    rng.shuffle(order)  # ids carry no hint of chain order
    ids = {old: f"{split}-{new:05d}" for new, old in enumerate(order)}
    rows = []
    for old in sorted(range(len(items)), key=lambda o: ids[o]):
        it, iid = items[old], ids[old]
        rel = f"images/{iid}.png"
        render(it["main"], it["scene"], it["emblem"], size, rng, emblem_scale).save(os.path.join(out_dir, rel))
        rows.append({"id": iid, "image": rel, "meta": _desc(it)})
    for q in queries:
        for key in ("chain", "distractors", "dead_ends"):
            q[key] = [ids[i] for i in q[key]]
    corpus = write_corpus(os.path.join(out_dir, f"corpus_{split}.json"), split, rows)
    qfile = write_queries(os.path.join(out_dir, f"queries_{split}.json"), f"corpus_{split}.json", queries)
    counts = {f"L{lv}": sum(q["level"] == lv for q in queries) for lv in sorted(set(levels))}
    return corpus, qfile, {"images": len(rows), "queries": len(queries), "levels": counts}


def _desc(it: dict) -> dict:
    out = {"main": {"colour": it["main"][0], "shape": it["main"][1]},
           "scene": {"colour": it["scene"][0], "ground": it["scene"][1]}}
    if "role" in it:
        out.update(emblem=None if it["emblem"] is None else {"colour": it["emblem"][0], "shape": it["emblem"][1]},
                   role=it["role"], query=it["query"], hop=it["hop"])
    return out


def make_vhop_world(out_dir: str, n_train: int, n_test: int, seed: int = 0, size: int = 112,
                    levels: Sequence[int] = LEVELS, distractors: int = 1, scene_cap: int = 24, colours: int = 8,
                    shapes: int = 5, scene_colours: int = 8, grounds: int = 4, emblem_scale: float = 0.28) -> dict:
    """Write ``images/*.png``, ``corpus_{train,test}.json`` and ``queries_{train,test}.json`` under ``out_dir``.

    ``n_train``/``n_test`` queries per split, levels cycling over ``levels`` (each in 1..5), ``exact`` and
    ``fuzzy`` phrasing alternating per cycle; ``distractors`` branches per query (0..5, at most one per hop).
    A scene takes new images until it holds ``scene_cap`` (5..objects) before a fresh scene opens (then any scene
    with room): dense scenes keep a single-step retriever that matches the named scene from the later hops
    (``single_step_ceiling``). The vocabulary is the first ``colours`` (1..12) object colours x ``shapes`` (1..5)
    shapes (the main objects, at least 6) and the first ``scene_colours`` (1..8) x ``grounds`` (1..4) scenes (at
    least 2); a smaller one is an easier world with fewer images per split. ``emblem_scale`` (0.2..0.45) is the
    emblem plate's side as a fraction of the image (a larger emblem is easier to perceive).
    """
    if not 0.2 <= emblem_scale <= 0.45:
        raise ValueError(f"emblem_scale must be in [0.2, 0.45], got {emblem_scale}")
    for name, v, hi in (("colours", colours, len(OBJECT_COLOURS)), ("shapes", shapes, 5), ("scene_colours", scene_colours, 8),
                        ("grounds", grounds, 4)):
        if not 1 <= v <= hi:
            raise ValueError(f"{name} must be in 1..{hi}, got {v}")
    if colours * shapes < 6 or scene_colours * grounds < 2:
        raise ValueError(f"colours x shapes must be >= 6 and scene_colours x grounds >= 2, got {colours * shapes} "
                         f"and {scene_colours * grounds}")
    if not 5 <= scene_cap <= colours * shapes:
        raise ValueError(f"scene_cap must be in 5..{colours * shapes} (the object count), got {scene_cap}")
    if size < 56 or size > 224 or size % 2:
        raise ValueError(f"size must be an even number in [56, 224], got {size}")
    if not levels or any(not isinstance(v, int) or not 1 <= v <= 5 for v in levels):
        raise ValueError(f"levels must be integers in 1..5, got {list(levels)}")
    if not 0 <= distractors <= 5:
        raise ValueError(f"distractors must be in 0..5, got {distractors}")
    os.makedirs(os.path.join(out_dir, "images"), exist_ok=True)
    result = {"out_dir": out_dir, "seed": seed, "size": size}
    for split, n in (("train", n_train), ("test", n_test)):
        rng = random.Random(f"vhop:{seed}:{split}")
        corpus, qfile, info = _split(out_dir, split, n, rng, size, list(levels), distractors, scene_cap,
                                     (colours, shapes, scene_colours, grounds), emblem_scale)
        result[split] = {"corpus": corpus, "queries": qfile, **info}
    return result


def link_graph(corpus) -> Dict[str, Optional[str]]:
    """For each item of a synthetic corpus (``vhop_format.Corpus``), the item its emblem links to (same scene,
    main object = the emblem), or ``None`` (no emblem, or nothing continues). Reads only ``meta``."""
    key = lambda m, s: (m["colour"], m["shape"], s["colour"], s["ground"])  # noqa: E731
    by_slot = {key(it.meta["main"], it.meta["scene"]): it.id for it in corpus.items}
    return {it.id: (by_slot.get(key(it.meta["emblem"], it.meta["scene"])) if it.meta.get("emblem") else None)
            for it in corpus.items}


def single_step_ceiling(corpus, queries, k: int) -> Dict[int, float]:
    """Per level, the mean chance that the best single-step retriever that reads only the query finds the whole gold
    chain in its top ``k``: it ranks the described image first (it knows its main object and scene), then every other
    image of that scene in random order (the later hops share only the scene with the query). With ``T`` such
    images and a chain of ``L``: ``P = C(T - L + 1, k - L) / C(T, k - 1)`` (1 for ``L = 1``, 0 when ``L > k``)."""
    from math import comb

    per_scene: Dict[Tuple[str, str], int] = {}
    for it in corpus.items:
        key = (it.meta["scene"]["colour"], it.meta["scene"]["ground"])
        per_scene[key] = per_scene.get(key, 0) + 1
    out: Dict[int, List[float]] = {}
    for q in queries:
        scene = corpus.by_id[q.chain[0]].meta["scene"]
        t, n = per_scene[(scene["colour"], scene["ground"])] - 1, q.hops
        p = 1.0 if n == 1 else (0.0 if n > k else comb(t - n + 1, k - n) / comb(t, k - 1) if k - 1 < t else 1.0)
        out.setdefault(q.level, []).append(p)
    return {lv: sum(v) / len(v) for lv, v in sorted(out.items())}
