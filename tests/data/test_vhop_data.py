"""The VHOP world (``mmrl data synth --kind vhop``) and its JSON format: reproducible by seed, chains that follow the
visual links with the right number of hops, distractors and dead ends as documented, and bad corpus input named
(or skipped and counted with ``skip_bad``)."""
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from mmrl.data.synth_vhop import link_graph, make_vhop_world, single_step_ceiling
from mmrl.data.vhop_format import load_corpus, load_queries, query_samples
from mmrl.errors import DataError


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vhop")
    make_vhop_world(str(out), 20, 10, seed=3, size=56, distractors=2)
    return out


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def test_same_seed_same_world_other_seed_other_world(world, tmp_path):
    make_vhop_world(str(tmp_path / "a"), 20, 10, seed=3, size=56, distractors=2)
    make_vhop_world(str(tmp_path / "b"), 20, 10, seed=4, size=56, distractors=2)
    assert _digest(tmp_path / "a") == _digest(world)
    assert _digest(tmp_path / "b") != _digest(world)


def test_levels_hops_and_links(world):
    for split, n in (("train", 20), ("test", 10)):
        corpus = load_corpus(str(world / f"corpus_{split}.json"))
        queries, skipped = load_queries(str(world / f"queries_{split}.json"))
        assert not skipped and len(queries) == n
        assert sorted({q.level for q in queries}) == [1, 2, 3, 4, 5]
        assert {q.kind for q in queries} == {"exact", "fuzzy"}
        nxt = link_graph(corpus)
        for q in queries:
            assert q.hops == q.level == len(q.chain)
            # following the emblems from the described image walks the gold chain and stops at the target
            walk = [q.chain[0]]
            while nxt[walk[-1]] is not None:
                walk.append(nxt[walk[-1]])
            assert walk == q.chain
            start = corpus.by_id[q.chain[0]].meta
            assert all(corpus.by_id[i].meta["scene"] == start["scene"] for i in q.chain)  # the scene continues
            if q.kind == "exact":
                assert start["main"]["colour"] in q.query and start["main"]["shape"] in q.query
            # the images after the first are not described by the query
            assert q.meta["target"]["main"] == corpus.by_id[q.target].meta["main"]


def test_start_is_unique_and_distractors_lead_to_dead_ends(world):
    corpus = load_corpus(str(world / "corpus_train.json"))
    queries, _ = load_queries(str(world / "queries_train.json"), corpus)
    nxt = link_graph(corpus)
    slots = [(json.dumps(it.meta["main"], sort_keys=True), json.dumps(it.meta["scene"], sort_keys=True))
             for it in corpus.items]
    assert len(set(slots)) == len(slots)  # a main object appears once per scene: every link is unambiguous
    for q in queries:
        assert len(q.distractors) == min(2, q.level) and len(q.dead_ends) == len(q.distractors)
        gold_scene = corpus.by_id[q.chain[0]].meta["scene"]
        gold_mains = [corpus.by_id[i].meta["main"] for i in q.chain]
        for d, end in zip(q.distractors, q.dead_ends):
            m = corpus.by_id[d].meta
            assert m["main"] in gold_mains and m["scene"] != gold_scene  # looks like a hop, wrong scene
            assert end == d or nxt[d] == end
            assert corpus.by_id[end].meta["emblem"] is None and nxt[end] is None


def test_a_smaller_vocabulary_keeps_the_links(tmp_path):
    make_vhop_world(str(tmp_path), 8, 0, seed=0, size=56, colours=6, shapes=1, scene_colours=8, grounds=1, scene_cap=6)
    corpus = load_corpus(str(tmp_path / "corpus_train.json"))
    queries, _ = load_queries(str(tmp_path / "queries_train.json"), corpus)
    assert {it.meta["main"]["shape"] for it in corpus.items} == {"circle"}
    assert {it.meta["scene"]["ground"] for it in corpus.items} == {"plain"}
    nxt = link_graph(corpus)
    for q in queries:
        walk = [q.chain[0]]
        while nxt[walk[-1]] is not None:
            walk.append(nxt[walk[-1]])
        assert walk == q.chain


def test_single_step_from_the_query_cannot_reach_the_later_hops(tmp_path):
    make_vhop_world(str(tmp_path), 40, 0, seed=0, size=56)
    corpus = load_corpus(str(tmp_path / "corpus_train.json"), check_images=False)
    queries, _ = load_queries(str(tmp_path / "queries_train.json"), corpus)
    ceiling = single_step_ceiling(corpus, queries, k=5)
    assert ceiling[1] == 1.0 and ceiling[2] < 0.35 and ceiling[3] < 0.1 and ceiling[4] < 0.02 and ceiling[5] < 0.02
    assert list(ceiling.values()) == sorted(ceiling.values(), reverse=True)


def test_cli_writes_the_world(tmp_path):
    from mmrl.cli import main

    main(["data", "synth", "--kind", "vhop", "--out", str(tmp_path), "--n-train", "5", "--n-test", "5", "--size", "56"])
    assert len(load_queries(str(tmp_path / "queries_test.json"))[0]) == 5
    assert len(list((tmp_path / "images").glob("*.png"))) == len(load_corpus(str(tmp_path / "corpus_train.json"))) + \
        len(load_corpus(str(tmp_path / "corpus_test.json")))


def test_bad_arguments_raise(tmp_path):
    with pytest.raises(ValueError, match="levels"):
        make_vhop_world("/tmp/never", 1, 0, levels=[6])
    with pytest.raises(ValueError, match="size"):
        make_vhop_world("/tmp/never", 1, 0, size=50)
    with pytest.raises(ValueError, match="scene_cap"):
        make_vhop_world("/tmp/never", 1, 0, scene_cap=41)
    with pytest.raises(ValueError, match="shapes must be in 1..5"):
        make_vhop_world("/tmp/never", 1, 0, shapes=6)
    with pytest.raises(ValueError, match="colours x shapes must be >= 6"):
        make_vhop_world("/tmp/never", 1, 0, colours=5, shapes=1)
    with pytest.raises(ValueError, match="emblem_scale"):
        make_vhop_world("/tmp/never", 1, 0, emblem_scale=0.5)
    with pytest.raises(ValueError, match="too many queries.*ran out of free"):
        make_vhop_world(str(tmp_path), 400, 0, size=56)


def _copy(world: Path, tmp_path: Path) -> Path:
    shutil.copytree(world, tmp_path / "w")
    return tmp_path / "w"


def _first_ids(w: Path) -> list:
    return [q.chain[0] for q in load_queries(str(w / "queries_train.json"))[0]]


@pytest.fixture
def broken(world, tmp_path) -> Path:
    """A copy of the world with one chain image missing and one corrupt."""
    w = _copy(world, tmp_path)
    ids = _first_ids(w)
    (w / "images" / f"{ids[1]}.png").unlink()
    (w / "images" / f"{ids[2]}.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    return w


def test_missing_image_is_named(world, tmp_path):
    w = _copy(world, tmp_path)
    gone = _first_ids(w)[1]
    (w / "images" / f"{gone}.png").unlink()
    with pytest.raises(DataError, match=f"corpus_train.json.*image file not found: .*{gone}.png"):
        load_corpus(str(w / "corpus_train.json"))


def test_corrupt_image_is_named(world, tmp_path):
    w = _copy(world, tmp_path)
    bad = _first_ids(w)[2]
    png = (w / "images" / f"{bad}.png").read_bytes()
    (w / "images" / f"{bad}.png").write_bytes(png[: len(png) // 2])  # truncated
    with pytest.raises(DataError, match=f"sample '{bad}'.*corrupt image .*{bad}.png"):
        load_corpus(str(w / "corpus_train.json"))


def test_skip_bad_skips_and_counts(broken):
    corpus = load_corpus(str(broken / "corpus_train.json"), skip_bad=True)
    assert len(corpus.skipped) == 2
    assert any("not found" in r for _, r in corpus.skipped) and any("corrupt" in r for _, r in corpus.skipped)
    queries, skipped = load_queries(str(broken / "queries_train.json"), skip_bad=True)
    assert len(queries) == 18 and len(skipped) == 2
    assert all("skipped as bad" in r for _, r in skipped)
    with pytest.raises(DataError, match="skipped as bad"):
        load_queries(str(broken / "queries_train.json"), corpus)
    samples, bad = query_samples(str(broken / "queries_train.json"), skip_bad=True)
    assert len(samples) == 18 and len(bad) == 4
    assert samples[0].meta["corpus"] == corpus.path and samples[0].meta["vhop"]["chain"]


def test_format_errors_name_the_file_and_item(world, tmp_path):
    data = json.loads((world / "corpus_train.json").read_text())
    data["items"][3]["id"] = data["items"][2]["id"]
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"items\[3\]: duplicate id"):
        load_corpus(str(tmp_path / "c.json"), check_images=False)
    (tmp_path / "c.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(DataError, match="not a mmrl-vhop-corpus file"):
        load_corpus(str(tmp_path / "c.json"))
    qs = json.loads((world / "queries_train.json").read_text())
    qs["corpus"] = str(world / "corpus_train.json")
    qs["queries"][0]["level"] = 0
    qs["queries"][1]["chain"] = ["nope"]
    (tmp_path / "q.json").write_text(json.dumps(qs))
    with pytest.raises(DataError, match=r"queries\[0\]: 'level'"):
        load_queries(str(tmp_path / "q.json"))
    queries, skipped = load_queries(str(tmp_path / "q.json"), skip_bad=True)
    assert len(queries) == 18 and [s for s, _ in skipped] == [qs["queries"][0]["id"], qs["queries"][1]["id"]]
    assert "'nope'" in skipped[1][1]


def test_emblem_scale_sets_the_plate_size():
    """The emblem plate (black) spans ``emblem_scale`` of the image side; the main object is unchanged."""
    import random

    import numpy as np

    from mmrl.data.synth_vhop import render

    sides = []
    for scale in (0.28, 0.44):
        im = np.asarray(render(("red", "circle"), ("navy", "plain"), ("cyan", "square"), 112, random.Random(0),
                               emblem_scale=scale))
        black = (im.sum(-1) == 0)
        sides.append(int(black.any(0).sum()))
    assert sides[0] == pytest.approx(0.28 * 112, abs=2) and sides[1] == pytest.approx(0.44 * 112, abs=2)
