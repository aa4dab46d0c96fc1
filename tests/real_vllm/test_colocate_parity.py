"""The colocated vLLM engine against the trainer's scorer, on vLLM's own CPU build (not a stand-in): for Qwen2-VL,
Qwen2.5-VL and Qwen3-VL, an image, a 4-frame video and a 16-frame 60 s video, vLLM expands each prompt to the HF
processor's tokens (``VLLMEngine.generate`` raises otherwise) and its processed log-probs of the tokens it sampled
equal the scorer's: <= 1e-5 in fp32, within ``BF16_TOL`` in bf16."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from mmrl.models.loading import load_model, load_processor  # noqa: E402

from colocate_support import BF16_TOL, FP32_TOL, parity, requests, row, vllm_engine  # noqa: E402

pytestmark = pytest.mark.slow
FAMILIES = ("tiny-qwen2-vl", "tiny", "tiny-qwen3-vl")


@pytest.mark.parametrize("family", FAMILIES)
def test_fp32_parity_on_an_image_a_short_and_a_long_video(family, mmrl_cache):
    proc, model = load_processor(family), load_model(family, "float32")
    engine = vllm_engine(model, proc, "float32")
    for req in requests(proc):
        rep = parity(engine, model, proc, [req])
        print(row(family, req.sample_id, "fp32", "start", rep))
        assert rep.tokens > 0 and rep.max_abs <= FP32_TOL, (family, req.sample_id, rep)


@pytest.mark.parametrize("family", ("tiny", "tiny-qwen3-vl"))
def test_bf16_parity_within_the_stated_bound(family, mmrl_cache):
    proc, model = load_processor(family), load_model(family, "bfloat16")
    engine = vllm_engine(model, proc, "bfloat16")
    rep = parity(engine, model, proc, requests(proc))
    print(row(family, "all three", "bf16", "start", rep))
    assert rep.tokens > 0 and rep.max_abs <= BF16_TOL, rep
