"""The published checkpoints' tensor layout, where ``transformers`` holds a weight in another one: on save and on
weight sync, mmrl writes and sends what the hub's checkpoints hold, so that vLLM loads both as it loads a real one.

Qwen3-VL-MoE's fused experts. The hub checkpoints (Qwen3-VL-30B-A3B, 235B-A22B) store, per layer,
``mlp.experts.gate_up_proj`` as ``[E, H, 2I]`` (gate then up along the last dim) and ``mlp.experts.down_proj`` as
``[E, I, H]``. ``transformers`` >= 5 holds them ``nn.Linear``-style, ``[E, 2I, H]`` and ``[E, H, I]``, and transposes
on load (``conversion_mapping.py``, ``"qwen3_vl_moe"``: ``Transpose(1, 2, check_dims=True)``, which transposes only
when the file's shape differs from the parameter's). Its ``save_pretrained`` does not transpose back: the reverse op
compares the parameter with its own shape, always equal, so a saved model is in ``transformers``' layout. vLLM reads
the hub's: its Qwen3-VL-MoE decoder layers build their experts with ``is_fused_checkpoint_transposed=True``
(``vllm/model_executor/models/qwen3_vl_moe.py``) and ``RoutedExperts.load_weights`` transposes every fused expert
tensor's last two dims (``_orient_fused_weight``) before splitting ``w1``/``w3`` along dim 1 — in the initial load and
in ``reload_weights(..., is_checkpoint_format=True)`` alike (vLLM 0.32.0).

Square experts (``2I == H`` or ``I == H``) make the layouts indistinguishable to ``check_dims``: ``transformers``
would load a hub-layout file untransposed; such shapes are refused (no published Qwen3-VL-MoE has them).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Tuple

import torch

# model_type -> parameter-name suffixes whose last two dims the hub checkpoints hold transposed
TRANSPOSED_IN_HUB = {"qwen3_vl_moe": (".mlp.experts.gate_up_proj", ".mlp.experts.down_proj")}


def model_type_of(model) -> str:
    """The ``config.model_type`` of a (peft-wrapped or plain) ``transformers`` model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(getattr(base, "config", None), "model_type", "")


def to_hub_layout(model_type: str, name: str, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` (named ``name``, in ``transformers``' layout) as the hub checkpoints hold it: a view, no copy."""
    if tensor.dim() == 3 and name.endswith(TRANSPOSED_IN_HUB.get(model_type, ())):
        return tensor.transpose(1, 2)
    return tensor


def check_unambiguous(model_type: str, hidden: int, moe_intermediate: int) -> None:
    """Refuse expert shapes whose two layouts ``transformers``' ``check_dims`` load could not tell apart."""
    if model_type in TRANSPOSED_IN_HUB and hidden in (moe_intermediate, 2 * moe_intermediate):
        raise ValueError(f"{model_type}: hidden size {hidden} equals the experts' intermediate size "
                         f"{moe_intermediate} or twice it; transformers could not tell the checkpoint's expert "
                         "layout from its own, so the saved experts would load transposed")


def save_pretrained(model, out_dir: str | os.PathLike) -> Path:
    """``model.save_pretrained(out_dir)``, then each tensor of ``TRANSPOSED_IN_HUB`` rewritten in the hub layout."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    out = Path(out_dir)
    model.save_pretrained(out)
    model_type = model_type_of(model)
    suffixes: Tuple[str, ...] = TRANSPOSED_IN_HUB.get(model_type, ())
    if not suffixes:
        return out
    for file in sorted(out.glob("*.safetensors")):
        with safe_open(str(file), "pt") as f:
            names, meta = list(f.keys()), f.metadata()
            if not any(n.endswith(suffixes) for n in names):
                continue
            tensors = {n: to_hub_layout(model_type, n, f.get_tensor(n)).contiguous() for n in names}
        save_file(tensors, str(file), metadata=meta or {"format": "pt"})
    return out
