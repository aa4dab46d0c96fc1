"""``logprob_parity``: the HF engine's sampling log-probs equal the scorer's on the same tokens (CPU), and a
sampler that drifts from the trainer is caught."""
from __future__ import annotations

import torch

from mmrl.models.loading import load_model, load_processor
from mmrl.rollout.base import SamplingParams, build_engine
from mmrl.rollout.parity import logprob_parity

from test_vllm_engine import requests_for


def test_hf_engine_matches_the_scorer(family_model_path):  # Qwen2-VL, Qwen2.5-VL, Qwen3-VL
    proc, model = load_processor(family_model_path), load_model(family_model_path)
    engine = build_engine("hf", model=model, processor=proc)
    torch.manual_seed(0)
    for params in (SamplingParams(temperature=1.0, max_new_tokens=6), SamplingParams(temperature=0.7, max_new_tokens=6),
                   SamplingParams(greedy=True, max_new_tokens=6)):
        rep = logprob_parity(engine, model, requests_for(proc), params, proc.tokenizer.pad_token_id)
        assert rep.sequences == 7 and rep.tokens >= 7 and rep.tokens_per_s > 0
        assert rep.ok(1e-5), rep


def test_a_drifting_sampler_is_caught(tiny_model_path):
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    stale = load_model(tiny_model_path)
    with torch.no_grad():  # the sampler kept old weights (e.g. a missed weight sync)
        for p in stale.parameters():
            p.add_(0.05 * torch.randn_like(p))
    engine = build_engine("hf", model=stale, processor=proc)
    rep = logprob_parity(engine, model, requests_for(proc), SamplingParams(max_new_tokens=6), proc.tokenizer.pad_token_id)
    assert not rep.ok(1e-3) and rep.max_abs > 1e-2 and "@" in rep.worst
