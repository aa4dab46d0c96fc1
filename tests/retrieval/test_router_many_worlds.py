"""Many VHOP worlds as one training set: ``data.train`` as a list or glob of query files, ids kept apart per corpus,
every query's candidates and SFT negatives drawn from its own corpus, and bad input named by its config key."""
import json

import pytest
import torch

from mmrl.data.vhop_union import CorpusUnion
from mmrl.errors import ConfigError
from mmrl.retrieval.train_common import build_router, load_data
from mmrl.retrieval.train_loop import run_stage
from mmrl.retrieval.train_stages import load_stage_config
from mmrl.retrieval.train_sft import SFTLoss

from tests.retrieval.router_support import make_router_world

SMALL = ["router.top_k=3", "train.batch_size=6", "train.save_every=5", "train.index_refresh=5", "train.lr=1e-3"]


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    root = tmp_path_factory.mktemp("worlds")
    return root, [make_router_world(root / f"w{n}", n_images=5 + n) for n in range(3)]


def _cfg(train, out, *extra, stage="sft"):
    return load_stage_config(stage, [], [f"data.train={train}", f"train.out_dir={out}", *SMALL, *extra])


def test_a_glob_joins_the_worlds_and_each_query_resolves_in_its_own_corpus(worlds, tmp_path):
    root, files = worlds
    corpus, queries, held = load_data(_cfg(f"{root}/w*/queries.json", tmp_path / "o"), say=lambda *_: None)
    assert isinstance(corpus, CorpusUnion) and held is None
    assert sorted(corpus.parts) == ["w0", "w1", "w2"] and len(corpus) == 5 + 6 + 7
    assert len(queries) == 18 and len({q.id for q in queries}) == 18  # the worlds' ids ("q0", "im0") collide
    for q in queries:
        part = corpus.part_of(q.chain[0])
        src = json.loads(open(q.meta["source"]).read())["corpus"]
        assert all(corpus.part_of(i) == part for i in q.chain)
        assert corpus.sources[part] == str((root / part / src).resolve())
        assert corpus.by_id[q.chain[0]].image.startswith(str(root / part))  # its own world's image file


def test_a_single_file_and_a_list_of_one_keep_the_plain_corpus(worlds, tmp_path):
    _, files = worlds
    for spec in (str(files[0]), f"[{files[0]}]"):
        corpus, queries, _ = load_data(_cfg(spec, tmp_path / "o"), say=lambda *_: None)
        assert not isinstance(corpus, CorpusUnion) and queries[0].chain[0].startswith("im")


def test_candidates_and_rollouts_stay_in_the_querys_corpus(worlds, tmp_path):
    root, files = worlds
    cfg = _cfg(f"[{files[0]},{files[2]}]", tmp_path / "o", "router.top_k=50")
    corpus, queries, _ = load_data(cfg, say=lambda *_: None)
    router = build_router(cfg, corpus).eval()
    gen = torch.Generator().manual_seed(0)
    queries = queries[::2]  # both worlds, fewer episodes
    eps = router.rollout(queries, mode="sample", generator=gen)
    for q, ep in zip(queries, eps):
        part = corpus.part_of(q.chain[0])
        for st in ep.steps:
            assert all(corpus.part_of(c) == part for c in st.candidates)  # empty once the chain holds the part
        assert len(ep.steps[0].candidates) == len(corpus.parts[part])  # top_k 50 > the part: all of it, nothing else
    from mmrl.data.vhop_format import VhopQuery

    with pytest.raises(ValueError, match="gold chain to name its corpus"):
        router.rollout([VhopQuery("free", "any text", "exact", 1, [])])


def test_an_sft_step_draws_its_states_and_negatives_from_one_world(worlds, tmp_path, monkeypatch):
    import mmrl.retrieval.train_sft as sft

    root, _ = worlds
    cfg = _cfg(f"{root}/w*/queries.json", tmp_path / "o", "sft.hard_negatives=3")
    corpus, queries, _ = load_data(cfg, say=lambda *_: None)
    router = build_router(cfg, corpus)
    keys, embed = [], router.image_embeddings

    def spy(ids, grad):
        if grad:
            keys.append(list(ids))
        return embed(ids, grad)

    monkeypatch.setattr(router, "image_embeddings", spy)
    monkeypatch.setattr(sft, "info_nce", lambda *a: sft.torch.zeros((), requires_grad=True))
    loss, gen = sft.SFTLoss(), torch.Generator().manual_seed(1)
    ctx = loss.setup(cfg, router, corpus)
    for step in range(6):
        loss(router, queries, step, gen, ctx)
    parts = [{corpus.part_of(k) for k in ks} for ks in keys]
    assert all(len(p) == 1 for p in parts)  # positives and hard negatives of a step: one world
    assert len(set().union(*parts)) > 1  # the steps visit several worlds
    assert all(len(ks) > 1 for ks in keys)  # and have negatives there


@pytest.mark.slow
def test_sft_then_imitation_train_on_many_worlds(worlds, tmp_path):
    root, files = worlds
    sft_out = tmp_path / "sft"
    res = run_stage(_cfg(f"{root}/w*/queries.json", sft_out, "train.steps=3", "sft.hard_negatives=2",
                         f"data.eval={files[1]}", "train.eval_every=1"), SFTLoss(), quiet=True)
    # mid-run evaluations on the held-out corpus hand the joined corpora's per-world indexes back
    log = [json.loads(x) for x in (sft_out / "metrics.jsonl").read_text().splitlines()]
    assert [("eval/success" in r) for r in log] == [True, True, False]
    assert res["n"] == 6.0
    from mmrl.retrieval.train_imitate import ImitateLoss

    run_stage(_cfg(f"[{files[0]},{files[1]}]", tmp_path / "im", "train.steps=2", "train.batch_size=2",
                   f"train.init_from={sft_out}", stage="imitate"), ImitateLoss(), quiet=True)
    log = [json.loads(x) for x in (tmp_path / "im" / "metrics.jsonl").read_text().splitlines()]
    assert len(log) == 2 and all(r["states"] > 0 for r in log)
    from mmrl.retrieval.train_rl import RLLoss

    run_stage(_cfg(f"{root}/w*/queries.json", tmp_path / "rl", "train.steps=1", "train.batch_size=2",
                   "rl.group_size=2", f"train.init_from={sft_out}", f"rl.ref_from={sft_out}", stage="rl"),
              RLLoss(), quiet=True)
    assert (tmp_path / "rl" / "final" / "router.pt").is_file()


def test_cli_takes_a_list_of_query_files(capsys):
    from mmrl.cli import main

    assert main(["vhop", "sft", "--dry-run", "data.train=[a/q.json,b/q.json]", "train.out_dir=o"]) == 0
    assert "- a/q.json" in capsys.readouterr().out


def test_bad_data_specs_name_the_key(worlds, tmp_path):
    root, files = worlds
    with pytest.raises(ConfigError, match=r"data.train.*matches no file"):
        load_data(_cfg(f"{root}/nothing*/queries.json", tmp_path / "o"))
    with pytest.raises(ConfigError, match=r"data.train.*is a directory"):
        load_data(_cfg(str(root), tmp_path / "o"))
    with pytest.raises(ConfigError, match=r"data.train.*non-empty list"):
        _cfg("[]", tmp_path / "o")
    with pytest.raises(ConfigError, match=r"data.eval.*non-empty list"):
        _cfg(str(files[0]), tmp_path / "o", "data.eval=[1,2]")
    with pytest.raises(ConfigError, match=r"data.train.*more than once"):
        load_data(_cfg(f"[{files[0]},{files[0]}]", tmp_path / "o"))
    with pytest.raises(ConfigError, match=r"data.train.*query file not found.*missing.json"):
        load_data(_cfg(f"[{files[0]},{root}/missing.json]", tmp_path / "o"))


def test_two_query_files_over_one_corpus_share_its_part(worlds, tmp_path):
    root, files = worlds
    raw = json.loads(files[0].read_text())
    raw["queries"] = [dict(q, id=q["id"] + "b") for q in raw["queries"]]
    other = files[0].parent / "queries_more.json"
    other.write_text(json.dumps(raw))
    corpus, queries, _ = load_data(_cfg(f"[{files[0]},{other},{files[1]}]", tmp_path / "o"), say=lambda *_: None)
    assert sorted(corpus.parts) == ["w0", "w1"] and len(queries) == 18
    raw["queries"] = raw["queries"][:1]
    raw["queries"][0]["id"] = json.loads(files[0].read_text())["queries"][0]["id"]
    other.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=r"data.train.*also comes from"):
        load_data(_cfg(f"[{files[0]},{other}]", tmp_path / "o"))
    other.unlink()


@pytest.mark.slow
def test_sft_over_many_worlds_resumes_exactly(worlds, tmp_path):
    from tests.retrieval.test_router_stages import _resumed_equals_straight

    root, _ = worlds
    _resumed_equals_straight("sft", SFTLoss, f"{root}/w*/queries.json", tmp_path, "sft.hard_negatives=2")
