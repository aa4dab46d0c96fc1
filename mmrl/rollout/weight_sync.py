"""The weights a rollout engine (vLLM) receives after an optimizer step, computed off the trainer's modules.

LoRA: for every adapted linear layer the engine gets ``W + sum_a (B_a @ A_a) * alpha_a / r_a`` over the active
adapters ``a`` (LoRA, Hu et al. 2021, eq. 3; ``scaling = alpha / r`` as peft stores it), computed in fp32 from the
trainer's tensors and cast once to the engine's dtype. The trainer's modules are only read: the base weight ``W``
stays bit-identical after any number of syncs, and so does the KL reference (the policy with its adapter disabled).
peft's ``merge_adapter`` / ``unmerge_adapter`` would add then subtract the delta in ``W``'s own dtype: in bf16 each
round trip rounds, and the base drifts (``bench/lora_sync_drift.py`` measures it).

Without LoRA: every trainable weight under its HF name (vLLM's ``load_weights`` maps HF names itself).

Each tensor goes in the hub checkpoints' layout (``mmrl.models.hub_layout.to_hub_layout``: Qwen3-VL-MoE's fused
experts transposed back to ``[E, H, 2I]`` / ``[E, I, H]``, a view): vLLM reloads them ``is_checkpoint_format=True``,
through the loader that reads real checkpoints.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from mmrl.errors import MMRLError
from mmrl.models.hub_layout import model_type_of, to_hub_layout


def hf_name(name: str) -> str:
    """peft / modules_to_save parameter name -> the checkpoint's HF name."""
    clean = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
    return clean.replace(".modules_to_save.default.", ".")


def lora_layers(model) -> Dict[str, torch.nn.Module]:
    """``{module name: peft LoRA layer}`` of a peft model (empty otherwise)."""
    if not hasattr(model, "get_base_model"):
        return {}
    return {n: m for n, m in model.named_modules() if hasattr(m, "base_layer") and hasattr(m, "lora_A")}


def merged_weight(layer) -> torch.Tensor:
    """``W + sum_a B_a A_a * scaling_a`` in fp32 for one peft LoRA layer, without touching ``W`` (or the layer)."""
    if getattr(layer, "merged", False):
        raise MMRLError("a LoRA layer is merged in place; weight sync computes W + BA*alpha/r itself (unmerge it first)")
    w = layer.base_layer.weight.detach().float()
    if getattr(layer, "disable_adapters", False):
        return w.clone()
    out = w.clone()
    for a in layer.active_adapters:
        if a not in layer.lora_A:
            continue
        if getattr(layer, "use_dora", {}).get(a, False):
            raise MMRLError(f"LoRA adapter '{a}' uses DoRA; weight sync computes plain LoRA deltas only")
        delta = layer.lora_B[a].weight.detach().float() @ layer.lora_A[a].weight.detach().float()
        if getattr(layer, "fan_in_fan_out", False):
            delta = delta.T
        out += delta * float(layer.scaling[a])
    return out


def rollout_weights(model, only_changed: bool = True, dtype: Optional[torch.dtype] = None) -> List[Tuple[str, torch.Tensor]]:
    """(HF name, tensor) pairs to send, each cast to ``dtype`` (the engine's; ``None``: the parameter's own).

    ``only_changed``: LoRA layers' merged weights plus trainable parameters (what an optimizer step can change);
    otherwise every weight (an engine that dropped its weights, e.g. vLLM asleep at level 2)."""
    layers = lora_layers(model)
    model_type = model_type_of(model)
    bases = {n + ".base_layer.weight": n for n in layers}
    out = []
    for name, p in model.named_parameters():
        if ".lora_" in name or "original_module" in name:
            continue
        if name in bases:
            t = merged_weight(layers[bases[name]])
        elif only_changed and not p.requires_grad:
            continue
        else:
            t = p.detach()
        hf = hf_name(name)
        out.append((hf, to_hub_layout(model_type, hf, t.to(dtype or p.dtype))))
    return out
