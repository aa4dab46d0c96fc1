"""LoRA through peft: adapters on the language model only (target modules configurable), the vision tower frozen
with LoRA and trainable without it, and merge + export -> a plain HF checkpoint with the adapted model's logits."""
from __future__ import annotations

import copy

import pytest
import torch

from mmrl.config import LoraConfig
from mmrl.data.schema import Media
from mmrl.media.inputs import build_prompt_inputs, collate_vision
from mmrl.media.prompts import build_messages
from mmrl.models.loading import export_merged, load_model, load_processor


def lora_modules(model):
    return [n for n, m in model.named_modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")]


@pytest.mark.parametrize("targets", [["q_proj", "k_proj", "v_proj", "o_proj"], ["gate_proj", "up_proj", "down_proj"],
                                     ["v_proj"]])
def test_adapters_on_the_language_model_only(tiny_model_path, targets):
    model = load_model(tiny_model_path, lora=LoraConfig(enabled=True, r=4, alpha=8, target_modules=targets))
    names = lora_modules(model)
    n_layers = model.get_base_model().config.text_config.num_hidden_layers
    assert len(names) == n_layers * len(targets)  # every targeted projection of every decoder layer, nothing else
    assert all(".language_model." in n and n.rsplit(".", 1)[-1] in targets for n in names)
    assert not any("visual" in n for n in names)  # Qwen's vision blocks have mlp gate/up/down_proj too
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)


def test_vision_tower_frozen_with_lora_trainable_without(tiny_model_path):
    def visual(model):
        return [p.requires_grad for n, p in model.named_parameters() if "visual" in n]

    assert all(visual(load_model(tiny_model_path)))  # full fine-tuning trains the vision tower
    assert not any(visual(load_model(tiny_model_path, freeze_vision=True)))
    lora = load_model(tiny_model_path, lora=LoraConfig(enabled=True))
    assert visual(lora) and not any(visual(lora))
    assert any(p.requires_grad for n, p in lora.named_parameters() if "lora_" in n)


def _inputs(proc):
    g = torch.Generator().manual_seed(0)
    m = Media("v", frames=torch.randint(0, 255, (4, 3, 56, 56), dtype=torch.uint8, generator=g), timestamps=[0, .5, 1, 1.5],
              fps=2.0)
    pi = build_prompt_inputs(proc, build_messages("What colour is the square?", ["red", "green"], m), m)
    return {"input_ids": pi.input_ids.unsqueeze(0), "attention_mask": torch.ones(1, pi.num_tokens, dtype=torch.long),
            **collate_vision([pi])}


def test_merge_and_export_gives_a_plain_checkpoint_with_the_same_logits(tiny_model_path, tmp_path):
    from transformers import Qwen2_5_VLForConditionalGeneration

    proc = load_processor(tiny_model_path)
    model = load_model(tiny_model_path, lora=LoraConfig(enabled=True, r=4, alpha=8))
    with torch.no_grad():  # a trained adapter (lora_B starts at zero: merging it would be a no-op)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.1)
    model.eval()
    batch = _inputs(proc)
    with torch.no_grad():
        adapted = model(**batch).logits
        with model.disable_adapter():
            base = model(**batch).logits
    assert (adapted - base).abs().max() > 1e-3  # the adapter changes the model
    out = export_merged(copy.deepcopy(model), proc, str(tmp_path / "merged"))
    plain = Qwen2_5_VLForConditionalGeneration.from_pretrained(out).eval()
    assert not any("lora" in k for k in plain.state_dict())
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    with torch.no_grad():
        merged = plain(**batch).logits
    assert torch.allclose(merged, adapted, atol=1e-5), float((merged - adapted).abs().max())  # measured 5e-7
    assert load_processor(out).tokenizer.convert_tokens_to_ids("<|video_pad|>") == proc.tokenizer.convert_tokens_to_ids(
        "<|video_pad|>")
