import collections
import json
import os

import av
import decord
import numpy as np
import pytest

from mmrl.data.synth_video import (
    BACKGROUND,
    OPPOSITE,
    PALETTE,
    QUESTIONS,
    VIDEO_QTYPES,
    available_codec,
    make_video_world,
)

N_FRAMES, FPS, SIZE = 8, 4, 56
TOL = 24  # per-channel tolerance after lossy compression


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("vworld"))
    info = make_video_world(out, n_train=20, n_test=10, seed=3, size=SIZE, n_frames=N_FRAMES, fps=FPS)
    with open(info["train"]) as f:
        train = json.load(f)
    with open(info["test"]) as f:
        test = json.load(f)
    return out, info, train, test


def decode_decord(path):
    vr = decord.VideoReader(path)
    return vr, vr.get_batch(list(range(len(vr)))).asnumpy()


def decode_pyav(path):
    with av.open(path) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


def box_colours(item):
    """(frame index, box, colour name) for every annotated box."""
    meta, out, per_t = item["meta"], [], collections.Counter()
    for t, box in item["evidence"]["boxes"]:
        i = round(t * FPS)
        if item["qtype"] == "order":
            colour = meta["colors"][0] if t < meta["spans"][0][1] else meta["colors"][1]
        elif item["qtype"] == "count":
            colour = meta["colors"][per_t[i]]
        else:
            colour = meta["colors"][0]
        per_t[i] += 1
        out.append((i, box, colour))
    return out


def check_pixels(frames, item, tol=TOL):
    assert frames.shape == (N_FRAMES, SIZE, SIZE, 3)
    by_frame = collections.defaultdict(list)
    for i, (x0, y0, x1, y1), colour in box_colours(item):
        by_frame[i].append((x0, y0, x1, y1))
        inner = frames[i, y0 + 2:y1 - 2, x0 + 2:x1 - 2].reshape(-1, 3).astype(int)
        assert np.abs(inner - np.array(PALETTE[colour])).max() <= tol, (item["id"], i, colour)
    for i in range(N_FRAMES):
        outside = np.ones((SIZE, SIZE), bool)
        for x0, y0, x1, y1 in by_frame[i]:
            outside[max(0, y0 - 2):y1 + 2, max(0, x0 - 2):x1 + 2] = False
        dark = frames[i][outside].astype(int)
        assert np.abs(dark - np.array(BACKGROUND)).max() <= tol, (item["id"], i)


def test_codec_is_h264_when_available(world):
    _, info, _, _ = world
    assert info["codec"] == available_codec()
    with av.open(os.path.join(info["out_dir"], "videos", "train_00000.mp4")) as c:
        s = c.streams.video[0]
        assert s.codec_context.name == ("h264" if info["codec"] == "libx264" else "mpeg4")
        assert s.codec_context.pix_fmt == "yuv420p"


def test_every_qtype_present_and_counted(world):
    _, info, train, test = world
    for split, items in (("train", train), ("test", test)):
        qs = collections.Counter(it["qtype"] for it in items)
        assert set(qs) == set(VIDEO_QTYPES)
        assert dict(qs) == info["counts"][split]
    assert len({it["id"] for it in train + test}) == 30


def test_item_fields(world):
    out, _, train, test = world
    for it in train + test:
        assert it["question"] == QUESTIONS[it["qtype"]]
        assert 2 <= len(it["candidates"]) <= 4
        assert len(set(it["candidates"])) == len(it["candidates"])
        assert it["answer"] in it["candidates"]
        assert os.path.isfile(os.path.join(out, it["video"]))
        assert it["evidence"]["source_size"] == [SIZE, SIZE]
        assert it["meta"]["temporal"] == (it["qtype"] in ("direction", "order"))
        assert it["meta"]["reversed_answer"] in it["candidates"]


def test_decord_roundtrip_colours_and_boxes(world):
    out, _, train, test = world
    for it in train + test:
        vr, frames = decode_decord(os.path.join(out, it["video"]))
        assert len(vr) == N_FRAMES
        assert vr.get_avg_fps() == pytest.approx(FPS)
        ts = vr.get_frame_timestamp(list(range(N_FRAMES)))[:, 0]
        np.testing.assert_allclose(ts, np.arange(N_FRAMES) / FPS, atol=1e-3)
        check_pixels(frames, it)


def test_pyav_roundtrip_matches_decord(world):
    out, _, train, _ = world
    for it in train[:5]:
        path = os.path.join(out, it["video"])
        frames = decode_pyav(path)
        check_pixels(frames, it)
        _, frames_d = decode_decord(path)
        assert np.abs(frames.astype(int) - frames_d.astype(int)).max() <= 3


def test_evidence_segments_inside_clip(world):
    _, _, train, test = world
    dur = N_FRAMES / FPS
    for it in train + test:
        segs = it["evidence"]["segments"]
        assert segs and all(0 <= s < e <= dur for s, e in segs)
        times = [t for t, _ in it["evidence"]["boxes"]]
        assert times and all(any(s <= t < e for s, e in segs) for t in times)
        covered = sum(e - s for s, e in segs)
        if it["meta"]["temporal"] or it["qtype"] == "count":
            # a non-evidence span exists before and after, and it holds no squares
            assert segs[0][0] > 0 and segs[-1][1] < dur
            assert covered < dur
            if it["qtype"] == "count":  # an event: every square on screen in each evidence frame
                assert it["meta"]["event"] and len(times) == (N_FRAMES // 2) * int(it["answer"])
        else:
            assert segs == [[0.0, dur]]
            assert len(times) == N_FRAMES


def test_temporal_semantics(world):
    _, _, train, test = world
    for it in train + test:
        boxes = it["evidence"]["boxes"]
        if it["qtype"] == "direction":
            d = it["answer"]
            axis = 0 if d in ("left", "right") else 1
            pos = [b[axis] for _, b in boxes]
            steps = np.diff(pos)
            assert (steps > 0).all() if d in ("right", "down") else (steps < 0).all()
            assert it["meta"]["reversed_answer"] == OPPOSITE[d]
            assert OPPOSITE[d] in it["candidates"]
        elif it["qtype"] == "order":
            first, second = it["meta"]["order"]
            assert it["answer"] == first and first != second
            assert second in it["candidates"]
            (s1, e1), (s2, e2) = it["meta"]["spans"]
            assert e1 <= s2  # one after the other, never together
            assert [s1, e2] == it["evidence"]["segments"][0]


def test_static_semantics(world):
    _, _, train, test = world
    for it in train + test:
        x0, y0, x1, y1 = it["evidence"]["boxes"][0][1]
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        if it["qtype"] == "location":
            where = {"left": cx < SIZE / 3, "right": cx > 2 * SIZE / 3,
                     "top": cy < SIZE / 3, "bottom": cy > 2 * SIZE / 3}
            assert where[it["answer"]] and sum(where.values()) == 1
        elif it["qtype"] == "color":
            assert it["meta"]["colors"] == [it["answer"]]
        elif it["qtype"] == "count":
            assert it["answer"] in ("1", "2", "3")
            assert len({tuple(b) for _, b in it["evidence"]["boxes"]}) == int(it["answer"])


def test_letters_and_values_balanced(tmp_path):
    info = make_video_world(str(tmp_path), n_train=60, n_test=0, seed=1)
    with open(info["train"]) as f:
        items = json.load(f)
    per_k = collections.defaultdict(collections.Counter)
    per_q = collections.defaultdict(collections.Counter)
    for it in items:
        per_k[len(it["candidates"])][it["candidates"].index(it["answer"])] += 1
        per_q[it["qtype"]][it["answer"]] += 1
    for k, c in per_k.items():
        counts = [c[i] for i in range(k)]
        assert max(counts) - min(counts) <= 1, (k, counts)
    for q, c in per_q.items():
        assert max(c.values()) - min(c.values()) <= 1, (q, c)
        assert len(c) >= 3


def test_deterministic_by_seed(tmp_path):
    a, b, c = (str(tmp_path / n) for n in "abc")
    make_video_world(a, 6, 3, seed=7)
    make_video_world(b, 6, 3, seed=7)
    make_video_world(c, 6, 3, seed=8)
    for split in ("train", "test"):
        with open(os.path.join(a, f"{split}.json"), "rb") as fa, open(os.path.join(b, f"{split}.json"), "rb") as fb:
            ja, jb = fa.read(), fb.read()
        assert ja == jb
        with open(os.path.join(c, f"{split}.json"), "rb") as fc:
            assert fc.read() != ja
    for name in sorted(os.listdir(os.path.join(a, "videos"))):
        _, fa = decode_decord(os.path.join(a, "videos", name))
        _, fb = decode_decord(os.path.join(b, "videos", name))
        assert np.array_equal(fa, fb)


def test_mpeg4_fallback_decodes(tmp_path):
    info = make_video_world(str(tmp_path), 5, 0, seed=2, codec="mpeg4")
    assert info["codec"] == "mpeg4"
    with open(info["train"]) as f:
        items = json.load(f)
    for it in items:
        vr, frames = decode_decord(os.path.join(str(tmp_path), it["video"]))
        assert len(vr) == N_FRAMES
        check_pixels(frames, it, tol=40)


def test_qtype_subset_and_bad_args(tmp_path):
    info = make_video_world(str(tmp_path / "d"), 4, 2, qtypes=["direction"], n_frames=4, size=32)
    with open(info["train"]) as f:
        items = json.load(f)
    assert {it["qtype"] for it in items} == {"direction"}
    assert decord.VideoReader(os.path.join(info["out_dir"], items[0]["video"]))[0].shape == (32, 32, 3)
    with pytest.raises(ValueError, match="unknown question type"):
        make_video_world(str(tmp_path / "e"), 1, 1, qtypes=["colour"])
    with pytest.raises(ValueError, match="n_frames"):
        make_video_world(str(tmp_path / "e"), 1, 1, n_frames=3)
    with pytest.raises(ValueError, match="size"):
        make_video_world(str(tmp_path / "e"), 1, 1, size=55)
