"""The claims world: images agree with their attributes, traces hold a controlled share of unsupported claims
while the answer stays right, and the world labels any claim sentence."""
import json
import os

import numpy as np
import pytest
from PIL import Image

from mmrl.algos.pacg_claims import PERCEPTION_LEXICON, claim_char_spans, lexicon_pattern
from mmrl.data.annotations import load_samples
from mmrl.data.synth_claims import HINTS, claim_support, make_claims_world
from mmrl.data.synth_video import PALETTE
from mmrl.rewards.parsing import parse_choice


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("claims"))
    info = make_claims_world(out, n_train=200, n_test=10, seed=3, unsupported_rate=0.3, prior_p=0.6)
    with open(info["train"]) as f:
        return out, info, json.load(f)


def test_images_show_the_recorded_square(world):
    out, _, items = world
    for it in items[:20]:
        img = np.asarray(Image.open(os.path.join(out, it["image"])))
        x0, y0, x1, y1 = it["evidence"]["boxes"][0][1]
        assert tuple(img[(y0 + y1) // 2, (x0 + x1) // 2]) == PALETTE[it["meta"]["color"]]
        cx, cy = (x0 + x1) / 2 / img.shape[1], (y0 + y1) / 2 / img.shape[0]
        side = {"left": cx < 0.4, "right": cx > 0.6, "top": cy < 0.4, "bottom": cy > 0.6}
        assert side[it["meta"]["location"]]


def test_traces_are_right_with_a_controlled_share_of_unsupported_claims(world):
    _, info, items = world
    pat = lexicon_pattern(PERCEPTION_LEXICON)
    n_unsup = 0
    for it in items:
        m = it["meta"]
        letter = "ABCD"[it["candidates"].index(it["answer"])]
        assert parse_choice(m["sft_response"], "ABCD"[: len(it["candidates"])]) == letter
        asked = next(c for c in m["claims"] if c["attribute"] == it["qtype"])
        assert asked["supported"]  # the answer's own claim is never wrong
        for c in m["claims"]:
            assert claim_support(c["text"], m) is c["supported"]
        spans = [m["sft_response"][a:b] for a, b in claim_char_spans(m["sft_response"], pat)]
        assert spans == [c["text"] for c in m["claims"]]  # the lexicon finds exactly the claim sentences
        n_unsup += not all(c["supported"] for c in m["claims"])
    assert n_unsup == info["stats"]["train"]["with_unsupported_claim"]
    assert 0.2 < n_unsup / len(items) < 0.4
    assert 0.6 < info["stats"]["train"]["gold_is_prior"] / len(items) < 0.8  # 0.6 + 0.4 * chance


def test_claim_support_rules():
    meta = {"color": "red", "location": "left"}
    assert claim_support("I see a red square on the left.", meta) is True
    assert claim_support("I see a Blue square.", meta) is False
    assert claim_support("It is red and on the right.", meta) is False
    assert claim_support("The picture is nice.", meta) is None
    assert claim_support("I see a reddish square.", meta) is None  # whole words only


def test_loads_as_samples_and_is_deterministic(world, tmp_path):
    out, info, items = world
    samples, skipped = load_samples(info["test"], out)
    assert len(samples) == 10 and not skipped and samples[0].meta["sft_response"].startswith("<think>")
    again = make_claims_world(str(tmp_path), n_train=200, n_test=10, seed=3)
    with open(again["train"]) as f:
        assert json.load(f) == items
    shuffled = make_claims_world(str(tmp_path / "s"), n_train=40, n_test=1, seed=3, fixed_options=False)
    with open(shuffled["train"]) as f:
        assert len({tuple(it["candidates"]) for it in json.load(f)}) > 2
    assert len({tuple(it["candidates"]) for it in items}) == 2  # one fixed list per question type
    with pytest.raises(ValueError, match="unsupported_rate"):
        make_claims_world(str(tmp_path), 1, 1, unsupported_rate=1.5)


def test_prior_source_unsupported_claims_repeat_a_stated_prior(tmp_path):
    info = make_claims_world(str(tmp_path), n_train=200, n_test=4, seed=3, unsupported_source="prior")
    with open(info["train"]) as f:
        items = json.load(f)
    n_unsup = n_sup_eq = 0
    for it in items:
        m, q = it["meta"], it["qtype"]
        other = "location" if q == "color" else "color"
        assert set(m["priors"]) == {"color", "location"} and m["priors"][q] == m["prior"]
        assert it["question"].endswith(" " + HINTS[other].format(prior=m["priors"][other]))
        said = next(c for c in m["claims"] if c["attribute"] == other)
        if not said["supported"]:  # the unsupported claim names the stated prior, which contradicts the image
            n_unsup += 1
            assert m["priors"][other] in said["text"] and m["priors"][other] != m[other]
        else:
            n_sup_eq += m["priors"][other] == m[other]
    assert n_unsup == info["stats"]["train"]["with_unsupported_claim"] and 0.2 < n_unsup / len(items) < 0.4
    assert 0.1 < n_sup_eq / (len(items) - n_unsup) < 0.45  # a supported trace's prior is drawn uniformly (1/4)
    # the default source states one prior per question; bad values are named
    with open(make_claims_world(str(tmp_path / "r"), n_train=200, n_test=4, seed=3)["train"]) as f:
        plain = json.load(f)
    assert all("priors" not in it["meta"] and it["question"].count("(") == 1 for it in plain)
    with pytest.raises(ValueError, match="unsupported_source"):
        make_claims_world(str(tmp_path / "x"), 1, 1, unsupported_source="text")
