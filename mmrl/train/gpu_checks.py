"""The checks ``scripts/gpu_smoke.sh`` runs on a GPU, as functions that also run (and are tested) on CPU.

Each returns a dict of numbers plus ``ok``; the script prints them as one table. Issue 26 items:
LoRA sync (``lora_sync_check``), precision (``precision_check``), gradient checkpointing with the shared-prefix
layouts (``checkpointing_check``), vLLM cache resets (``cache_reset_check``, needs vLLM), positions
(``positions_check``: ``mmrl.models.mrope`` when present).
"""
from __future__ import annotations

import contextlib
import importlib.util
import time
from typing import Callable, Dict, List, Sequence

import torch


def lora_sync_check(model, syncs: int = 50, dtype: torch.dtype = torch.bfloat16, step_std: float = 1e-3,
                    probe: Callable[[], torch.Tensor] | None = None) -> Dict[str, float]:
    """``syncs`` weight syncs of a peft model (adapter weights changed before each, as an optimizer step would):
    the base weights must stay bit-identical, every sent weight must equal ``(W + BA*alpha/r)_fp32`` cast to
    ``dtype``, and ``probe()`` (e.g. reference log-probs, run with the adapter disabled) must not change."""
    from mmrl.rollout.weight_sync import lora_layers, rollout_weights

    layers = lora_layers(model)
    if not layers:
        raise ValueError("lora_sync_check needs a peft LoRA model")
    base0 = {n: m.base_layer.weight.detach().clone() for n, m in layers.items()}
    with model.disable_adapter():
        ref0 = probe() if probe is not None else None
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    for _ in range(syncs):
        with torch.no_grad():
            for n, p in model.named_parameters():
                if ".lora_" in n:
                    p.add_((torch.randn(p.shape, generator=gen) * step_std).to(p.device, p.dtype))
        sent = dict(rollout_weights(model, dtype=dtype))
        for n, m in layers.items():
            a = m.active_adapters[0]
            want = (base0[n].float() + m.lora_B[a].weight.detach().float() @ m.lora_A[a].weight.detach().float()
                    * float(m.scaling[a])).to(dtype)
            got = sent[next(k for k in sent if n.endswith(k.removesuffix(".weight")))]
            worst = max(worst, float((got.float() - want.float()).abs().max()))
    changed = sum(int((m.base_layer.weight != base0[n]).sum()) for n, m in layers.items())
    ref_gap = 0.0
    if probe is not None:
        with model.disable_adapter():
            ref_gap = float((probe() - ref0).abs().max())
    return {"syncs": syncs, "base_entries_changed": changed, "sent_minus_formula": worst, "reference_gap": ref_gap,
            "ok": changed == 0 and worst == 0.0 and ref_gap == 0.0}


def changed_fraction(model, steps: int = 10, lr: float = 1e-6, master: bool = True,
                     batch: Callable[[], Dict[str, torch.Tensor]] | None = None, device: str = "cpu",
                     select: Callable[[str], bool] = lambda n: ".layers." in n and n.endswith("proj.weight")) -> float:
    """Share of the selected trainable entries that ``steps`` AdamW steps at ``lr`` change, under bf16 autocast,
    with fp32 master weights (``master``, mmrl's torch backend) or on the bf16 weights themselves (pure bf16)."""
    from mmrl.train.precision import keep_fp32_master

    if master:
        keep_fp32_master(model)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad and select(n)}
    start = {n: p.detach().clone() for n, p in params.items()}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.get_text_config().vocab_size
    for _ in range(steps):
        inputs = batch() if batch is not None else {"input_ids": torch.randint(0, vocab, (2, 24), generator=gen)}
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16):
            logits = model(**{k: v.to(device) for k, v in inputs.items()}).logits
        loss = torch.log_softmax(logits.float(), dim=-1)[..., 0].mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    moved = sum(int((p.detach() != start[n]).sum()) for n, p in params.items())
    return moved / max(1, sum(p.numel() for p in params.values()))


def precision_check(make_model: Callable[[], torch.nn.Module], device: str = "cpu", steps: int = 10,
                    lr: float = 1e-6) -> Dict[str, float]:
    """``changed_fraction`` of a bf16 model with fp32 master weights vs pure bf16 (the issue's 99.99% vs 1.9%)."""
    pure = changed_fraction(make_model(), steps, lr, master=False, device=device)
    master = changed_fraction(make_model(), steps, lr, master=True, device=device)
    return {"lr": lr, "steps": steps, "pure_bf16_changed": pure, "fp32_master_changed": master, "ok": master > 0.99}
