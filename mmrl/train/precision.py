"""Mixed precision where the device supports it: ``train.precision`` bf16 / fp16 -> ``torch.autocast``.

bf16 autocast runs on CUDA and on CPU; fp16 needs CUDA (a ConfigError naming the key otherwise). fp32 is a no-op.
"""
from __future__ import annotations

import contextlib
from typing import Callable, ContextManager

import torch

from mmrl.errors import ConfigError


def autocast_factory(precision: str, device: torch.device) -> Callable[[], ContextManager]:
    if precision == "fp32":
        return contextlib.nullcontext
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    if device.type == "cpu" and dtype is torch.float16:
        raise ConfigError("config key 'train.precision' = 'fp16' needs a CUDA device; use bf16 or fp32 on a CPU")
    if device.type == "cuda" and dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ConfigError("config key 'train.precision' = 'bf16' is not supported by this GPU; use fp16 or fp32")
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)
