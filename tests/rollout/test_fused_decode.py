"""The HF engine's decode step without ``transformers``' wrappers (``mmrl.models.fused_decode.TextDecoder``): the same
tokens and the same log-probs, to the bit, as ``transformers``' forward (``HFEngine(fast_decode=False)``) in every
family (Qwen3-VL-MoE too) and both decode layouts, with LoRA adapters, and across the turns of multi-turn episodes;
and where it does not apply (eager attention, hooks on the text stack) the engine keeps ``transformers``' forward.
"""
import pytest
import torch

from mmrl.config import LoraConfig
from mmrl.models.fused_decode import SAME_FLOATS, TextDecoder
from mmrl.models.loading import load_model, load_processor, prepare_model
from mmrl.models.scoring import backbone
from mmrl.rollout.base import SamplingParams, build_engine
from support import mixed_requests

from test_kv_reuse import _run, _same

PARAMS = (SamplingParams(max_new_tokens=10), SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=10),
          SamplingParams(greedy=True, max_new_tokens=10))


def _equal_decodes(proc, model, layout="expand"):
    reqs = mixed_requests(proc, lambda i: 3, lambda i: "What colour is the square?" + " x" * i)
    fast = build_engine("hf", model=model, processor=proc, layout=layout)
    eager = build_engine("hf", model=model, processor=proc, layout=layout, fast_decode=False)
    for params in PARAMS:
        torch.manual_seed(7)
        a = eager.generate(reqs, params)
        torch.manual_seed(7)
        b = fast.generate(reqs, params)
        assert [t.response_ids.tolist() for t in a] == [t.response_ids.tolist() for t in b]
        for x, y in zip(a, b):
            assert torch.equal(x.logprobs, y.logprobs), (x.logprobs - y.logprobs).abs().max()


def test_every_family_decodes_as_transformers_does(family_model_path):  # Qwen2-VL, Qwen2.5-VL, Qwen3-VL
    proc, model = load_processor(family_model_path), load_model(family_model_path)
    assert (TextDecoder.build(backbone(model)[0]) is not None) == SAME_FLOATS  # older releases: transformers' forward
    for layout in ("expand", "packed"):  # one query per row; a group's samples side by side in its prompt's row
        _equal_decodes(proc, model, layout)


def test_mixture_of_experts_decodes_as_transformers_does(mmrl_cache):
    proc, model = load_processor("tiny-qwen3-vl-moe"), load_model("tiny-qwen3-vl-moe")
    assert (TextDecoder.build(backbone(model)[0]) is not None) == SAME_FLOATS  # older releases: transformers' forward
    _equal_decodes(proc, model)


def test_lora_adapters_go_through_the_fused_step(tiny_model_path):
    proc = load_processor(tiny_model_path)
    model = prepare_model(load_model(tiny_model_path), lora=LoraConfig(enabled=True, r=4, alpha=8))
    with torch.no_grad():  # non-zero adapters, so that a step that skipped them would differ
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    assert (TextDecoder.build(backbone(model)[0]) is not None) == SAME_FLOATS  # older releases: transformers' forward
    _equal_decodes(proc, model)


def test_multi_turn_episodes_decode_as_transformers_does(tiny_model_path):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    for params in (SamplingParams(max_new_tokens=4, greedy=True), SamplingParams(max_new_tokens=5)):
        _, a = _run(proc, model, True, params, engine=build_engine("hf", model=model, processor=proc,
                                                                   fast_decode=False))
        _, b = _run(proc, model, True, params)
        for x, y in zip(a, b):
            _same(x, y)
            assert torch.equal(x.logprobs, y.logprobs)


@pytest.mark.parametrize("why", ["eager attention", "a hook"])
def test_where_it_does_not_apply_transformers_forward_is_kept(tiny_model_path, why):
    proc = load_processor(tiny_model_path)
    model = load_model(tiny_model_path, attn_implementation="eager" if why == "eager attention" else "sdpa")
    core = backbone(model)[0]
    if why == "a hook":  # e.g. DeepSpeed ZeRO-3 gathering a layer's weights
        core.language_model.layers[0].mlp.register_forward_pre_hook(lambda m, args: None)
    assert TextDecoder.build(core) is None
    _equal_decodes(proc, model)
