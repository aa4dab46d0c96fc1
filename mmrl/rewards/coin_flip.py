"""``coin_flip``: the control reward of the miniature protocol (``docs/miniatures.md``), a seeded Bernoulli that
replaces ``accuracy``, so a control arm sees reward noise with the true reward's mean and no signal.

    r_i ~ Bernoulli(p),   p = mean_i accuracy_i over the call's batch (``p=None``, the default) or a given ``p``

The coins are independent of the responses: they come from the global torch generator, which the trainer seeds
with ``train.seed`` and saves in its checkpoints (an exact resume replays them). The true accuracy is logged as the
component ``coin_flip/true_accuracy`` and does not enter the total.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch

from mmrl.rewards.base import REWARDS, RewardContext
from mmrl.rewards.builtin import accuracy


@REWARDS.register("coin_flip")
def coin_flip(ctx: List[RewardContext], p: Optional[float] = None, **accuracy_params) -> Dict[str, List[float]]:
    """Bernoulli(p) per completion (``p`` = the batch's mean accuracy unless given), plus the true accuracy (logged)."""
    true = accuracy(ctx, **accuracy_params)
    if p is None:
        p = sum(true) / len(true) if true else 0.0
    if not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"coin_flip: p must be in [0, 1], got {p}")
    coins = torch.bernoulli(torch.full((len(ctx),), float(p), dtype=torch.float64)).tolist()
    return {"coin_flip": coins, "coin_flip/true_accuracy": true}
