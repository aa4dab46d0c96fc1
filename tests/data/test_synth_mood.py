"""The mood world (cue rule, annotators, evidence box, determinism) and the Emotion6 / EmoSet loaders on synthetic
files written in those layouts."""
import json

import numpy as np
import pytest
from PIL import Image

from mmrl.data.affect import EMOSET8, EMOTION6
from mmrl.data.annotations import load_samples
from mmrl.data.emotion_sets import load_emoset, load_emotion6
from mmrl.data.synth_mood import annotate, cue_color, decode_cue, make_mood_world
from mmrl.errors import DataError
from mmrl.rewards.dspo_format import parse_dspo


def test_world_rule_box_and_distribution(tmp_path):
    res = make_mood_world(str(tmp_path / "w"), n_train=12, n_test=6, seed=3)
    samples, skipped = load_samples(res["train"])
    assert len(samples) == 12 and not skipped
    assert sum(res["counts"]["train"].values()) == 12
    assert {s.meta["drawn_emotion"] for s in samples} == set(EMOTION6)  # balanced draw
    for s in samples:
        img = np.array(Image.open(s.image.path))
        x0, y0, x1, y1 = (int(v) for v in s.evidence.boxes[0][1])
        patch = img[y0:y1, x0:x1].reshape(-1, 3)
        assert (patch == patch[0]).all()  # the cue is one solid colour
        assert tuple(patch[0]) == cue_color(s.meta["cue_vad"])
        v, a, d = decode_cue(patch[0], x1 - x0, 56)
        assert abs(v - s.meta["cue_vad"][0]) < 0.01 and abs(a - s.meta["cue_vad"][1]) < 0.01
        assert abs(d - s.meta["cue_vad"][2]) < 0.05
        dist = s.meta["emotion_dist"]
        assert sum(dist.values()) == pytest.approx(1.0) and dist[s.answer] == max(dist.values())
        assert s.candidates == list(EMOTION6)
        ref = parse_dspo(s.meta["reference_response"], k=5)  # the gold response parses, names the label and the cue
        assert ref.ok and ref.choice == s.answer and s.answer in ref.candidates
        assert ref.box == pytest.approx((y0 / 56, x0 / 56, y1 / 56, x1 / 56), abs=5.1e-3)  # 2 decimals
    again = make_mood_world(str(tmp_path / "w2"), n_train=12, n_test=6, seed=3)
    assert json.load(open(again["train"]))[0]["meta"] == json.load(open(res["train"]))[0]["meta"]


def test_annotators_agree_without_noise():
    from mmrl.data.affect import BUILTIN_VAD

    rng = np.random.default_rng(0)
    d = annotate(np.array(BUILTIN_VAD["fear"]), rng, 20, 0.0)
    assert d["fear"] == 1.0
    noisy = annotate(np.array(BUILTIN_VAD["fear"]), rng, 200, 0.3)
    assert 0.0 < noisy["fear"] < 1.0 and noisy["fear"] == max(noisy.values())


def _img(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(path)


def test_emotion6_layout(tmp_path):
    root = tmp_path / "Emotion6"
    _img(root / "images" / "anger" / "1.jpg")
    _img(root / "images" / "joy" / "7.jpg")
    head = "[image_filename]\t[valence]\t[arousal]\t" + "\t".join(f"[prob. {c}]" for c in EMOTION6 + ("neutral",))
    rows = ["anger/1.jpg\t3.1\t6.2\t0.6\t0.1\t0.1\t0\t0.1\t0\t0.1", "joy/7.jpg\t7.0\t5.0\t0\t0\t0\t0.9\t0\t0.1\t0"]
    (root / "ground_truth.txt").write_text("\n".join([head] + rows) + "\n")
    samples, skipped = load_emotion6(str(root))
    assert [s.answer for s in samples] == ["anger", "joy"] and not skipped
    assert samples[0].meta["emotion_dist"]["anger"] == 0.6 and samples[0].meta["sam_va"] == [3.1, 6.2]
    (root / "ground_truth.txt").write_text("\n".join([head] + rows + ["fear/2.jpg\t1\t2\t0\t0\t1\t0\t0\t0\t0",
                                                                     "joy/7.jpg\t7\t5\t0.1"]) + "\n")
    with pytest.raises(DataError, match="ground_truth.txt:4: image not found"):
        load_emotion6(str(root))
    samples, skipped = load_emotion6(str(root), on_error="skip")
    assert len(samples) == 2 and [r.split(": ", 1)[1][:18] for _, r in skipped] == ["image not found: /", "expected 10 tab-se"]


def test_emoset_layout(tmp_path):
    root = tmp_path / "EmoSet"
    _img(root / "image" / "awe" / "awe_00001.jpg")
    entries = [["awe", "image/awe/awe_00001.jpg", "annotation/awe/awe_00001.json"], ["joy", "x.jpg", "y.json"]]
    (root / "train.json").write_text(json.dumps(entries))
    with pytest.raises(DataError, match="entry 1: emotion 'joy' is not an EmoSet class"):
        load_emoset(str(root))
    samples, skipped = load_emoset(str(root), on_error="skip")
    assert [s.answer for s in samples] == ["awe"] and samples[0].candidates == list(EMOSET8) and len(skipped) == 1
    with pytest.raises(DataError, match="not found"):
        load_emoset(str(root), split="val")
