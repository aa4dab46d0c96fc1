"""The DeepSpeed JSON of a run: ``train.deepspeed_config`` (default ``configs/deepspeed/zero2.json``) with its
"auto" values filled from the mmrl config, as the HF Trainer does.

Filled: batch sizes (1 micro-batch per "step", mmrl accumulates itself), ``gradient_clipping`` = ``train.grad_clip``,
``bf16`` / ``fp16`` from ``train.precision`` (GPUs only: the CPU accelerator trains in fp32), optimizer ``lr`` and
``weight_decay``. On the CPU accelerator ``overlap_comm`` and pinned memory are turned off. Without an
``optimizer`` section mmrl's own AdamW is handed to DeepSpeed; with one (e.g. ZeRO-Offload's CPU Adam) DeepSpeed
builds it. A ``scheduler`` section is refused: mmrl drives the LR schedule.
"""
from __future__ import annotations

import json
from pathlib import Path

from mmrl.config import Config
from mmrl.errors import ConfigError

DS_CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "deepspeed"


def require_deepspeed():
    try:
        import deepspeed  # noqa: F401
    except ImportError as e:
        raise ConfigError("config key 'train.backend' = 'deepspeed' needs DeepSpeed: "
                          "pip install deepspeed (or the 'deepspeed' extra)") from e


def load_ds_config(cfg: Config, device_type: str, world: int) -> dict:
    """Read ``train.deepspeed_config`` (default ``configs/deepspeed/zero2.json``) and fill the "auto" values."""
    path = Path(cfg.train.deepspeed_config) if cfg.train.deepspeed_config else DS_CONFIG_DIR / "zero2.json"
    if not path.exists() and (DS_CONFIG_DIR.parent.parent / path).exists():
        path = DS_CONFIG_DIR.parent.parent / path
    if not path.exists():
        raise ConfigError(f"config key 'train.deepspeed_config': file not found: {path}")
    ds = json.loads(path.read_text())
    if "scheduler" in ds:
        raise ConfigError(f"{path}: remove 'scheduler'; mmrl drives the LR schedule (train.lr, train.warmup_steps)")
    gpu = device_type != "cpu"
    fill = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "train_batch_size": world,
            "gradient_clipping": float(cfg.train.grad_clip)}
    for k, v in fill.items():
        if ds.get(k, "auto") == "auto":
            ds[k] = v
    for key, on in (("bf16", gpu and cfg.train.precision == "bf16"), ("fp16", gpu and cfg.train.precision == "fp16")):
        if ds.get(key, {}).get("enabled", "auto") == "auto":
            ds.setdefault(key, {})["enabled"] = on
    opt = ds.get("optimizer", {}).get("params", {})
    for k, v in (("lr", cfg.train.lr), ("weight_decay", cfg.train.weight_decay)):
        if opt.get(k) == "auto":
            opt[k] = v
    zero = ds.setdefault("zero_optimization", {"stage": 0})
    if not gpu:  # no CUDA streams to overlap with; pinned memory needs CUDA
        zero["overlap_comm"] = False
        for k in ("offload_optimizer", "offload_param"):
            if k in zero:
                zero[k]["pin_memory"] = False
    left = [k for k, v in _walk(ds) if v == "auto"]
    if left:
        raise ConfigError(f"{path}: mmrl cannot fill 'auto' for {', '.join(left)}; give a value")
    return ds


def _walk(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _walk(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v
