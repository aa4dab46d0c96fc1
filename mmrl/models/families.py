"""The Qwen-VL families mmrl loads: a checkpoint's ``config.json`` ``model_type`` -> its transformers class."""
from __future__ import annotations

import json
from pathlib import Path

from mmrl.errors import ConfigError

# config.json model_type -> transformers class (all in transformers >= 5)
MODEL_CLASSES = {"qwen2_vl": "Qwen2VLForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
                 "qwen3_vl": "Qwen3VLForConditionalGeneration", "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration"}


def model_class_for(model_type: str):
    import transformers

    if model_type not in MODEL_CLASSES:
        raise ConfigError(f"config key 'model.path': a '{model_type}' checkpoint; mmrl supports "
                          f"{', '.join(MODEL_CLASSES)}")
    return getattr(transformers, MODEL_CLASSES[model_type])


def model_type(path: str) -> str:
    """``model_type`` of a checkpoint folder's ``config.json`` (``qwen2_5_vl`` when it has none)."""
    cfg_file = Path(path) / "config.json"
    return json.loads(cfg_file.read_text()).get("model_type") if cfg_file.exists() else "qwen2_5_vl"


def model_class(path: str):
    try:
        return model_class_for(model_type(path))
    except ConfigError:
        raise ConfigError(f"config key 'model.path': {path} is a '{model_type(path)}' checkpoint; mmrl supports "
                          f"{', '.join(MODEL_CLASSES)}") from None
