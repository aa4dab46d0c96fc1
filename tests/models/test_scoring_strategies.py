"""Every shared-prompt scoring strategy equals a plain forward (log-probs and gradients) at short and long
responses; the engine's decode layouts return the same tokens as ``transformers``' ``generate``, also when
samples finish early; the growing KV cache equals concatenation."""
import collections

import pytest
import torch

from mmrl.models.kv_cache import GrowingLayer, growing_cache
from mmrl.models.loading import load_model, load_processor
from mmrl.models.scoring import PACKED_MAX_EXTRA_KEYS, response_logprobs, scoring_strategy, strategy_note
from mmrl.rollout.base import SamplingParams, build_engine
from support import mixed_requests, trained_position_ids, policy_log_softmax


def _requests(proc, n=3):
    return mixed_requests(proc, lambda i: n, lambda i: "What colour is the square?" + " x" * i)


def _plain_logprobs(model, inputs, resp):
    """One ordinary forward of the model over prompt + response, at the M-RoPE positions the models were trained
    with (``support.trained_position_ids``: computed afresh, not the scorer's cached ones)."""
    ids = torch.cat([inputs.input_ids, resp])[None]
    mm = torch.cat([inputs.mm_token_type_ids, torch.zeros_like(resp)])[None]
    logits = model(input_ids=ids, mm_token_type_ids=mm, position_ids=trained_position_ids(model, inputs, resp),
                   **inputs.vision).logits[0]
    P = inputs.num_tokens
    return policy_log_softmax(logits[P - 1 : P - 1 + resp.numel()].float(), model).gather(-1, resp[:, None]).squeeze(-1)


def _items(proc, lengths):
    g = torch.Generator().manual_seed(0)
    reqs = _requests(proc)
    # each prompt's 3 responses have different lengths (ragged packs), one of them exactly max(lengths)
    return [(r.inputs, torch.randint(0, 500, (L,), generator=g)) for r in reqs for L in lengths]


@pytest.mark.parametrize("lengths", [(1, 1, 1), (1, 3, 2), (5, 40, 17)])
@pytest.mark.parametrize("strategy", ["packed", "expand", "full", "auto"])
def test_logprobs_and_gradients_equal_a_plain_forward(tiny_model_path, strategy, lengths):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    model.train()
    items = _items(proc, lengths)
    ref = [_plain_logprobs(model, p, r) for p, r in items]
    torch.cat(ref).sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    ours = response_logprobs(model, items, micro_batch=5, pad_id=proc.tokenizer.pad_token_id, strategy=strategy)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5), (strategy, (a - b).abs().max())
    torch.cat(ours).sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == ref_grads.keys()  # the vision tower and the prompt's layers get gradients too
    assert any("visual" in n for n in grads)
    for n, g in grads.items():
        assert torch.allclose(g, ref_grads[n], atol=2e-5, rtol=1e-4), (strategy, n, (g - ref_grads[n]).abs().max())


def test_strategy_rule():
    assert scoring_strategy(70, 8, 4) == "packed"
    assert scoring_strategy(70, 8, PACKED_MAX_EXTRA_KEYS // 7) == "packed"
    assert scoring_strategy(70, 8, PACKED_MAX_EXTRA_KEYS // 7 + 1) == "expand"
    assert scoring_strategy(70, 8, 512) == "expand"
    assert scoring_strategy(70, 1, 4) == "expand"  # nothing to pack
    assert strategy_note(8, 4).startswith("shared-prompt layout: packed") and "28 <= 192" in strategy_note(8, 4)
    assert strategy_note(8, 256).startswith("shared-prompt layout: expand")
    with pytest.raises(ValueError, match="scoring strategy"):
        response_logprobs(None, [], strategy="dense")


def test_decode_layouts_match_generate_with_early_stops(tiny_model_path, monkeypatch):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    with torch.no_grad():  # sharper next-token distributions: some tokens recur, so one of them can end samples early
        model.lm_head.weight.mul_(2)
    reqs = _requests(proc, n=4)
    params = SamplingParams(max_new_tokens=30)
    torch.manual_seed(0)
    first = build_engine("hf", model=model, processor=proc, layout="expand").generate(reqs, params)
    # the token found in the most samples: as EOS it ends several of them, enough to drop rows from the forward
    eos = collections.Counter(x for t in first for x in set(t.response_ids.tolist())).most_common(1)[0][0]
    drops = []
    monkeypatch.setattr(GrowingLayer, "batch_select_indices",
                        lambda self, idx, f=GrowingLayer.batch_select_indices: (drops.append(len(idx)), f(self, idx)))
    outs = {}
    for name, kw in (("packed", dict(layout="packed")), ("expand", dict(layout="expand")), ("hf", dict(shared_prefill=False))):
        engine = build_engine("hf", model=model, processor=proc, **kw)
        engine.eos_id, engine.drop_fraction = eos, 0.01  # drop finished rows as soon as any finishes
        for p in (params, SamplingParams(max_new_tokens=30, temperature=0.7, top_p=0.9, top_k=20)):
            torch.manual_seed(0)
            outs.setdefault(name, []).extend(engine.generate(reqs, p))
    lengths = [t.response_ids.numel() for t in outs["expand"]]
    assert min(lengths) < 30 and drops  # samples ended early and the expand layout dropped finished rows
    for name in ("packed", "hf"):
        assert [t.response_ids.tolist() for t in outs[name]] == [t.response_ids.tolist() for t in outs["expand"]], name
        for a, b in zip(outs[name], outs["expand"]):
            assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5)
            assert a.truncated == b.truncated


def test_growing_cache_equals_concatenation():
    g = torch.Generator().manual_seed(0)
    k0, v0 = torch.randn(2, 2, 3, 4, generator=g), torch.randn(2, 2, 3, 4, generator=g)

    class Prefix:
        layers = [type("L", (), {"keys": k0, "values": v0})()]

    cache = growing_cache(Prefix, torch.tensor([1, 0, 1]), capacity=4)  # too small: must grow
    ref_k, ref_v = k0[[1, 0, 1]], v0[[1, 0, 1]]
    for _ in range(5):
        k, v = torch.randn(3, 2, 1, 4, generator=g), torch.randn(3, 2, 1, 4, generator=g)
        keys, values = cache.layers[0].update(k, v)
        ref_k, ref_v = torch.cat([ref_k, k], 2), torch.cat([ref_v, v], 2)
        assert torch.equal(keys, ref_k) and torch.equal(values, ref_v)
    cache.layers[0].batch_select_indices(torch.tensor([2, 0]))
    assert torch.equal(cache.layers[0].keys, ref_k[[2, 0]]) and cache.layers[0].get_seq_length() == 8
