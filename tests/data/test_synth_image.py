import collections
import json
import os

import numpy as np
import pytest
from PIL import Image

from mmrl.data.synth_image import IMAGE_QTYPES, make_image_world
from mmrl.data.synth_video import BACKGROUND, PALETTE, QUESTIONS

SIZE = 56


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("iworld"))
    info = make_image_world(out, n_train=30, n_test=9, seed=5, size=SIZE)
    items = {}
    for split in ("train", "test"):
        with open(info[split]) as f:
            items[split] = json.load(f)
    return out, info, items


def test_every_qtype_present(world):
    _, info, items = world
    for split in ("train", "test"):
        qs = collections.Counter(it["qtype"] for it in items[split])
        assert set(qs) == set(IMAGE_QTYPES)
        assert dict(qs) == info["counts"][split]


def test_png_pixels_match_boxes_and_colours(world):
    out, _, items = world
    for it in items["train"] + items["test"]:
        assert "video" not in it and it["question"] == QUESTIONS[it["qtype"]]
        assert 2 <= len(it["candidates"]) <= 4 and it["answer"] in it["candidates"]
        img = np.asarray(Image.open(os.path.join(out, it["image"])).convert("RGB"))
        assert img.shape == (SIZE, SIZE, 3)
        ev = it["evidence"]
        assert ev["segments"] == [] and ev["source_size"] == [SIZE, SIZE]
        mask = np.zeros((SIZE, SIZE), bool)
        for (t, (x0, y0, x1, y1)), colour in zip(ev["boxes"], it["meta"]["colors"]):
            assert t == 0.0
            assert (img[y0:y1, x0:x1] == PALETTE[colour]).all()  # PNG is lossless
            mask[y0:y1, x0:x1] = True
        assert (img[~mask] == BACKGROUND).all()
        if it["qtype"] == "color":
            assert it["meta"]["colors"] == [it["answer"]]
        if it["qtype"] == "count":
            assert len(ev["boxes"]) == int(it["answer"])
        if it["qtype"] == "location":
            x0, y0, x1, y1 = ev["boxes"][0][1]
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
            where = {"left": cx < SIZE / 3, "right": cx > 2 * SIZE / 3,
                     "top": cy < SIZE / 3, "bottom": cy > 2 * SIZE / 3}
            assert where[it["answer"]] and sum(where.values()) == 1


def test_letters_balanced(world):
    _, _, items = world
    per_k = collections.defaultdict(collections.Counter)
    for it in items["train"]:
        per_k[len(it["candidates"])][it["candidates"].index(it["answer"])] += 1
    for k, c in per_k.items():
        counts = [c[i] for i in range(k)]
        assert max(counts) - min(counts) <= 1, (k, counts)


def test_deterministic(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    make_image_world(a, 5, 2, seed=9)
    make_image_world(b, 5, 2, seed=9)
    for name in ("train.json", "test.json"):
        with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
            assert fa.read() == fb.read()
    for name in os.listdir(os.path.join(a, "images")):
        ia = np.asarray(Image.open(os.path.join(a, "images", name)))
        ib = np.asarray(Image.open(os.path.join(b, "images", name)))
        assert np.array_equal(ia, ib)


def test_rejects_temporal_qtypes(tmp_path):
    with pytest.raises(ValueError, match="unknown question type"):
        make_image_world(str(tmp_path), 2, 2, qtypes=["direction"])
