"""How far LoRA weight syncs move the trainer's base weight: the old in-place merge/unmerge vs mmrl's sync.

    OMP_NUM_THREADS=1 .venv/bin/python bench/lora_sync_drift.py [--dim 3584] [--r 64] [--alpha 128] [--syncs 50]

One bf16 ``dim x dim`` projection (Qwen2.5-VL-7B's q/o size by default) with a peft LoRA adapter (A: peft's
Kaiming init; B: normal, ``--b-std``, standing for a trained adapter). Each sync first changes the adapter (an
optimizer step: ``--step-std`` noise on A and B), then:

- before (mmrl up to issue 26): ``merge_adapter()`` (W += BA*alpha/r in bf16, in place), send, ``unmerge_adapter()``;
- after (``mmrl.rollout.weight_sync``): send ``W + BA*alpha/r`` computed in fp32 off the module, W only read.

Printed per way: the share of W's entries that differ from the initial W after ``--syncs`` syncs and the relative
Frobenius drift ||W - W0|| / ||W0||, plus the largest gap between the sent weight and the fp32 formula.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def build(dim: int, r: int, alpha: int, b_std: float, seed: int):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    net = torch.nn.Sequential()
    net.add_module("proj", torch.nn.Linear(dim, dim, bias=False))
    torch.nn.init.normal_(net.proj.weight, std=0.02)
    model = get_peft_model(net, LoraConfig(r=r, lora_alpha=alpha, target_modules=["proj"])).to(torch.bfloat16)
    with torch.no_grad():
        model.base_model.model.proj.lora_B["default"].weight.normal_(std=b_std)
    return model


def run(way: str, a) -> dict:
    from mmrl.rollout.weight_sync import rollout_weights

    model = build(a.dim, a.r, a.alpha, a.b_std, a.seed)
    layer = model.base_model.model.proj
    w0 = layer.base_layer.weight.detach().clone()
    gen = torch.Generator().manual_seed(a.seed + 1)
    worst = 0.0
    for _ in range(a.syncs):
        with torch.no_grad():
            for p in (layer.lora_A["default"].weight, layer.lora_B["default"].weight):
                p.add_(torch.randn(p.shape, generator=gen).to(p.dtype) * a.step_std)
        want = w0.float() + layer.lora_B["default"].weight.float() @ layer.lora_A["default"].weight.float() * (a.alpha / a.r)
        if way == "before":
            model.merge_adapter()
            sent = layer.base_layer.weight.detach().float().clone()
            model.unmerge_adapter()
        else:
            sent = rollout_weights(model, dtype=torch.float32)[0][1]
        worst = max(worst, float((sent.detach() - want.detach()).abs().max()))
    w = layer.base_layer.weight.detach()
    return {"changed": float((w != w0).float().mean()), "rel_frob": float((w.float() - w0.float()).norm() / w0.float().norm()),
            "sent_vs_fp32": worst}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dim", type=int, default=3584)
    p.add_argument("--r", type=int, default=64)
    p.add_argument("--alpha", type=int, default=128)
    p.add_argument("--syncs", type=int, default=50)
    p.add_argument("--b-std", type=float, default=1.5e-3)
    p.add_argument("--step-std", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    print(f"one bf16 {a.dim}x{a.dim} projection, LoRA r {a.r} alpha {a.alpha}, {a.syncs} syncs")
    print("| sync | entries of W changed | ||W - W0|| / ||W0|| | max |sent - (W0 + BA*alpha/r)_fp32| |")
    print("|---|---|---|---|")
    for way in ("before", "after"):
        m = run(way, a)
        print(f"| {way} | {100 * m['changed']:.1f}% | {m['rel_frob']:.2e} | {m['sent_vs_fp32']:.2e} |")


if __name__ == "__main__":
    main()
