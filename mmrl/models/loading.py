"""Load a Qwen2-VL / Qwen2.5-VL checkpoint (or the embedded tiny one) with its processor; LoRA and freezing."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Tuple

import torch

from mmrl.errors import ConfigError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(path: str) -> str:
    if path == "tiny":
        from mmrl.models.tiny import ensure_tiny_model

        return str(ensure_tiny_model())
    from mmrl.models.base_recipe import is_base_ref, resolve_base

    if is_base_ref(path):  # "base" / "base:<hash>": a build of `mmrl base build` (never built at load time)
        return resolve_base(path)
    if not Path(path).exists():
        raise ConfigError(f"config key 'model.path': checkpoint folder not found: {path} (no hub downloads at run time)")
    return path


def load_processor(path: str):
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(resolve_model_path(path))
    proc.tokenizer.padding_side = "left"
    return proc


def model_class(path: str):
    import json

    from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2VLForConditionalGeneration

    cfg_file = Path(path) / "config.json"
    model_type = json.loads(cfg_file.read_text()).get("model_type") if cfg_file.exists() else "qwen2_5_vl"
    if model_type == "qwen2_vl":
        return Qwen2VLForConditionalGeneration
    if model_type == "qwen2_5_vl":
        return Qwen2_5_VLForConditionalGeneration
    raise ConfigError(f"config key 'model.path': {path} is a '{model_type}' checkpoint; mmrl supports qwen2_vl and qwen2_5_vl")


def load_model(path: str, dtype: str = "float32", freeze_vision: bool = False, lora=None,
               gradient_checkpointing: bool = False, device: str | None = None):
    """Model with LoRA (peft) on the language model if enabled; the vision tower frozen if asked (default with LoRA)."""
    path = resolve_model_path(path)
    model = model_class(path).from_pretrained(path, dtype=_DTYPES[dtype])
    if device:
        model.to(device)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if lora is not None and lora.enabled:
        from peft import LoraConfig, get_peft_model

        targets = list(lora.target_modules)
        # restrict to the language model: Qwen's vision blocks also have q/k/v-like names
        pattern = r".*language_model.*\.(" + "|".join(targets) + r")$"
        model = get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=pattern))
    if freeze_vision or (lora is not None and lora.enabled):
        for name, p in model.named_parameters():
            if ".visual." in f".{name}" or name.startswith("visual") or ".visual" in name:
                p.requires_grad_(False)
    return model


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"config key 'model.device' = {name!r} but no CUDA device is available")
    return name


def load_model_and_processor(cfg_model) -> Tuple[torch.nn.Module, object]:
    model = load_model(cfg_model.path, cfg_model.dtype, cfg_model.freeze_vision, cfg_model.lora,
                       cfg_model.gradient_checkpointing, device=resolve_device(cfg_model.device))
    return model, load_processor(cfg_model.path)


def export_merged(model, processor, out_dir: str) -> str:
    """Save a plain HF checkpoint (LoRA merged into the weights) that loads with ``from_pretrained``."""
    os.makedirs(out_dir, exist_ok=True)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir
