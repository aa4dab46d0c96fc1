"""Mixed precision where the device supports it: ``train.precision`` bf16 / fp16 -> ``torch.autocast``.

bf16 autocast runs on CUDA and on CPU; fp16 needs CUDA (a ConfigError naming the key otherwise). fp32 is a no-op.

Master weights on the torch backend (as DeepSpeed's bf16 mode and Micikevicius et al. 2018, "Mixed Precision
Training", keep them): with ``model.dtype: bfloat16`` the trainable parameters are held in fp32 (so are their
gradients and AdamW's moments) while frozen ones stay bf16, and forward / backward run under bf16 autocast
(``train.precision: bf16``). AdamW's step is ~lr per entry; bf16 keeps 8 significant bits, so on bf16 weights a
step of 1e-6 on an entry of ~1e-2 rounds away (pure-bf16 AdamW: 10 steps at lr 1e-6 changed 1.9% of the entries,
fp32 master weights 99.99%; ``tests/train/test_master_weights.py``). Pure-bf16 training is refused
(``check_training_precision``).
"""
from __future__ import annotations

import contextlib
from typing import Callable, ContextManager

import torch

from mmrl.advice import advice
from mmrl.errors import ConfigError


def check_training_precision(cfg, backend: str | None = None) -> None:
    """Refuse low-precision weights without master weights, before any weights load (torch backend; DeepSpeed
    keeps its own fp32 master copy). ``backend``: the one that trains (default ``train.backend``)."""
    if (backend or cfg.train.backend) != "torch":
        return
    if cfg.model.dtype == "float16":
        raise ConfigError("config key 'model.dtype' = 'float16' cannot be trained on train.backend=torch (no loss "
                          f"scaling): use {advice('fp16_to_bf16')}, or {advice('fp16_deepspeed')}")
    if cfg.model.dtype == "bfloat16" and cfg.train.precision != "bf16":
        raise ConfigError(f"config key 'train.precision' = {cfg.train.precision!r} with model.dtype=bfloat16 would "
                          "train pure bf16 weights (small AdamW updates round away); set "
                          f"{advice('bf16_master')} (fp32 master weights, bf16 compute) or {advice('fp32_weights')}")


def keep_fp32_master(model) -> int:
    """Trainable parameters (and so their gradients and optimizer state) to fp32, in place, before the optimizer is
    built; frozen ones keep their dtype. Returns how many parameters were cast."""
    cast = 0
    for p in model.parameters():
        if p.requires_grad and p.dtype in (torch.bfloat16, torch.float16):
            p.data = p.data.float()
            cast += 1
    return cast


def autocast_factory(precision: str, device: torch.device) -> Callable[[], ContextManager]:
    if precision == "fp32":
        return contextlib.nullcontext
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    if device.type == "cpu" and dtype is torch.float16:
        raise ConfigError("config key 'train.precision' = 'fp16' needs a CUDA device; use bf16 or fp32 on a CPU")
    if device.type == "cuda" and dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ConfigError("config key 'train.precision' = 'bf16' is not supported by this GPU; use fp16 or fp32")
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)
