"""The hub checkpoints' layout of Qwen3-VL-MoE's fused experts (``mmrl.models.hub_layout``): the tiny MoE is saved
in it (``gate_up_proj`` ``[E, H, 2I]``, ``down_proj`` ``[E, I, H]``), ``transformers`` loads it back to the very
model that was saved, and weight sync sends the experts in it (vLLM reads them as it reads a real checkpoint)."""
from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from mmrl.models.hub_layout import check_unambiguous, to_hub_layout
from mmrl.models.tiny import TinySpec, build_model, ensure_tiny_model

DOWN = "model.language_model.layers.0.mlp.experts.down_proj"
GATE_UP = "model.language_model.layers.1.mlp.experts.gate_up_proj"


def test_to_hub_layout_swaps_the_last_two_dims_of_moe_experts_only():
    t = torch.arange(2 * 3 * 4).view(2, 3, 4)
    hub = to_hub_layout("qwen3_vl_moe", DOWN, t)
    assert hub.shape == (2, 4, 3) and hub[1, 3, 0].item() == t[1, 0, 3].item() == 15
    assert to_hub_layout("qwen3_vl_moe", GATE_UP, t).shape == (2, 4, 3)
    assert to_hub_layout("qwen3_vl", DOWN, t) is t  # a dense family: as held
    assert to_hub_layout("qwen3_vl_moe", "model.language_model.layers.0.mlp.gate.weight", t) is t
    w = torch.zeros(3, 4)
    assert to_hub_layout("qwen3_vl_moe", DOWN, w) is w  # not a fused 3-D tensor


@pytest.mark.parametrize("hidden, inter", [(128, 64), (128, 128)])
def test_square_experts_are_refused(hidden, inter):
    with pytest.raises(ValueError, match="could not tell"):
        check_unambiguous("qwen3_vl_moe", hidden, inter)
    with pytest.raises(ValueError, match="could not tell"):
        TinySpec(family="qwen3_vl_moe", text_hidden=hidden, moe_intermediate=inter)


def test_shapes_of_published_moe_models_pass():
    check_unambiguous("qwen3_vl_moe", 2048, 768)  # Qwen3-VL-30B-A3B
    check_unambiguous("qwen3_vl", 128, 64)  # dense: no fused experts


def test_the_tiny_moe_is_saved_in_the_hub_layout_and_loads_back_exactly(mmrl_cache):
    from mmrl.models.loading import load_model

    path = ensure_tiny_model("qwen3_vl_moe")
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        shapes = {n: f.get_slice(n).get_shape() for n in (DOWN, GATE_UP)}
    assert shapes == {DOWN: [4, 32, 128], GATE_UP: [4, 128, 64]}  # E=4, I=32, H=128
    built, _ = build_model(TinySpec(family="qwen3_vl_moe"))
    loaded = dict(load_model("tiny-qwen3-vl-moe").named_parameters())
    assert loaded[DOWN].shape == (4, 128, 32)  # transformers' own layout after its load-time transpose
    assert all(torch.equal(p, loaded[n]) for n, p in built.named_parameters())


def test_weight_sync_sends_the_experts_in_the_hub_layout(mmrl_cache):
    from mmrl.models.loading import load_model
    from mmrl.rollout.weight_sync import rollout_weights

    model = load_model("tiny-qwen3-vl-moe")
    sent = dict(rollout_weights(model))
    params = dict(model.named_parameters())
    assert sent[DOWN].shape == (4, 32, 128) and sent[GATE_UP].shape == (4, 128, 64)
    assert torch.equal(sent[DOWN], params[DOWN].transpose(1, 2))
    with safe_open(str(ensure_tiny_model("qwen3_vl_moe") / "model.safetensors"), "pt") as f:
        assert torch.equal(sent[GATE_UP], f.get_tensor(GATE_UP))  # what the checkpoint file holds
