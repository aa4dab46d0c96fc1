"""The HF engine's decode step without ``transformers``' wrappers (``mmrl.models.fused_decode.TextDecoder``): the same
tokens and the same log-probs, to the bit, as ``transformers``' forward (``HFEngine(fast_decode=False)``) in every
family (Qwen3-VL-MoE too) and both decode layouts, with LoRA adapters, and across the turns of multi-turn episodes;
the step is switched on by a self-check against that forward (``fused_decode.self_check``), whose verdict is the
whole decode's, which leaves the RNG and the model as they were, and which turns a step that rounds otherwise off
with one logged line; where the step does not apply (eager attention, hooks) the engine keeps ``transformers``' forward.
"""
import logging

import pytest
import torch
import transformers
from packaging.version import Version

from mmrl.config import LoraConfig
from mmrl.models import fused_decode
from mmrl.models.fused_decode import GQA_FORMS, TextDecoder, self_check
from mmrl.models.loading import load_model, load_processor, prepare_model
from mmrl.models.scoring import backbone
from mmrl.rollout.base import SamplingParams, build_engine
from support import mixed_requests

from test_kv_reuse import _run, _same

PARAMS = (SamplingParams(max_new_tokens=10), SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=10),
          SamplingParams(greedy=True, max_new_tokens=10))
# the step follows 5.24's order of operations: from there on the self-check must pass (older: measured, see docs)
WRITTEN_FOR = Version(transformers.__version__) >= Version("5.24.0")


def _decodes(proc, model, layout="expand"):
    """``(eager, fast)`` trajectories of the same requests under the same seeds, for every ``PARAMS``."""
    reqs = mixed_requests(proc, lambda i: 3, lambda i: "What colour is the square?" + " x" * i)
    fast = build_engine("hf", model=model, processor=proc, layout=layout)
    eager = build_engine("hf", model=model, processor=proc, layout=layout, fast_decode=False)
    out = ([], [])
    for params in PARAMS:
        for arm, engine in zip(out, (eager, fast)):
            torch.manual_seed(7)
            arm.extend(engine.generate(reqs, params))
    return out


def _same_floats(a, b) -> bool:
    return all(torch.equal(x.response_ids, y.response_ids) and torch.equal(x.logprobs, y.logprobs)
               for x, y in zip(a, b))


def _equal_decodes(proc, model, layout="expand"):
    a, b = _decodes(proc, model, layout)
    assert [t.response_ids.tolist() for t in a] == [t.response_ids.tolist() for t in b]
    for x, y in zip(a, b):
        assert torch.equal(x.logprobs, y.logprobs), (x.logprobs - y.logprobs).abs().max()


def _check(model, gqa=GQA_FORMS[0]):
    core = backbone(model)[0]
    dec = TextDecoder(TextDecoder.text_stack(core))
    dec.gqa = gqa
    return self_check(core, dec)


def _forced(monkeypatch, gqa):
    """The fused step in form ``gqa``, whatever its self-check says."""
    monkeypatch.setattr(fused_decode, "verdict", lambda core, dec: setattr(dec, "gqa", gqa))


def test_every_family_decodes_as_transformers_does(family_model_path, monkeypatch):  # Qwen2-VL, 2.5-VL, 3-VL
    proc, model = load_processor(family_model_path), load_model(family_model_path)
    whys = {gqa: _check(model, gqa) for gqa in GQA_FORMS}
    assert whys["pack"] is None or not WRITTEN_FOR, whys
    for layout in ("expand", "packed"):  # one query per row; a group's samples side by side in its prompt's row
        _equal_decodes(proc, model, layout)
    for gqa, why in whys.items():  # the check's verdict is the whole decode's: forced on, equal iff the check passed
        _forced(monkeypatch, gqa)
        assert _same_floats(*_decodes(proc, model)) == (why is None), (gqa, why)


def test_mixture_of_experts_decodes_as_transformers_does(mmrl_cache):
    proc, model = load_processor("tiny-qwen3-vl-moe"), load_model("tiny-qwen3-vl-moe")
    assert TextDecoder.build(backbone(model)[0]) is not None or not WRITTEN_FOR
    _equal_decodes(proc, model)


def test_lora_adapters_go_through_the_fused_step(tiny_model_path):
    proc = load_processor(tiny_model_path)
    model = prepare_model(load_model(tiny_model_path), lora=LoraConfig(enabled=True, r=4, alpha=8))
    with torch.no_grad():  # non-zero adapters, so that a step that skipped them would differ
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    assert TextDecoder.build(backbone(model)[0]) is not None or not WRITTEN_FOR
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


def _rotate_in_float64(x, cos, sin):
    """The same rotation, rounded once instead of three times: a step that differs in the last bits."""
    h = x.shape[-1] // 2
    rot = torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return (x.double() * cos.double() + rot.double() * sin.double()).to(x.dtype)


def test_a_step_that_rounds_otherwise_fails_the_check_and_the_engine_falls_back(tiny_model_path, monkeypatch, caplog):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    passing = [gqa for gqa in GQA_FORMS if _check(model, gqa) is None]  # before the change
    monkeypatch.setattr(fused_decode, "_rotate", _rotate_in_float64)
    with caplog.at_level(logging.WARNING, logger=fused_decode.__name__):
        _equal_decodes(proc, model)  # 6 decodes, one check
        assert TextDecoder.build(backbone(model)[0]) is None
    lines = [r.getMessage() for r in caplog.records if r.name == fused_decode.__name__]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert "differ from transformers' forward at expand step 1" in lines[0] and "transformers' forward" in lines[0]
    assert lines[0].count("differ from transformers' forward") == len(GQA_FORMS)  # every form tried
    for gqa in passing:  # what the check kept out: forced on, the changed step changes the log-probs
        _forced(monkeypatch, gqa)
        assert not _same_floats(*_decodes(proc, model)), gqa


def test_the_self_check_leaves_the_rng_and_the_model_as_they_were(tiny_model_path):
    model = load_model(tiny_model_path)
    model.train()
    core = backbone(model)[0]
    core.visual.eval()  # mixed modes come back as they were, not all train() or all eval()
    modes = {n: m.training for n, m in model.named_modules()}
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    core.rope_deltas = marker = torch.tensor([[3]])
    torch.manual_seed(5)
    state = torch.get_rng_state()
    assert _check(model) is None or not WRITTEN_FOR
    assert torch.equal(torch.get_rng_state(), state)
    assert {n: m.training for n, m in model.named_modules()} == modes
    assert core.rope_deltas is marker
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    for n, p in model.named_parameters():
        assert p.grad is None and torch.equal(p, params[n]), n


def test_the_check_runs_once_per_model_dtype_and_device(tiny_model_path, monkeypatch):
    calls = []
    monkeypatch.setattr(fused_decode, "self_check", lambda core, dec: calls.append(dec) or None)
    model = load_model(tiny_model_path)
    core = backbone(model)[0]
    assert TextDecoder.build(core) is not None and TextDecoder.build(core) is not None and len(calls) == 1
    assert TextDecoder.build(backbone(load_model(tiny_model_path))[0]) is not None and len(calls) == 2  # another model
    model.to(torch.float64)
    assert TextDecoder.build(core) is not None and len(calls) == 3  # another dtype


@pytest.mark.parametrize("why", ["eager attention", "a hook", "a hook on the core"])
def test_where_it_does_not_apply_transformers_forward_is_kept(tiny_model_path, why):
    proc = load_processor(tiny_model_path)
    model = load_model(tiny_model_path, attn_implementation="eager" if why == "eager attention" else "sdpa")
    core = backbone(model)[0]
    if why == "a hook":  # e.g. DeepSpeed ZeRO-3 gathering a layer's weights
        core.language_model.layers[0].mlp.register_forward_pre_hook(lambda m, args: None)
    if why == "a hook on the core":  # the fused step does not go through the core's forward
        core.register_forward_hook(lambda m, args, out: None)
    assert TextDecoder.build(core) is None
    _equal_decodes(proc, model)
