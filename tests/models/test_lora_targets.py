"""``model.lora.target_modules`` is checked against the checkpoint's module names before any weight loads: the names
come from the model built on the meta device from its config.json (mmrl.models.lora_targets)."""
from __future__ import annotations

import pytest
import torch

from mmrl.config import LoraConfig
from mmrl.errors import ConfigError
from mmrl.models.lora_targets import adaptable_modules, check_lora_targets, lora_pattern

ATTN_MLP = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"])
def family_path(request, mmrl_cache):
    from mmrl.models.tiny import ensure_tiny_model

    return request.param, str(ensure_tiny_model(request.param))


def test_meta_names_are_the_loaded_models(family_path):
    """The meta-device model has exactly the adaptable modules the loaded checkpoint has (what peft will see)."""
    from mmrl.models.loading import load_model

    family, path = family_path
    model = load_model(path)
    loaded = tuple(n for n, m in model.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))
                   and ".language_model." in f".{n}")
    assert adaptable_modules(path) == loaded
    leaves = {n.rsplit(".", 1)[-1] for n in loaded}
    assert {"q_proj", "k_proj", "v_proj", "o_proj"} <= leaves and not any("visual" in n for n in loaded)
    # the dense MLPs are Linear layers; Qwen3-VL-MoE's experts are fused weights (its router ``gate`` is Linear)
    assert ({"gate_proj", "up_proj", "down_proj"} <= leaves) == (family != "qwen3_vl_moe")
    check_lora_targets(path, ["q_proj", "k_proj", "v_proj", "o_proj"])


def test_targets_that_match_nothing_are_one_line_naming_the_key(tiny_model_path):
    check_lora_targets(tiny_model_path, ATTN_MLP)
    check_lora_targets(tiny_model_path, [r"mlp\..*_proj"])  # peft's regex rule: a pattern is a valid target
    with pytest.raises(ConfigError) as e:
        check_lora_targets(tiny_model_path, ["q_proj", "qkv", "mlp"])  # ``mlp`` is a module, but not a layer
    msg = str(e.value)
    assert "\n" not in msg and "'model.lora.target_modules'" in msg and "'qkv', 'mlp'" in msg
    assert "'q_proj'" not in msg and msg.endswith("choose from " + ", ".join(sorted(ATTN_MLP + ["embed_tokens"])))
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        check_lora_targets(tiny_model_path, ["q_proj("])


def test_the_loader_checks_before_from_pretrained(tiny_model_path, monkeypatch):
    from transformers import Qwen2_5_VLForConditionalGeneration as cls

    from mmrl.models.loading import load_model

    adaptable_modules.cache_clear()
    monkeypatch.setattr(cls, "from_pretrained", classmethod(lambda *a, **k: pytest.fail("weights loaded first")))
    with pytest.raises(ConfigError, match="'nope'"):
        load_model(tiny_model_path, lora=LoraConfig(enabled=True, target_modules=["nope"]))
    assert lora_pattern(["q_proj", "v_proj"]) == r".*language_model.*\.(q_proj|v_proj)$"
