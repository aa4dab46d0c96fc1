"""LoRA sync never touches the base (issue 26 item 4) and every weight sync resets vLLM's caches (item 5)."""
from __future__ import annotations

import types
from contextlib import nullcontext

import pytest
import torch

from mmrl.errors import MMRLError
from mmrl.rollout.weight_sync import SyncWeights, merged_weight, rollout_weights


def lora_linear(n: int = 96, r: int = 8, alpha: int = 16, dtype=torch.bfloat16, seed: int = 0):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    net = torch.nn.Sequential()
    net.add_module("proj", torch.nn.Linear(n, n, bias=False))
    model = get_peft_model(net, LoraConfig(r=r, lora_alpha=alpha, target_modules=["proj"])).to(dtype)
    return model


def train_adapter(model, scale: float = 0.02) -> None:
    """Stands for an optimizer step: new adapter weights."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.add_(torch.randn_like(p) * scale)


def test_fifty_syncs_leave_the_bf16_base_and_the_reference_bit_identical():
    model = lora_linear()
    layer = model.base_model.model.proj
    base0 = layer.base_layer.weight.detach().clone()
    x = torch.randn(4, 96, dtype=torch.bfloat16)
    with model.disable_adapter():
        ref0 = model(x).detach().clone()
    for _ in range(50):
        train_adapter(model)
        (name, sent), = rollout_weights(model, dtype=torch.bfloat16)
        want = base0.float() + (layer.lora_B["default"].weight.float() @ layer.lora_A["default"].weight.float()) * 2.0
        assert name == "proj.weight" and sent.dtype is torch.bfloat16
        assert torch.equal(sent, want.to(torch.bfloat16))  # W + BA*alpha/r in fp32, rounded once
        assert torch.equal(merged_weight(layer), want)
    assert torch.equal(layer.base_layer.weight, base0)
    with model.disable_adapter():
        assert torch.equal(model(x), ref0)


def test_the_old_merge_unmerge_round_trip_drifts_and_the_test_would_see_it():
    """The check above can fail: peft's in-place merge/unmerge in bf16 changes the base."""
    model = lora_linear()
    layer = model.base_model.model.proj
    base0 = layer.base_layer.weight.detach().clone()
    for _ in range(5):
        train_adapter(model)
        model.merge_adapter()
        model.unmerge_adapter()
    assert not torch.equal(layer.base_layer.weight, base0)


def test_full_weights_and_refusals():
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    net[0].requires_grad_(False)
    names = [n for n, _ in rollout_weights(net)]
    assert names == ["1.weight", "1.bias"]
    assert [n for n, _ in rollout_weights(net, only_changed=False)] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    model = lora_linear()
    model.merge_adapter()
    with pytest.raises(MMRLError, match="merged in place"):
        rollout_weights(model)


def test_sync_weights_gather_one_bucket_at_a_time_and_copy_out():
    """fp32 bytes 64, 16 | 32, 8 in 80-byte buckets: two gathers of 20 and 10 elements, never all 30 at once."""
    from contextlib import contextmanager

    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    whole, per_gather = [], []

    @contextmanager
    def gather(params):
        whole.extend(params)
        per_gather.append(sum(p.numel() for p in whole))
        yield
        del whole[:]

    weights = SyncWeights(net, bucket_bytes=80, gather=gather)
    assert weights.manifests == [[("0.weight", "float32", [4, 4]), ("0.bias", "float32", [4])],
                                 [("1.weight", "float32", [2, 4]), ("1.bias", "float32", [2])]]
    assert per_gather == []  # planning gathers nothing
    got = dict(weights)
    assert per_gather == [20, 10] and len(weights) == 4
    for name, p in net.named_parameters():
        assert torch.equal(got[name], p) and got[name].data_ptr() != p.data_ptr()  # copied out of the gather
    weights.walk()
    assert per_gather == [20, 10, 20, 10]


def test_a_lora_layer_is_gathered_with_its_factors():
    model = lora_linear(n=8, r=2)
    train_adapter(model, 0.5)
    seen = []
    weights = SyncWeights(model, dtype=torch.bfloat16, gather=lambda params: seen.append(len(params)) or nullcontext())
    (name, sent), = list(weights)
    assert seen == [3]  # base weight, A, B
    assert torch.equal(sent, merged_weight(model.base_model.model.proj).to(torch.bfloat16))


class FakeLLM:
    """vLLM 0.33's reset methods where they live: ``LLM.reset_prefix_cache`` / ``reset_mm_cache`` and
    ``LLM.llm_engine.reset_encoder_cache`` (``LLM`` has none)."""

    def __init__(self, calls):
        self.calls = calls
        self.llm_engine = types.SimpleNamespace(reset_encoder_cache=lambda: calls.append("encoder"))

    def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False):
        self.calls.append("prefix")
        return True

    def reset_mm_cache(self):
        self.calls.append("mm")


def local_backend(llm):
    from mmrl.rollout.vllm_engine import LocalBackend

    be = LocalBackend.__new__(LocalBackend)
    be.llm = llm
    return be


def test_every_sync_resets_the_prefix_and_encoder_caches(tiny_model_path):
    from mmrl.models.loading import load_model, load_processor
    from mmrl.rollout.vllm_engine import VLLMEngine

    calls = []
    be = local_backend(FakeLLM(calls))
    be.load_weights = lambda weights: calls.append(("load", len(weights)))
    model = load_model(tiny_model_path)
    engine = VLLMEngine(model, load_processor(tiny_model_path), backend=be, mode="server")
    for _ in range(2):
        engine.sync_weights(model)
    n = len(list(model.parameters()))
    assert calls == [("load", n), "prefix", "mm", "encoder"] * 2


@pytest.mark.parametrize("skip", ["reset_prefix_cache", "encoder"])
def test_a_skipped_reset_fails(skip):
    calls = []
    llm = FakeLLM(calls)
    if skip == "encoder":
        llm.llm_engine = types.SimpleNamespace()  # where mmrl once looked: LLM.reset_encoder_cache (absent)
        llm.reset_encoder_cache = lambda: calls.append("encoder")
        with pytest.raises(AttributeError):
            local_backend(llm).reset_caches()
    else:
        llm.reset_prefix_cache = lambda **kw: False  # vLLM refuses while requests run
        with pytest.raises(MMRLError, match="prefix cache"):
            local_backend(llm).reset_caches()
