"""``visual_retrieve`` backed by the router (``retriever: router``): one call returns the router's whole chain, the
same chain as ``Router.rollout`` greedy on that query, in hop order, capped to ``k`` from its end."""
import copy
import json

import pytest
from omegaconf import OmegaConf

from mmrl.data.vhop_format import load_queries, query_samples
from mmrl.errors import ConfigError
from mmrl.retrieval.router_backend import load_router
from mmrl.retrieval.train_loop import run_stage
from mmrl.retrieval.train_stages import load_stage_config
from mmrl.retrieval.train_sft import SFTLoss
from mmrl.tools import EpisodeState, load_suite, run_call
from support import REPO
from tests.retrieval.router_support import make_router_world


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("router_tool")
    q = make_router_world(root / "w", n_images=6)
    out = root / "sft"
    run_stage(load_stage_config("sft", [], [f"data.train={q}", f"train.out_dir={out}", "train.steps=2",
                                            "router.top_k=4", "router.max_hops=3", "train.batch_size=2"]),
              SFTLoss(), quiet=True)
    return root, q, out


def _suite(path, model, **options):
    cfg = OmegaConf.load(REPO / "tools" / "retrieval_router.yaml")
    cfg.retriever.model, cfg.retriever.options = str(model), options
    OmegaConf.save(cfg, path)
    return load_suite(str(path))


def test_one_call_returns_the_whole_chain(trained, tmp_path):
    root, q, out = trained
    suite = _suite(tmp_path / "s.yaml", out)
    sample = query_samples(str(q))[0][2]
    st = EpisodeState(sample=sample, media=None, budget=copy.copy(suite.config.budget), retriever=suite.retriever)
    call = {"name": "visual_retrieve", "arguments": {"query": sample.question}}
    rec = run_call("<tool_call>\n" + json.dumps(call) + "\n</tool_call>", suite.tools, st)
    assert rec.valid, rec.message
    info = rec.info()
    router = load_router(str(out))
    corpus_query = load_queries(str(q))[0][2]
    router.set_corpus(suite.retriever.index(sample.meta["corpus"]).corpus)
    (ep,) = router.rollout([corpus_query], mode="greedy")
    assert info["retriever"] == "router" and info["order"] == "hop order"
    assert info["retrieved"] == ep.chain and 1 <= len(ep.chain) <= 3  # max_hops of the stage config
    assert info["actions"] == [s.action for s in ep.steps]
    assert rec.output.media.frames.shape[0] == 2 * len(ep.chain)
    # k caps the chain from its end (the target side)
    call["arguments"]["k"] = 1
    st2 = EpisodeState(sample=sample, media=None, budget=copy.copy(suite.config.budget), retriever=suite.retriever)
    rec = run_call("<tool_call>\n" + json.dumps(call) + "\n</tool_call>", suite.tools, st2)
    assert rec.info()["retrieved"] == ep.chain[-1:]


def test_router_suite_errors_name_the_key(trained, tmp_path):
    _, _, out = trained
    with pytest.raises(ConfigError, match="retriever.model"):
        _suite(tmp_path / "a.yaml", tmp_path / "missing")
    suite = _suite(tmp_path / "b.yaml", out, beam=3)
    with pytest.raises(ValueError, match="unknown option"):
        suite.retriever.backend
