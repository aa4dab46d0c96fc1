"""``mmrl.rollout.sampling.multinomial_rows``: ``torch.multinomial``'s draw bit for bit (tokens and the generator's
state after), its fallback to ``torch.multinomial`` where the build draws otherwise, and the HF engine's fast decode
against its eager decode (same tokens, same log-probs) in both decode layouts."""
import pytest
import torch

import mmrl.rollout.sampling as sampling
from mmrl.models.loading import load_model, load_processor
from mmrl.rollout.base import SamplingParams, build_engine
from mmrl.rollout.sampling import exact_on_this_build, multinomial_rows
from support import mixed_requests


def _probs(n, v, seed, zeros=0):
    p = torch.softmax(torch.randn(n, v, generator=torch.Generator().manual_seed(seed)) * 4, -1)
    if zeros:  # top-k style: most of each row removed
        p[:, zeros:] = 0
        p = p / p.sum(-1, keepdim=True)
    return p


@pytest.mark.parametrize("n,v,zeros", [(1, 2, 0), (7, 50, 0), (64, 651, 0), (3, 140000, 0), (5, 300, 3), (33, 9000, 0)])
def test_same_tokens_and_generator_state_as_torch_multinomial(n, v, zeros):
    assert exact_on_this_build()
    for seed in range(3):
        p = _probs(n, v, seed, zeros)
        torch.manual_seed(seed)
        ref, after_ref = torch.multinomial(p, 1).squeeze(1), torch.rand(4)
        torch.manual_seed(seed)
        ours, after = multinomial_rows(p), torch.rand(4)
        assert torch.equal(ours, ref) and torch.equal(after, after_ref)


def test_block_boundaries_keep_the_stream(monkeypatch):
    """Rows drawn in blocks of any size advance the generator as one draw over the whole tensor."""
    p = _probs(10, 37, 0)
    torch.manual_seed(5)
    ref = torch.multinomial(p, 1).squeeze(1)
    for block in (1, 37, 38, 100, 10 * 37):
        monkeypatch.setattr(sampling, "BLOCK_ELEMENTS", block)
        torch.manual_seed(5)
        assert torch.equal(multinomial_rows(p), ref)


def test_a_build_that_draws_otherwise_falls_back_to_torch_multinomial(monkeypatch):
    monkeypatch.setattr(sampling, "_EXACT", None)
    monkeypatch.setattr(sampling, "_race", lambda probs: probs.argmax(-1))  # a draw that is not torch's
    assert not exact_on_this_build()
    p = _probs(16, 40, 1)
    torch.manual_seed(3)
    ref = torch.multinomial(p, 1).squeeze(1)
    torch.manual_seed(3)
    assert torch.equal(multinomial_rows(p), ref)  # the fallback, not the broken draw
    assert not torch.equal(ref, p.argmax(-1))


def test_a_bad_distribution_raises_torchs_error():
    with pytest.raises(RuntimeError):
        multinomial_rows(torch.tensor([[0.5, float("nan")]]))
    with pytest.raises(RuntimeError):
        multinomial_rows(torch.zeros(2, 3))


@pytest.mark.parametrize("layout", ["packed", "expand"])
def test_fast_decode_equals_the_eager_decode(tiny_model_path, layout):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    reqs = mixed_requests(proc, lambda i: 4, lambda i: "What colour is the square?" + " x" * i)
    fast = build_engine("hf", model=model, processor=proc, layout=layout)
    eager = build_engine("hf", model=model, processor=proc, layout=layout, fast_decode=False)
    for params in (SamplingParams(max_new_tokens=12), SamplingParams(temperature=0.7, top_k=20, top_p=0.9,
                                                                    max_new_tokens=12)):
        torch.manual_seed(11)
        a = eager.generate(reqs, params)
        torch.manual_seed(11)
        b = fast.generate(reqs, params)
        assert [t.response_ids.tolist() for t in a] == [t.response_ids.tolist() for t in b]
        for x, y in zip(a, b):
            assert torch.equal(x.logprobs, y.logprobs)
