"""``visual_retrieve`` (issue 11 item 2): images of the episode's own corpus through the suite's retriever backend;
every bad input is an error observation with a counted reason; the suite's ``retriever:`` is checked at load."""
import json

import pytest
import torch

from mmrl.data.synth_vhop import make_vhop_world
from mmrl.data.vhop_format import query_samples
from mmrl.errors import ConfigError
from mmrl.retrieval import RETRIEVERS, Retrieval, Retriever
from mmrl.tools import EpisodeState, load_suite, media_tokens, run_call

from support import REPO


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = tmp_path_factory.mktemp("vhop_tool")
    make_vhop_world(str(out), 5, 0, seed=2, size=56)
    return out


@pytest.fixture(scope="module")
def samples(world):
    return query_samples(str(world / "queries_train.json"))[0]


def _suite(tmp_path, model: str, retriever: dict | None = None, tools=("visual_retrieve",), **budget):
    text = (REPO / "tools" / "retrieval.yaml").read_text().replace("model: tiny ", f"model: {model} ")
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(text)
    cfg.budget.update(budget)
    cfg.tools = [{"name": t} for t in tools]
    if retriever is not None:
        cfg.retriever = retriever
    path = tmp_path / "suite.yaml"
    OmegaConf.save(cfg, path)
    return str(path)


@pytest.fixture(scope="module")
def suite(tiny_model_path, tmp_path_factory):
    return load_suite(_suite(tmp_path_factory.mktemp("suite"), tiny_model_path, max_images=3))


def _state(suite, sample):
    import copy

    return EpisodeState(sample=sample, media=None, budget=copy.copy(suite.config.budget), retriever=suite.retriever)


def _call(**arguments):
    return "<tool_call>\n" + json.dumps({"name": "visual_retrieve", "arguments": arguments}) + "\n</tool_call>"


def test_retrieve_returns_corpus_images_as_one_temporal_patch_each(suite, samples, world, monkeypatch):
    import PIL.Image

    opened = []
    real_open = PIL.Image.open
    monkeypatch.setattr(PIL.Image, "open", lambda fp, *a, **k: (opened.append(str(fp)), real_open(fp, *a, **k))[1])
    st = _state(suite, samples[0])
    rec = run_call(_call(query="/etc/passwd the red circle", k=3), suite.tools, st)
    assert rec.valid, rec.message
    m = rec.output.media
    assert m.is_video and m.frames.shape[0] == 6 and m.frames.dtype == torch.uint8
    assert torch.equal(m.frames[0], m.frames[1]) and torch.equal(m.frames[4], m.frames[5])
    h, w = m.frames.shape[-2:]
    assert rec.media_tokens == media_tokens(m) == 3 * (h // 28) * (w // 28) == st.media_tokens_used
    info = rec.info()
    corpus_ids = {p.stem for p in (world / "images").glob("train-*.png")}
    assert len(info["retrieved"]) == 3 and set(info["retrieved"]) <= corpus_ids
    assert info["retriever"] == "single_step" and info["corpus_skipped"] == 0
    assert opened and all(p.startswith(str(world / "images")) for p in opened)  # only the episode's corpus
    # k defaults to the budget's max_images
    rec = run_call(_call(query="a green square"), suite.tools, _state(suite, samples[1]))
    assert rec.valid and len(rec.info()["retrieved"]) == 3


@pytest.mark.parametrize("arguments, reason", [
    ({"query": "x", "k": 4}, "over_budget"),  # more images than budget.max_images
    ({"query": "x", "k": 0}, "invalid_arguments"),
    ({"query": "x", "k": 1000}, "invalid_arguments"),
    ({"query": "x", "k": "3"}, "invalid_arguments"),
    ({"query": "x", "k": 2.5}, "invalid_arguments"),
    ({"query": ""}, "invalid_arguments"),
    ({"query": "   "}, "invalid_arguments"),
    ({"query": "y" * 450}, "invalid_arguments"),
    ({"query": 7}, "invalid_arguments"),
    ({"k": 2}, "invalid_arguments"),
    ({"query": "x", "path": "/etc/passwd"}, "invalid_arguments"),
])
def test_bad_arguments_are_counted_errors(suite, samples, arguments, reason):
    rec = run_call(_call(**arguments), suite.tools, _state(suite, samples[0]))
    assert not rec.valid and rec.reason == reason, (rec.reason, rec.message)


def test_bad_calls_and_episodes(suite, samples):
    st = _state(suite, samples[0])
    assert run_call("<tool_call>" + json.dumps({"name": "visual_retrieve", "arguments": {"query": "z" * 10_000}})
                    + "</tool_call>", suite.tools, st).reason == "too_long"
    assert run_call('<tool_call>{"name": "visual_retrieve", "arguments": {"query": "x", "k": NaN}}</tool_call>',
                    suite.tools, st).reason == "non_finite"
    assert run_call('<tool_call>{"name": "visual_retrieve", "arguments": {"query": "x", "k": 1e999}}</tool_call>',
                    suite.tools, st).reason == "non_finite"
    assert run_call(_call(query="x", k=1), suite.tools, st).reason == "over_budget"  # the 4th call of 3
    no_corpus = _state(suite, samples[0])
    no_corpus.sample = type(samples[0])(**{**samples[0].__dict__, "meta": {}})
    assert run_call(_call(query="x"), suite.tools, no_corpus).reason == "out_of_range"
    no_backend = _state(suite, samples[0])
    no_backend.retriever = None
    rec = run_call(_call(query="x"), suite.tools, no_backend)
    assert rec.reason == "tool_failed" and "retriever" in rec.message


def test_media_budget_caps_the_images(tiny_model_path, samples, tmp_path):
    s = load_suite(_suite(tmp_path, tiny_model_path, max_images=4, max_media_tokens=10))
    rec = run_call(_call(query="x", k=4), s.tools, _state(s, samples[0]))
    assert rec.reason == "over_budget" and "visual tokens" in rec.message


def test_bad_corpus_is_a_failed_call_or_skipped_and_counted(tiny_model_path, samples, world, tmp_path):
    import shutil

    w = tmp_path / "w"
    shutil.copytree(world, w)
    bad = sorted((w / "images").glob("*.png"))[0]
    bad.write_bytes(b"not a png")
    sample = query_samples(str(w / "queries_train.json"), skip_bad=True)[0][0]
    s = load_suite(_suite(tmp_path, tiny_model_path))
    rec = run_call(_call(query="x"), s.tools, _state(s, sample))
    assert rec.reason == "tool_failed" and bad.stem in rec.message
    assert rec.info()["reason"] == "tool_failed"  # the turn's record, which tools/invalid/<reason> counts
    s = load_suite(_suite(tmp_path, tiny_model_path, retriever={"name": "single_step", "model": tiny_model_path,
                                                                "skip_bad_images": True}))
    rec = run_call(_call(query="x"), s.tools, _state(s, sample))
    assert rec.valid and rec.info()["corpus_skipped"] == 1 and bad.stem not in rec.info()["retrieved"]


class _Reverse(Retriever):
    """A stand-in backend: the last k corpus ids, in reverse order (shows that a registered backend plugs in)."""

    name = "reverse_ids"

    def build_index(self, corpus, batch_size: int = 32):
        from mmrl.retrieval import CorpusIndex

        index = CorpusIndex(2, corpus)
        index.add(corpus.ids, torch.ones(len(corpus), 2))
        return index

    def retrieve_batch(self, queries, index, k):
        return [Retrieval(ids=index.ids[::-1][:k], scores=[0.0] * k, info={"order": "hop order"}) for _ in queries]


def test_a_registered_backend_plugs_into_the_suite(samples, tmp_path):
    if "reverse_ids" not in RETRIEVERS:
        RETRIEVERS.register("reverse_ids")(lambda model, device=None, **options: _Reverse(embedder=None))
    s = load_suite(_suite(tmp_path, "tiny", retriever={"name": "reverse_ids", "model": "tiny"}))
    rec = run_call(_call(query="x", k=2), s.tools, _state(s, samples[0]))
    assert rec.valid, rec.message
    ids = s.retriever.index(samples[0].meta["corpus"]).ids
    assert rec.info()["retrieved"] == ids[::-1][:2] and "hop order" in rec.output.text


def test_suite_retriever_key_is_checked(tiny_model_path, tmp_path):
    path = tmp_path / "no_retriever.yaml"
    path.write_text("tools: [{name: visual_retrieve}]\n")
    with pytest.raises(ConfigError, match="key 'retriever' is required"):
        load_suite(str(path))
    path.write_text("tools: [{name: zoom}]\nretriever: {name: single_step}\n")
    with pytest.raises(ConfigError, match="no listed tool uses it"):
        load_suite(str(path))
    path.write_text("tools: [{name: visual_retrieve}]\nretriever: {name: singel_step}\n")
    with pytest.raises(ConfigError, match="retriever.name.*did you mean 'single_step'"):
        load_suite(str(path))
    path.write_text("tools: [{name: visual_retrieve}]\nretriever: {name: single_step, model: /no/such/ckpt}\n")
    with pytest.raises(ConfigError, match="retriever.model.*/no/such/ckpt"):
        load_suite(str(path))
    path.write_text("tools: [{name: visual_retrieve}]\nretriever: {name: single_step, modle: tiny}\n")
    with pytest.raises(ConfigError, match="modle"):
        load_suite(str(path))
    path.write_text("tools: [{name: visual_retrieve}]\nbudget: {max_images: 0}\nretriever: {name: single_step}\n")
    with pytest.raises(ConfigError, match="budget.max_images"):
        load_suite(str(path))
