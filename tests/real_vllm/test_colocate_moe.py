"""The tiny Qwen3-VL-MoE in vLLM's CPU build (the real engine): its checkpoint holds the fused experts in the hub's
layout (``mmrl.models.hub_layout``), which vLLM's Qwen3-VL-MoE loader reads as it reads Qwen3-VL-30B-A3B. On an image
and a 4-frame video vLLM expands each prompt to the HF processor's tokens (``VLLMEngine.generate`` raises otherwise)
and its log-probs equal the scorer's (<= 1e-5, fp32); after an update, ``sync_weights`` brings them back to <= 1e-5,
for a full update and for an update of the experts alone (the experts travel, in the layout vLLM reads)."""
from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from mmrl.models.loading import load_model, load_processor  # noqa: E402
from mmrl.rollout.weight_sync import rollout_weights  # noqa: E402

from colocate_support import FP32_TOL, parity, perturb, requests, row, vllm_engine  # noqa: E402

pytestmark = pytest.mark.slow
MOE = "tiny-qwen3-vl-moe"
KINDS = ("image", "video4")


def _without_a_dense_engines_groups() -> None:
    """vLLM builds its model-parallel groups once per process, the expert-parallel one only for a MoE model: after a
    dense engine of an earlier test module (``pytest tests/real_vllm``), a MoE engine would find the groups built
    without it ("expert parallel group is not initialized"). Those engines are done: their groups are dropped."""
    from vllm.distributed import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return
    try:
        parallel_state.get_ep_group()
    except AssertionError:
        parallel_state.destroy_model_parallel()


@pytest.fixture(scope="module")
def engine(mmrl_cache):
    _without_a_dense_engines_groups()
    proc, model = load_processor(MOE), load_model(MOE, "float32")
    return proc, vllm_engine(model, proc, "float32")


def test_fp32_parity_on_an_image_and_a_short_video(engine):
    proc, eng = engine
    model = load_model(MOE, "float32")
    eng.sync_weights(model, everything=True)  # re-based: the tests below share the engine
    for req in requests(proc, KINDS):
        rep = parity(eng, model, proc, [req])
        print(row(MOE, req.sample_id, "fp32", "start", rep))
        assert rep.tokens > 0 and rep.max_abs <= FP32_TOL, (req.sample_id, rep)


@pytest.mark.parametrize("what, only", [("full update", lambda n: True),
                                        ("experts only", lambda n: ".mlp.experts." in n)])
def test_an_update_reaches_the_engine_after_sync(engine, what, only):
    proc, eng = engine
    model = load_model(MOE, "float32")
    reqs = requests(proc, KINDS)
    eng.sync_weights(model, everything=True)
    assert parity(eng, model, proc, reqs).max_abs <= FP32_TOL
    assert perturb(model, scale=0.5 if what == "experts only" else 0.05, only=only) > 0
    sent = dict(rollout_weights(model))
    experts = [n for n in sent if n.endswith((".mlp.experts.gate_up_proj", ".mlp.experts.down_proj"))]
    assert len(experts) == 2 * 2  # two layers, each its fused gate_up and down
    stale = parity(eng, model, proc, reqs)
    eng.sync_weights(model)
    after = parity(eng, model, proc, reqs)
    print(row(MOE, "image+video4", "fp32", f"{what}, no sync", stale))
    print(row(MOE, "image+video4", "fp32", f"{what}, synced", after))
    assert stale.max_abs > 1e-3 and after.max_abs <= FP32_TOL


def test_a_sync_streams_its_weights_once(engine, monkeypatch):
    """The reload and the experts' repack share one pass over ``SyncWeights`` (each pass computes every bucket, and
    under ZeRO-3 gathers it again): the repack keeps the expert tensors as they stream, so a second pass is gone."""
    from mmrl.rollout import weight_sync

    proc, eng = engine
    model = load_model(MOE, "float32")
    assert perturb(model, scale=0.5, only=lambda n: ".mlp.experts." in n) > 0
    passes, real = [], weight_sync.SyncWeights.buckets
    monkeypatch.setattr(weight_sync.SyncWeights, "buckets", lambda self: (passes.append(1), real(self))[1])
    eng.sync_weights(model, everything=True)
    assert len(passes) == 1
    assert parity(eng, model, proc, requests(proc, KINDS)).max_abs <= FP32_TOL  # the experts were repacked
