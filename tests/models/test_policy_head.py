"""The policy's support (``mmrl.models.policy_head``): the five vision tokens the config's range names are the
tokenizer's, for each tiny family and for Qwen's real vocabulary (151,652..151,656, the ids of Qwen2-VL/2.5-VL/3-VL),
and the HF engine samples and scores from that support."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig

from mmrl.models.loading import load_model, load_processor
from mmrl.models.policy_head import VISION_TOKENS, excluded_tokens, tokenizer_excluded_tokens
from mmrl.rollout.base import SamplingParams, build_engine
from support import mixed_requests


def test_each_family_config_range_is_its_tokenizer_vision_tokens(family_model_path):
    cfg, tok = AutoConfig.from_pretrained(family_model_path), load_processor(family_model_path).tokenizer
    assert excluded_tokens(cfg) == tokenizer_excluded_tokens(tok) and len(excluded_tokens(cfg)) == len(VISION_TOKENS)


def test_qwens_real_vocabulary_has_the_five_tokens_consecutive():
    from mmrl.models.chat_template import QWEN_VL_CHAT_TEMPLATE
    from mmrl.models.qwen_tokenizer import build_qwen_tokenizer

    tok = build_qwen_tokenizer(QWEN_VL_CHAT_TEMPLATE)
    # Qwen2-VL-2B-Instruct's config.json: vision_start_token_id 151652, video_token_id 151656
    cfg = type("C", (), {"vision_start_token_id": 151652, "video_token_id": 151656})()
    assert tokenizer_excluded_tokens(tok) == excluded_tokens(cfg) == list(range(151652, 151657))


def test_the_hf_engine_records_the_support_log_probs(tiny_model_path, monkeypatch):
    """With the vision tokens given most of the mass, the sampled tokens' recorded log-probs are those of the
    renormalised support (they would be lower by log(1 - p(vision)) under the full distribution)."""
    proc, model = load_processor(tiny_model_path), load_model(tiny_model_path)
    ids = excluded_tokens(model.config)
    with torch.no_grad():
        model.lm_head.weight[ids] *= 40  # tied: the embedding rows too; only the head's output matters here
    engine = build_engine("hf", model=model, processor=proc)
    reqs = mixed_requests(proc, lambda i: 2, lambda i: "Q?", lambda i: {"seed": i})
    torch.manual_seed(0)  # the HF engine draws from the global generator: the same tokens whatever ran before
    trajs = engine.generate(reqs, SamplingParams(max_new_tokens=4))
    from mmrl.models.scoring import response_logprobs

    scored = response_logprobs(model, [(reqs[t.inputs_key].inputs, t.response_ids) for t in trajs],
                               pad_id=proc.tokenizer.pad_token_id)
    import mmrl.models.prefill as prefill

    monkeypatch.setattr(prefill, "excluded_tokens", lambda config: [])  # the unrestricted distribution
    full = response_logprobs(model, [(reqs[t.inputs_key].inputs, t.response_ids) for t in trajs],
                             pad_id=proc.tokenizer.pad_token_id)
    for t, s, f in zip(trajs, scored, full):
        assert not any(int(x) in ids for x in t.response_ids)
        assert torch.allclose(t.logprobs, s, atol=1e-4)
        assert bool((t.logprobs > f + 0.5).all())  # not the full distribution's: the vision mass is renormalised away
