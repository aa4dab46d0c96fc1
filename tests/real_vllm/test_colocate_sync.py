"""Weight sync into vLLM's CPU build (the real engine): after an update the engine samples from the old weights
(parity O(1)); after ``sync_weights`` it equals the scorer again (<= 1e-5, fp32) for a full update (tied LM head
included: ``vllm_weights.retie_lm_head``), a LoRA update (``W + BA*alpha/r`` sent, the trainer's base untouched)
and a run with the vision tower frozen (no vision weight travels). One engine, re-based with ``everything=True``
at the start of each test."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402

from mmrl.config import LoraConfig  # noqa: E402
from mmrl.models.loading import load_model, load_processor  # noqa: E402
from mmrl.rollout.weight_sync import rollout_weights  # noqa: E402

from colocate_support import FP32_TOL, parity, perturb, requests, row, vllm_engine  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(mmrl_cache):
    proc, model = load_processor("tiny"), load_model("tiny", "float32")
    return proc, vllm_engine(model, proc, "float32")


def _check(eng, proc, model):
    """Re-base the shared engine on ``model`` (every weight sent) and check parity; the requests of the test."""
    reqs = requests(proc, ("image", "video4"))
    eng.sync_weights(model, everything=True)
    assert parity(eng, model, proc, reqs).max_abs <= FP32_TOL
    return reqs


def test_full_update_reaches_the_engine_only_after_sync(engine):
    proc, eng = engine
    model = load_model("tiny", "float32")
    reqs = _check(eng, proc, model)
    perturb(model)
    stale = parity(eng, model, proc, reqs)
    eng.sync_weights(model)
    after = parity(eng, model, proc, reqs)
    print(row("tiny", "image+video4", "fp32", "full update, no sync", stale))
    print(row("tiny", "image+video4", "fp32", "full update, synced", after))
    assert stale.max_abs > 0.1 and after.max_abs <= FP32_TOL


def test_lora_update_sends_merged_weights_and_leaves_the_base(engine):
    proc, eng = engine
    model = load_model("tiny", "float32", lora=LoraConfig(enabled=True, r=8, alpha=16))
    reqs = _check(eng, proc, model)
    base = {n: p.detach().clone() for n, p in model.named_parameters() if ".base_layer." in n}
    perturb(model, scale=0.2, only=lambda n: "lora_B" in n)
    stale = parity(eng, model, proc, reqs)
    eng.sync_weights(model)
    after = parity(eng, model, proc, reqs)
    print(row("tiny", "image+video4", "fp32", "LoRA update, synced", after))
    assert stale.max_abs > 1e-3 and after.max_abs <= FP32_TOL
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if n in base)  # W never merged in place


def test_frozen_vision_tower_never_travels(engine):
    proc, eng = engine
    model = load_model("tiny", "float32")
    for name, p in model.named_parameters():
        if ".visual." in name or name.startswith("visual") or "model.visual" in name:
            p.requires_grad_(False)
    reqs = _check(eng, proc, model)
    sent = [n for n, _ in rollout_weights(model)]
    assert sent and not any("visual" in n for n in sent)
    perturb(model)  # the text stack only: the vision tower is frozen
    eng.sync_weights(model)
    after = parity(eng, model, proc, reqs)
    print(row("tiny", "image+video4", "fp32", "frozen vision, synced", after))
    assert after.max_abs <= FP32_TOL


def test_a_vision_change_is_seen_after_sync_and_the_caches_must_reset(engine):
    """A vision-tower change reaches the engine through ``sync_weights`` (encoder outputs recomputed). vLLM 0.32's
    in-place reload clears the worker's encoder cache itself but not the scheduler's record of it: loading weights
    without ``reset_caches`` makes the next request with the same image fail ("Encoder cache miss"), so the engine
    resets every cache on every sync (this test runs last: the failed engine is not used again)."""
    proc, eng = engine
    model = load_model("tiny", "float32")
    reqs = _check(eng, proc, model)
    perturb(model, scale=0.5, only=lambda n: "visual" in n)
    stale = parity(eng, model, proc, reqs)
    eng.sync_weights(model)
    fresh = parity(eng, model, proc, reqs)
    print(row("tiny", "image+video4", "fp32", "vision change, no sync", stale))
    print(row("tiny", "image+video4", "fp32", "vision change, synced", fresh))
    assert stale.max_abs > 1e-3 and fresh.max_abs <= FP32_TOL
    perturb(model, scale=0.5, only=lambda n: "visual" in n, seed=1)
    eng.backend.load_weights(rollout_weights(model, dtype=eng.dtype))  # weights in, the engine's caches kept
    with pytest.raises(Exception, match="[Ee]ncoder cache"):
        parity(eng, model, proc, reqs)
