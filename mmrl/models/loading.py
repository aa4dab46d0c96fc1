"""Load a Qwen2-VL / Qwen2.5-VL / Qwen3-VL (dense or MoE) checkpoint, or an embedded tiny one, with its processor;
LoRA and freezing. The model class follows ``config.json``'s ``model_type`` (``docs/models.md``)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Tuple

import torch

from mmrl.errors import ConfigError
from mmrl.models.families import MODEL_CLASSES, model_class, model_class_for, model_type  # noqa: F401  (re-exported)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(path: str) -> str:
    """A checkpoint folder, or a tiny model's name (``tiny``, ``tiny-qwen2-vl``, ``tiny-qwen3-vl``, ...) built into
    the cache on first use."""
    from mmrl.models.tiny import TINY_NAMES

    if path in TINY_NAMES:
        from mmrl.models.tiny import ensure_tiny_model

        return str(ensure_tiny_model(TINY_NAMES[path]))
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


def load_model(path: str, dtype: str = "float32", freeze_vision: bool = False, lora=None,
               gradient_checkpointing: bool = False, device: str | None = None, attn_implementation: str = "sdpa"):
    """Model with LoRA (peft) on the language model if enabled; the vision tower frozen if asked (default with LoRA).
    ``attn_implementation``: ``model.attn_implementation`` (validated by the config), passed to ``from_pretrained``."""
    path = resolve_model_path(path)
    if lora is not None and lora.enabled:  # targets that match no module: one line before any weight loads
        from mmrl.models.lora_targets import check_lora_targets

        check_lora_targets(path, list(lora.target_modules))
    model = model_class(path).from_pretrained(path, dtype=_DTYPES[dtype], attn_implementation=attn_implementation)
    return prepare_model(model, freeze_vision, lora, gradient_checkpointing, device)


def prepare_model(model, freeze_vision: bool = False, lora=None, gradient_checkpointing: bool = False,
                  device: str | None = None):
    """What ``load_model`` does after loading: device, gradient checkpointing, LoRA, freezing (for a built model)."""
    if device:
        model.to(device)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    if lora is not None and lora.enabled:
        from peft import LoraConfig, get_peft_model

        from mmrl.models.lora_targets import lora_pattern

        model = get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=lora_pattern(list(lora.target_modules))))
    if freeze_vision or (lora is not None and lora.enabled):
        for name, p in model.named_parameters():
            if ".visual." in f".{name}" or name.startswith("visual") or ".visual" in name:
                p.requires_grad_(False)
    return model


def resolve_device(name: str) -> str:
    """``model.device`` -> a concrete device. ``auto`` (with a GPU) and ``cuda`` mean this rank's GPU,
    ``cuda:LOCAL_RANK``, made current first (``mmrl.dist.bind_cuda_device``); ``cuda:N`` is taken as given."""
    if name == "auto" and not torch.cuda.is_available():
        return "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"config key 'model.device' = {name!r} but no CUDA device is available")
    if name in ("auto", "cuda"):
        from mmrl.dist import bind_cuda_device

        return str(bind_cuda_device())
    if name.startswith("cuda:"):
        index, count = name.split(":", 1)[1], torch.cuda.device_count()
        if not index.isdigit() or int(index) >= count:
            raise ConfigError(f"config key 'model.device' = {name!r}: this node sees {count} CUDA device(s)")
        torch.cuda.set_device(int(index))
    return name


def load_model_and_processor(cfg_model) -> Tuple[torch.nn.Module, object]:
    model = load_model(cfg_model.path, cfg_model.dtype, cfg_model.freeze_vision, cfg_model.lora,
                       cfg_model.gradient_checkpointing, device=resolve_device(cfg_model.device),
                       attn_implementation=cfg_model.attn_implementation)
    return model, load_processor(cfg_model.path)


def export_merged(model, processor, out_dir: str) -> str:
    """Save a plain HF checkpoint (LoRA merged into the weights) in the hub's tensor layout
    (``hub_layout.save_pretrained``): it loads with ``from_pretrained`` and in vLLM."""
    from mmrl.models.hub_layout import save_pretrained

    os.makedirs(out_dir, exist_ok=True)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    save_pretrained(model, out_dir)
    processor.save_pretrained(out_dir)
    return out_dir
