"""AdamW over trainable parameters with linear warm-up then constant learning rate."""
from __future__ import annotations

import torch


def build_optimizer(model, train_cfg, lr: float | None = None):
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("no trainable parameters (check model.freeze_vision / model.lora)")
    opt = torch.optim.AdamW(params, lr=lr if lr is not None else train_cfg.lr, weight_decay=train_cfg.weight_decay)
    warm = max(0, int(train_cfg.warmup_steps))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
    return opt, sched
