"""The video world with a prior to unlearn: biased train split, debiased held-out split (issue 16)."""
import collections
import json
import os

import pytest

from mmrl.data.synth_video import BACKGROUND, QUESTION_VARIANTS, TINTS, _pool, make_video_world

N = 120


def load(info, split):
    with open(info[split]) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def frequent(tmp_path_factory):
    return make_video_world(str(tmp_path_factory.mktemp("freq")), N, N, seed=2, size=24, n_frames=4, fps=2,
                            qtypes=["color", "count"], prior="frequent", prior_strength=0.8)


def prior_share(items):
    return sum(it["answer"] == _pool(it["qtype"])[0] for it in items) / len(items)


def test_frequent_prior_in_train_and_biased_test_not_in_the_debiased_test(frequent):
    train, test, biased = (load(frequent, s) for s in ("train", "test", "test_biased"))
    assert len(biased) == len(test) == N
    assert 0.7 <= prior_share(train) <= 0.9 and 0.7 <= prior_share(biased) <= 0.9
    # debiased: every value equally often (color: 1/4, count: 1/3)
    assert prior_share(test) < 0.4
    per_q = collections.defaultdict(collections.Counter)
    for it in test:
        per_q[it["qtype"]][it["answer"]] += 1
    for q, c in per_q.items():
        assert max(c.values()) - min(c.values()) <= 1 and len(c) == len(_pool(q)), (q, c)
    assert all(it["meta"]["prior_answer"] == _pool(it["qtype"])[0] for it in train + test)


def test_phrasing_prior_ties_the_wording_to_the_answer_in_train_only(tmp_path):
    info = make_video_world(str(tmp_path), N, N, seed=1, size=24, n_frames=4, fps=2, qtypes=["color", "location"],
                            prior="phrasing", prior_strength=1.0)
    train, test = load(info, "train"), load(info, "test")

    def tied(items):
        return sum(QUESTION_VARIANTS[it["qtype"]].index(it["question"]) == _pool(it["qtype"]).index(it["answer"])
                   for it in items) / len(items)

    assert tied(train) == 1.0 and tied(load(info, "test_biased")) == 1.0
    assert tied(test) < 0.5  # wording drawn independently of the answer: about 1/4
    assert len({it["question"] for it in test if it["qtype"] == "color"}) > 1


def decoded_tint(world_dir, item):
    """The nearest ``TINTS`` entry to the decoded clip's background (the top-left pixel of every frame: squares
    keep a margin from the border), read back from the MP4 as a model would see it."""
    import decord
    import numpy as np

    frames = decord.VideoReader(os.path.join(world_dir, item["video"])).get_batch([0, 1, 2, 3]).asnumpy()
    corner = frames[:, :2, :2].reshape(-1, 3).astype(float).mean(0)
    dist = [float(np.abs(corner - np.array(t)).sum()) for t in TINTS + [BACKGROUND]]
    return int(np.argmin(dist))


def test_tint_prior_is_in_the_pixels_of_train_and_not_of_the_debiased_split(tmp_path):
    """prior="tint": the background tint read back from the MP4s names the gold's tint in ~80% of train and
    biased-test clips (strength 0.8 + 0.2 / 4 by chance), and only ~1/4 of the debiased held-out clips."""
    info = make_video_world(str(tmp_path), N, N, seed=4, size=32, n_frames=4, fps=2, qtypes=["color", "direction"],
                            prior="tint", prior_strength=0.8)
    splits = {s: load(info, s) for s in ("train", "test", "test_biased")}

    def tied(items):
        return sum(decoded_tint(info["out_dir"], it) == _pool(it["qtype"]).index(it["answer"]) for it in items) / len(items)

    for items in splits.values():  # the tint the clip was rendered with survives the codec, and no clip is untinted
        assert all(decoded_tint(info["out_dir"], it) == it["meta"]["tint"] for it in items)
        assert all(it["meta"]["prior_answer"] is None for it in items)
    assert 0.7 <= tied(splits["train"]) <= 0.95 and 0.7 <= tied(splits["test_biased"]) <= 0.95
    assert tied(splits["test"]) < 0.4
    assert len({it["meta"]["tint"] for it in splits["test"] if it["qtype"] == "color"}) == len(TINTS)


def test_bad_prior_options():
    with pytest.raises(ValueError, match="unknown prior"):
        make_video_world("/nonexistent", 1, 1, prior="pitch")
    with pytest.raises(ValueError, match="prior_strength"):
        make_video_world("/nonexistent", 1, 1, prior="frequent", prior_strength=0.0)


def test_no_prior_writes_no_biased_split(tmp_path):
    info = make_video_world(str(tmp_path), 5, 5, seed=0, size=24, n_frames=4, fps=2)
    assert "test_biased" not in info and info["prior"] is None
