"""The weights a rollout engine (vLLM) receives after an optimizer step, computed off the trainer's modules.

LoRA: for every adapted linear layer the engine gets ``W + sum_a (B_a @ A_a) * alpha_a / r_a`` over the active
adapters ``a`` (LoRA, Hu et al. 2021, eq. 3; ``scaling = alpha / r`` as peft stores it), computed in fp32 from the
trainer's tensors and cast once to the engine's dtype. The trainer's modules are only read: the base weight ``W``
stays bit-identical after any number of syncs, and so does the KL reference (the policy with its adapter disabled).
peft's ``merge_adapter`` / ``unmerge_adapter`` would add then subtract the delta in ``W``'s own dtype: in bf16 each
round trip rounds, and the base drifts (``bench/lora_sync_drift.py`` measures it).

Without LoRA: every trainable weight under its HF name (vLLM's ``load_weights`` maps HF names itself).

ZeRO-3 (``SyncWeights`` with ``gather``): each rank holds a shard of every parameter. The weights are planned from
the parameters' full shapes (``ds_shape``) without gathering, cut into buckets of at most ``bucket_bytes`` to send
(in the engine's dtype; a larger tensor alone, a LoRA layer's factors gathered with its base weight), and each
bucket's parameters are gathered (DeepSpeed's ``GatheredParameters``, on every rank), computed, copied out and
released before the next bucket is gathered: one bucket of full parameters at a time, not the whole model. TRL
gathers one parameter at a time (``_move_model_to_vllm``: ``gather_if_zero3([param])`` per parameter), and the whole
model for a PEFT merge; a bucket is the transfer's own unit here, so a gather feeds exactly one broadcast.

Each tensor goes in the hub checkpoints' layout (``mmrl.models.hub_layout.to_hub_layout``: Qwen3-VL-MoE's fused
experts transposed back to ``[E, H, 2I]`` / ``[E, I, H]``, a view): vLLM reloads them ``is_checkpoint_format=True``,
through the loader that reads real checkpoints.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

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


BUCKET_BYTES = 256 * 2**20  # the transfer bucket (``transfer_group``), and so the most gathered at once


@dataclass
class SyncUnit:
    """One tensor to send: its HF name, the parameters to gather for it, how to compute it once they are whole."""

    name: str
    params: Tuple[torch.nn.Parameter, ...]
    shape: Tuple[int, ...]
    dtype: torch.dtype
    compute: Callable[[], torch.Tensor]

    @property
    def nbytes(self) -> int:
        return torch.Size(self.shape).numel() * self.dtype.itemsize


def full_shape(p: torch.Tensor) -> Tuple[int, ...]:
    """A parameter's whole shape, also while ZeRO-3 holds only this rank's shard (``ds_shape``)."""
    return tuple(p.ds_shape if hasattr(p, "ds_shape") else p.shape)


def _hub(model_type: str, name: str, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
    return to_hub_layout(model_type, name, compute())


def sync_units(model, only_changed: bool = True, dtype: Optional[torch.dtype] = None) -> List[SyncUnit]:
    """What a sync sends, in ``named_parameters`` order. ``only_changed``: LoRA layers' merged weights plus trainable
    parameters (what an optimizer step can change; a frozen vision tower never); otherwise every weight (an engine
    that dropped its weights, e.g. vLLM asleep at level 2)."""
    layers = lora_layers(model)
    model_type = model_type_of(model)
    bases = {n + ".base_layer.weight": n for n in layers}
    out = []
    for name, p in model.named_parameters():
        if ".lora_" in name or "original_module" in name:
            continue
        if name in bases:
            layer = layers[bases[name]]
            params = (p, *layer.lora_A.parameters(), *layer.lora_B.parameters())
            compute = partial(merged_weight, layer)
        elif only_changed and not p.requires_grad:
            continue
        else:
            params, compute = (p,), p.detach
        hf = hf_name(name)
        shape = to_hub_layout(model_type, hf, torch.empty(full_shape(p), device="meta")).shape
        out.append(SyncUnit(hf, params, tuple(shape), dtype or p.dtype, partial(_hub, model_type, hf, compute)))
    return out


def plan_buckets(units: Sequence[SyncUnit], bucket_bytes: int) -> List[List[SyncUnit]]:
    """Consecutive units whose bytes to send stay within ``bucket_bytes`` per bucket (a bigger one alone)."""
    from mmrl.rollout.weight_channel import buckets

    return [list(units[lo:hi]) for lo, hi in buckets([u.nbytes for u in units], bucket_bytes)]


class SyncWeights:
    """One sync's weights, bucket by bucket: ``buckets()`` yields each bucket's (HF name, tensor) pairs while its
    parameters are gathered (``gather(params)``: a context manager entered on every rank in the same order, e.g.
    ``deepspeed.zero.GatheredParameters``; none: the tensors are the parameters' own, as ``rollout_weights``);
    iterating yields the pairs one by one. ``manifests`` describe the buckets before anything is gathered."""

    def __init__(self, model, only_changed: bool = True, dtype: Optional[torch.dtype] = None,
                 bucket_bytes: int = BUCKET_BYTES, gather: Optional[Callable] = None):
        self.plan = plan_buckets(sync_units(model, only_changed, dtype), bucket_bytes)
        self.gather = gather

    @property
    def gathers(self) -> bool:
        """True if every rank must walk the buckets (their gathers are collective)."""
        return self.gather is not None

    @property
    def manifests(self) -> List[List[Tuple[str, str, List[int]]]]:
        return [[(u.name, str(u.dtype).removeprefix("torch."), list(u.shape)) for u in b] for b in self.plan]

    def __len__(self) -> int:
        return sum(len(b) for b in self.plan)

    def _gathered(self, bucket: List[SyncUnit]):
        return self.gather([p for u in bucket for p in u.params]) if self.gather else nullcontext()

    def buckets(self) -> Iterator[List[Tuple[str, torch.Tensor]]]:
        for bucket in self.plan:
            with self._gathered(bucket):
                # gathered storage is released after the bucket: copy out (the cast would alias a same-dtype param)
                yield [(u.name, u.compute().to(u.dtype, copy=self.gathers)) for u in bucket]

    def walk(self) -> None:
        """Enter and leave every bucket's gather without computing anything: a rank that sends nothing."""
        for bucket in self.plan:
            with self._gathered(bucket):
                pass

    def __iter__(self) -> Iterator[Tuple[str, torch.Tensor]]:
        for bucket in self.buckets():
            yield from bucket


def rollout_weights(model, only_changed: bool = True, dtype: Optional[torch.dtype] = None) -> List[Tuple[str, torch.Tensor]]:
    """(HF name, tensor) pairs to send, each cast to ``dtype`` (the engine's; ``None``: the parameter's own); the
    whole list at once (``SyncWeights`` streams them bucket by bucket). ``only_changed``: see ``sync_units``."""
    return list(SyncWeights(model, only_changed, dtype, bucket_bytes=2**62))
