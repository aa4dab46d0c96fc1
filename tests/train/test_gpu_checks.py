"""The checks ``scripts/gpu_smoke.sh`` runs on a GPU, on CPU with the tiny model (and fakes for vLLM's objects):
each passes on a correct setup and fails when what it checks is broken."""
from __future__ import annotations

import json
import types

import pytest
import torch

from mmrl.config import LoraConfig
from mmrl.models.loading import load_model, load_processor
from mmrl.models.scoring import response_logprobs
from mmrl.rollout.base import build_engine
from mmrl.train import gpu_checks as gc


class FakeLLM:
    def __init__(self, calls, encoder=True):
        self.calls = calls
        self.llm_engine = types.SimpleNamespace(reset_encoder_cache=lambda: calls.append("encoder"))
        if not encoder:
            self.llm_engine.reset_encoder_cache = lambda: None  # a sync path that never reaches the encoder cache

    def reset_prefix_cache(self, *a, **k):
        return True

    def reset_mm_cache(self):
        return None


class FakeEngine:
    """Generation by the HF engine (shares the module: always in sync); sync = the vLLM backend's cache resets."""

    def __init__(self, model, proc, skip_reset: bool = False):
        from mmrl.rollout.vllm_engine import LocalBackend

        self.hf = build_engine("hf", model=model, processor=proc)
        self.backend = LocalBackend.__new__(LocalBackend)
        self.backend.llm = FakeLLM([])
        self.skip = skip_reset

    def generate(self, requests, params):
        return self.hf.generate(requests, params)

    def sync_weights(self, model, everything=False):
        if not self.skip:
            self.backend.reset_caches()


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    return tiny_model_path, load_processor(tiny_model_path)


def test_lora_sync_check_passes_and_sees_a_moved_base(tiny, monkeypatch):
    path, proc = tiny
    model = load_model(path, "bfloat16", lora=LoraConfig(enabled=True, r=8, alpha=16)).eval()
    items = gc.video_items(proc, 1, 2, 4)
    probe = lambda: torch.cat(response_logprobs(model, items, pad_id=proc.tokenizer.pad_token_id)).detach()
    res = gc.lora_sync_check(model, syncs=5, probe=probe)
    assert res["ok"] and res["base_entries_changed"] == 0 and res["reference_gap"] == 0.0
    from mmrl.rollout import weight_sync

    def old_sync(model, only_changed=True, dtype=None):  # mmrl before issue 26: merge, copy, unmerge, in place
        model.merge_adapter()
        sent = [(weight_sync.hf_name(n), p.detach().to(dtype).clone()) for n, p in model.named_parameters()
            if n.endswith("base_layer.weight")]
        model.unmerge_adapter()
        return sent

    monkeypatch.setattr(weight_sync, "rollout_weights", old_sync)
    res = gc.lora_sync_check(model, syncs=5, probe=probe)
    assert not res["ok"] and res["base_entries_changed"] > 0


def test_checkpointing_check_on_the_tiny_model(tiny):
    path, proc = tiny
    res = gc.checkpointing_check(load_model(path), gc.video_items(proc, 2, 3, 6), proc.tokenizer.pad_token_id)
    assert res["ok"] and res["ckpt_saved_MB"] < res["plain_saved_MB"], res


@pytest.mark.parametrize("skip", [False, True])
def test_cache_reset_check_needs_every_reset(tiny, skip):
    path, proc = tiny
    model = load_model(path).eval()
    req = gc.long_clip_request(proc, frames=4, seconds=8.0, height=56, width=56)
    before = [p.detach().clone() for p in model.parameters()]
    res = gc.cache_reset_check(FakeEngine(model, proc, skip_reset=skip), model, req, proc.tokenizer.pad_token_id,
                               tol=1e-4)
    assert res["ok"] is (not skip) and res["resets_encoder"] == (0 if skip else 2)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))  # the merger weights are restored


def test_positions_check_and_the_smoke_table(tiny, tmp_path):
    path, proc = tiny
    model = load_model(path).eval()
    req = gc.long_clip_request(proc, frames=4, seconds=8.0, height=56, width=56)
    res = gc.positions_check(build_engine("hf", model=model, processor=proc), model, req, proc.tokenizer.pad_token_id,
                             tol=1e-4)
    assert res["ok"] and isinstance(res["mrope_module"], bool)
    from mmrl.train.gpu_smoke import main, table

    f = tmp_path / "c.json"
    f.write_text(json.dumps({"positions": res, "bad": {"x": 1.0, "ok": False}}))
    text = table(json.loads(f.read_text()))
    assert "| positions | PASS |" in text and "| bad | FAIL | x 1 |" in text
    assert main(["table", str(f)]) == 1


def test_the_reduced_model_has_qwen2_5_vl_7b_widths(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr("mmrl.models.tiny.make_tiny_model", lambda out, spec: seen.setdefault("spec", spec) and out)
    gc.reduced_qwen2_5_vl_7b(str(tmp_path))
    s = seen["spec"]
    assert (s.text_hidden, s.text_heads, s.text_kv_heads, s.text_intermediate) == (3584, 28, 4, 18944)
    assert (s.vision_hidden, s.vision_heads, s.vision_intermediate) == (1280, 16, 3420)
    assert (s.text_hidden // s.text_heads) // 2 == 64  # head_dim 128: mrope sections [16, 24, 24]


@pytest.mark.slow
def test_run_checks_without_vllm_on_cpu(tiny):
    from mmrl.train.gpu_smoke import run_checks

    res = run_checks(tiny[0], vllm=False)
    assert set(res) == {"precision", "checkpointing", "lora_sync"} and all(r["ok"] for r in res.values()), res
