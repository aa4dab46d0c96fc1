"""A seed fixes training on CPU bit-exactly at any thread count: the shared-prompt scorers copy a prompt's KV cache
(and last hidden state) once per response, and the backward of that copy must add the responses' gradients in a
fixed order. ``keys[rows, ...]`` (``transformers``' ``DynamicLayer.batch_select_indices``) did not: with 2 threads
its backward adds them with parallel atomic float adds, so two identical passes differed in the last bits."""
import pytest
import torch
from transformers.cache_utils import DynamicCache

from mmrl.data.schema import Segment
from mmrl.models.kv_cache import growing_cache, select_rows
from mmrl.models.loading import load_model, load_processor
from mmrl.models.scoring import backbone, response_logprobs
from mmrl.models.sequence_scoring import score_shared
from mmrl.rollout.agent_loop_multi import sequence_inputs
from support import mixed_requests


@pytest.fixture
def two_threads():
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(old)


def test_select_rows_sums_repeated_rows_in_index_order(two_threads):
    """16 copies of 2 rows (65536 elements per layer: past ATen's parallel-accumulate threshold of 32768): the
    gradient of each source row is the sum of its copies' gradients in index order, bit for bit, every time."""
    g = torch.Generator().manual_seed(0)
    rows = torch.tensor([0, 1] * 8)
    up = torch.randn(16, 2, 64, 32, generator=g)
    ref = torch.zeros(2, 2, 64, 32)
    for i, r in enumerate(rows.tolist()):
        ref[r] += up[i]
    src = torch.randn(2, 2, 64, 32, generator=g)
    for _ in range(10):
        keys = src.clone().requires_grad_()
        cache = DynamicCache()
        cache.update(keys, keys.detach().clone(), 0)
        select_rows(cache, rows)
        assert torch.equal(cache.layers[0].keys.detach(), src[rows])
        cache.layers[0].keys.backward(up)
        assert torch.equal(keys.grad, ref)
    grown = growing_cache(cache, torch.tensor([1, 0]), capacity=8)  # a decoding cache keeps its own buffers
    select_rows(grown, torch.tensor([1, 1, 0]))
    assert torch.equal(grown.layers[0].keys, src[[0, 0, 1]]) and grown.layers[0]._k.shape == (3, 2, 64, 32)


def _grads_of_passes(model, score, passes: int = 3):
    """Parameter gradients (and log-probs) of ``passes`` identical forward+backward passes of ``score()``."""
    out = []
    for _ in range(passes):
        model.zero_grad(set_to_none=True)
        lps = score()
        torch.cat(lps).sum().backward()
        out.append((torch.cat(lps).detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                              if p.grad is not None}))
    return out


def test_shared_prompt_scorers_give_bit_identical_gradients_with_two_threads(tiny_model_path, two_threads):
    """The multi-turn scorer (``score_shared``) and the single-turn ``expand`` layout over 3 prompts x 6 responses
    of 12 tokens: three passes give the same log-probs and gradients, bit for bit."""
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    model.train()
    core, head = backbone(model)
    g = torch.Generator().manual_seed(0)
    reqs = mixed_requests(proc, lambda i: 6, lambda i: "What colour is the square? Answer with one word." + " x" * i)
    single = [(r.inputs, torch.randint(0, 500, (12,), generator=g)) for r in reqs for _ in range(6)]
    multi = [(sequence_inputs(p, [Segment("model", resp)]), resp) for p, resp in single]
    assert all(s.prompt is p for (s, _), (p, _) in zip(multi, single))
    differ = {}
    for name, score in (("score_shared", lambda: score_shared(core, head, multi, 1.0, 0, "cpu")),
                        ("expand", lambda: response_logprobs(model, single, micro_batch=18, strategy="expand"))):
        (lp0, g0), *rest = _grads_of_passes(model, score)
        assert any("visual" in n for n in g0)
        for lp, grads in rest:
            assert torch.equal(lp, lp0), name
            differ[name] = differ.get(name, 0) + sum(not torch.equal(grads[n], g0[n]) for n in g0)
    assert differ == {"score_shared": 0, "expand": 0}, f"parameters whose gradients differ between passes: {differ}"
