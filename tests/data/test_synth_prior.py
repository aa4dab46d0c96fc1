"""The video world with a prior to unlearn: biased train split, debiased held-out split (issue 16)."""
import collections
import json

import pytest

from mmrl.data.synth_video import QUESTION_VARIANTS, _pool, make_video_world

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


def test_bad_prior_options():
    with pytest.raises(ValueError, match="unknown prior"):
        make_video_world("/nonexistent", 1, 1, prior="tint")
    with pytest.raises(ValueError, match="prior_strength"):
        make_video_world("/nonexistent", 1, 1, prior="frequent", prior_strength=0.0)


def test_no_prior_writes_no_biased_split(tmp_path):
    info = make_video_world(str(tmp_path), 5, 5, seed=0, size=24, n_frames=4, fps=2)
    assert "test_biased" not in info and info["prior"] is None
