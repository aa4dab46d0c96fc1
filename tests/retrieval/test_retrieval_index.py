"""The embedder on the tiny Qwen2.5-VL, the faiss corpus index and the single-step retriever (issue 19)."""
import numpy as np
import pytest
import torch

from mmrl.data.synth_vhop import make_vhop_world
from mmrl.data.vhop_format import load_corpus, load_queries
from mmrl.retrieval import RETRIEVERS, CorpusIndex, Embedder, SingleStepRetriever, build_retriever


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("vhop_idx")
    make_vhop_world(str(out), 6, 0, seed=1, size=56)
    return load_corpus(str(out / "corpus_train.json"))


@pytest.fixture(scope="module")
def embedder(tiny_model_path):
    torch.manual_seed(0)
    return Embedder.from_pretrained(tiny_model_path, dim=32).eval()


@pytest.fixture(scope="module")
def index(embedder, corpus):
    return CorpusIndex.build(embedder, corpus, batch_size=8)


def test_embeddings_are_unit_vectors_and_batching_does_not_change_them(embedder, corpus):
    imgs = [corpus.image(i) for i in corpus.ids[:3]]
    with torch.no_grad():
        v = embedder.embed_images(imgs)
        assert v.shape == (3, 32) and torch.allclose(v.norm(dim=1), torch.ones(3), atol=1e-5)
        states = embedder.embed_states([("a red circle", imgs[:2]), ("blue", []), ("green square", imgs[2:])])
        for s, (q, ims) in zip(states, [("a red circle", imgs[:2]), ("blue", []), ("green square", imgs[2:])]):
            assert torch.allclose(s, embedder.embed_state(q, ims), atol=1e-5)  # right padding is masked out
        # the state depends on the images retrieved so far
        assert not torch.allclose(embedder.embed_state("q", imgs[:1]), embedder.embed_state("q", imgs[1:2]))


def test_embed_state_is_differentiable(embedder, corpus):
    embedder.zero_grad()
    e = embedder.embed_state("the red circle", [corpus.image(corpus.ids[0])])
    (e @ embedder.embed_images([corpus.image(corpus.ids[1])])[0]).backward()
    assert embedder.head.weight.grad is not None and embedder.head.weight.grad.abs().sum() > 0
    visual = [p.grad for n, p in embedder.named_parameters() if "visual" in n and p.grad is not None]
    assert visual and any(g.abs().sum() > 0 for g in visual)  # gradients reach the vision tower
    embedder.zero_grad()


def test_last_token_pooling_and_bad_pooling(tiny_model_path, corpus):
    emb = Embedder.from_pretrained(tiny_model_path, pooling="last").eval()
    with torch.no_grad():
        assert emb.embed_images([corpus.image(corpus.ids[0])]).shape == (1, emb.dim)
    with pytest.raises(ValueError, match="pooling"):
        Embedder(emb.model, emb.processor, pooling="max")


def test_every_image_ranks_itself_first(embedder, corpus, index):
    assert len(index) == len(corpus) and index.ids == corpus.ids
    with torch.no_grad():
        q = embedder.embed_images([corpus.image(i) for i in corpus.ids])
    scores, ids = index.search(q, 3)
    assert [row[0] for row in ids] == corpus.ids
    assert np.allclose(scores[:, 0], 1.0, atol=1e-4) and (np.diff(scores, axis=1) <= 1e-6).all()


def test_index_save_load_and_bad_input(index, corpus, tmp_path):
    index.save(str(tmp_path / "idx"))
    back = CorpusIndex.load(str(tmp_path / "idx"), corpus)
    q = index.vectors(corpus.ids[:2])
    assert back.ids == index.ids and back.search(q, 4)[1] == index.search(q, 4)[1]
    assert index.search(q, 10_000)[0].shape == (2, len(corpus))
    with pytest.raises(ValueError, match="dimension"):
        index.search(torch.ones(1, 5), 1)
    with pytest.raises(ValueError, match="NaN"):
        index.search(torch.full((1, index.dim), float("nan")), 1)
    with pytest.raises(ValueError, match="already in the index"):
        index.add(corpus.ids[:1], q[:1])
    with pytest.raises(ValueError, match="k must be"):
        index.search(q, 0)


def test_save_and_reload_embedder(embedder, corpus, tmp_path):
    img = [corpus.image(corpus.ids[0])]
    back = Embedder.from_pretrained(embedder.save(str(tmp_path / "emb"))).eval()
    with pytest.raises(ValueError, match="saved embedder.*dim"):
        Embedder.from_pretrained(str(tmp_path / "emb"), dim=8)
    with torch.no_grad():
        assert torch.allclose(back.embed_images(img), embedder.embed_images(img), atol=1e-5)
        assert torch.allclose(back.embed_state("x", img), embedder.embed_state("x", img), atol=1e-5)


def test_lora_embedder_saves_its_adapter(tiny_model_path, corpus, tmp_path):
    from mmrl.config import LoraConfig

    emb = Embedder.from_pretrained(tiny_model_path, dim=16, lora=LoraConfig(enabled=True, r=4)).eval()
    trainable = [n for n, p in emb.named_parameters() if p.requires_grad]
    assert any("lora_" in n for n in trainable) and not any("visual" in n for n in trainable)
    back = Embedder.from_pretrained(emb.save(str(tmp_path / "lora")))
    assert (tmp_path / "lora" / "adapter").is_dir()
    img = [corpus.image(corpus.ids[0])]
    with torch.no_grad():
        assert torch.allclose(back.eval().embed_images(img), emb.embed_images(img), atol=1e-5)


def test_single_step_retriever_and_registry(embedder, index, corpus, tiny_model_path):
    r = SingleStepRetriever(embedder)
    out = r.retrieve_batch(["the red circle", "a blue square in the plain navy scene"], index, 5)
    assert [len(o.ids) for o in out] == [5, 5] and all(i in corpus for o in out for i in o.ids)
    assert out[0].scores == sorted(out[0].scores, reverse=True)
    assert r.retrieve("the red circle", index, 5).ids == out[0].ids
    assert "single_step" in RETRIEVERS.names()
    with pytest.raises(KeyError, match="known: .*single_step"):  # (and router, once registered)
        build_retriever("singel_step", tiny_model_path)
    with pytest.raises(ValueError, match="unknown option"):
        build_retriever("single_step", tiny_model_path, temperature=0.1)
    built = build_retriever("single_step", tiny_model_path, dim=8)
    assert isinstance(built, SingleStepRetriever) and built.embedder.dim == 8
