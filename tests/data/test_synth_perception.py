"""The base's perception corpus: every attribute, the worlds' renderers, deterministic, loadable."""
import json

import numpy as np

from mmrl.data.annotations import load_samples
from mmrl.data.synth_perception import ABSTAIN, allocate, chance_per_type, make_perception_corpus
from mmrl.models.base_recipe import PERCEPTION_ATTRS, BaseRecipe


def test_allocate_follows_the_weights_by_largest_remainders():
    assert allocate(10, {"a": 1, "b": 1, "c": 2}) == {"a": 3, "b": 2, "c": 5}  # 2.5, 2.5, 5: the tie to "a"
    assert allocate(7, {"a": 1, "b": 0, "c": 1}) == {"a": 4, "c": 3}  # ties to the sorted name; weight 0 left out
    assert sum(allocate(440, BaseRecipe().mix).values()) == 440


def test_corpus_covers_every_attribute_and_is_deterministic(tmp_path):
    mix = BaseRecipe().mix
    a = make_perception_corpus(str(tmp_path / "a"), 33, 11, mix, seed=3, size=56, codec="mpeg4")
    make_perception_corpus(str(tmp_path / "b"), 33, 11, mix, seed=3, size=56, codec="mpeg4")
    ta, tb = (json.loads((tmp_path / w / "train.json").read_text()) for w in "ab")
    assert ta == tb
    for name in ("train_00000", "train_00005"):
        ext = "mp4" if (tmp_path / "a" / "videos" / f"{name}.mp4").exists() else "png"
        sub = "videos" if ext == "mp4" else "images"
        assert (tmp_path / "a" / sub / f"{name}.{ext}").read_bytes() == (tmp_path / "b" / sub / f"{name}.{ext}").read_bytes()
    assert set(a["counts"]["test"]) == set(PERCEPTION_ATTRS) and sum(a["counts"]["test"].values()) == 11
    samples, skipped = load_samples(a["test"], None)
    assert not skipped and {s.qtype for s in samples} == set(PERCEPTION_ATTRS)
    for s in samples:
        if s.qtype == "null":
            assert s.answer == ABSTAIN and ABSTAIN in s.candidates
        elif s.qtype == "caption":
            assert s.answer_type == "text" and s.answer.startswith("a ") and " square " in s.answer
        else:
            assert s.is_choice and s.answer in s.candidates
    items = json.loads((tmp_path / "a" / "train.json").read_text())
    times = [it for it in items if it["qtype"] == "time"]
    assert times and all(it["answer"] == f"{int(it['meta']['flash'][0])} to {int(it['meta']['flash'][1])} s"
                         for it in times)
    ch = chance_per_type(items)
    assert ch["caption"] == 0.0 and ch["yesno"] == 0.5


def test_time_clip_flashes_in_the_answered_second(tmp_path):
    from mmrl.data.synth_perception import draw_item
    from mmrl.data.synth_video import Balancer

    rng = np.random.default_rng(0)
    for _ in range(4):
        it = draw_item("time", rng, Balancer(rng), 56, 8, video=True)
        lit = [i for i in range(8) if it.pixels[i, :40].mean() > 60]  # the flash covers the frame but its bottom
        k = int(it.meta["flash"][0])
        assert lit == [2 * k, 2 * k + 1] and it.fps == 2.0  # 2 frames at 2 fps: the second [k, k + 1)


def test_direct_twins_name_the_value_over_the_same_media_and_leave_the_draws_alone(tmp_path):
    mix = {"color": 1, "time": 1, "null": 1, "caption": 1}
    make_perception_corpus(str(tmp_path / "a"), 12, 4, mix, seed=2, size=56, codec="mpeg4")
    r = make_perception_corpus(str(tmp_path / "b"), 12, 4, mix, seed=2, size=56, codec="mpeg4", direct_rate=1.0)
    plain = json.loads((tmp_path / "a" / "train.json").read_text())
    both = json.loads((tmp_path / "b" / "train.json").read_text())
    twins = {e["id"]: e for e in both if e["meta"].get("direct")}
    assert [e for e in both if not e["meta"].get("direct")] == plain  # the drawn items do not move
    choice = [e for e in plain if e.get("answer_type", "choice") == "choice"]
    assert r["n_direct"] == len(twins) == len(choice) == 9  # every choice item at rate 1, captions never
    for e in choice:
        t = twins[e["id"] + "-direct"]
        assert "candidates" not in t and t["answer_type"] == "text" and t["answer"] == e["answer"]
        assert t.get("image") == e.get("image") and t.get("video") == e.get("video") and t["question"] == e["question"]
    assert not any(e["meta"].get("direct") for e in json.loads((tmp_path / "b" / "test.json").read_text()))
    samples, skipped = load_samples(r["train"], None)
    assert not skipped and sum(1 for s in samples if s.meta.get("direct")) == 9


def test_fixed_options_list_the_whole_pool_in_order_with_abstention_last(tmp_path):
    from mmrl.data.synth_perception import EMBLEM_COLOURS, NULL_POOLS
    from mmrl.data.synth_vhop import SHAPES

    mix = {k: 1 for k in ("color", "count", "direction", "emblem", "null", "order", "shape", "time", "yesno")}
    make_perception_corpus(str(tmp_path), 36, 18, mix, seed=4, size=56, codec="mpeg4", abstain_option_rate=0.5,
                           fixed_options=True)
    pools = [list(p) for p in NULL_POOLS.values()] + [list(EMBLEM_COLOURS), list(SHAPES), ["Yes", "No"],
                                                      [f"{k} to {k + 1} s" for k in range(4)]]
    items = [e for split in ("train", "test") for e in json.loads((tmp_path / f"{split}.json").read_text())]
    with_abstain = 0
    for e in items:
        cands = e["candidates"]
        if cands[-1] == ABSTAIN:
            with_abstain += 1
            cands = cands[:-1]
        assert cands in pools and ABSTAIN not in cands, e  # the whole pool, canonical order, abstention last
    assert with_abstain > 8  # the null items and about half of the others
    golds = [e["candidates"].index(e["answer"]) for e in items if e["qtype"] == "color"]
    assert len(set(golds)) == 4  # the gold is balanced over the values, so no letter is a free answer
