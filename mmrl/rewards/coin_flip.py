"""``coin_flip``: the control reward of the miniature protocol (``docs/miniatures.md``), a seeded Bernoulli that
replaces ``accuracy``, so a control arm sees reward noise with the true reward's mean and no signal.

    r_i ~ Bernoulli(p),   p = mean_i accuracy_i over the call's batch (``p=None``, the default) or a given ``p``

The coins are independent of the responses: they come from the global torch generator, which the trainer seeds
with ``train.seed`` and saves in its checkpoints (an exact resume replays them). The true accuracy is logged as the
component ``coin_flip/true_accuracy`` and does not enter the total.

``stream_coin_flip``: the same control for the ``stream`` reward set (Stream-GDPO, ``mmrl.rewards.stream``), whose
correctness is R_out: per rollout a coin ``c_i ~ Bernoulli(p)``, ``p`` = the batch's mean R_out, replaces R_out, and
R_tool = mean_q ℓ_q u_q · c_i (the valid recall credited by the coin instead of the answer); R_fmt and R_mem are
kept. It returns ``stream``'s component names (Stream-GDPO reads them), the total Σ_c w_c R_c as
``stream_coin_flip`` and the true R_out and R_tool as ``coin_flip/true_stream_out`` / ``coin_flip/true_stream_tool``.

``dspo_coin_flip``: the same control for DSPO's correctness reward ``dspo_accuracy`` (the step-4 choice is the gold
emotion): ``Bernoulli(p)``, ``p`` = the batch's mean ``dspo_accuracy``; the true one logged as
``coin_flip/true_dspo_accuracy``.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch

from mmrl.rewards.base import REWARDS, RewardContext
from mmrl.rewards.builtin import accuracy
from mmrl.rewards.dspo_rewards import dspo_accuracy
from mmrl.rewards.stream import COMPONENTS, component_weights, mean_recall_credit, record_of, stream_components


@REWARDS.register("coin_flip")
def coin_flip(ctx: List[RewardContext], p: Optional[float] = None, **accuracy_params) -> Dict[str, List[float]]:
    """Bernoulli(p) per completion (``p`` = the batch's mean accuracy unless given), plus the true accuracy (logged)."""
    true = accuracy(ctx, **accuracy_params)
    coins = _coins(true, p, "coin_flip")
    return {"coin_flip": coins, "coin_flip/true_accuracy": true}


@REWARDS.register("dspo_coin_flip")
def dspo_coin_flip(ctx: List[RewardContext], p: Optional[float] = None, k: Optional[int] = None) -> Dict[str, List[float]]:
    """Bernoulli(p) per completion (``p`` = the batch's mean ``dspo_accuracy`` unless given), the true one logged."""
    true = dspo_accuracy(ctx, k=k)
    return {"dspo_coin_flip": _coins(true, p, "dspo_coin_flip"), "coin_flip/true_dspo_accuracy": true}


def _coins(true: List[float], p: Optional[float], name: str) -> List[float]:
    """Bernoulli(p) per value of ``true``, ``p`` = mean(true) unless given (global torch generator)."""
    if p is None:
        p = sum(true) / len(true) if true else 0.0
    if not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"{name}: p must be in [0, 1], got {p}")
    return torch.bernoulli(torch.full((len(true),), float(p), dtype=torch.float64)).tolist()


@REWARDS.register("stream_coin_flip")
def stream_coin_flip(ctx: List[RewardContext], p: Optional[float] = None,
                     weights: Optional[Dict[str, float]] = None) -> Dict[str, List[float]]:
    """The ``stream`` reward with R_out a coin of the batch's mean R_out (``p`` unless given) and R_tool credited by
    that coin; R_fmt, R_mem kept; the total ``stream_coin_flip``, the true R_out / R_tool logged (module docstring)."""
    w = component_weights(weights)
    recs = [record_of(c) for c in ctx]
    rows = [stream_components(r) for r in recs]
    true_out, true_tool = [r["out"] for r in rows], [r["tool"] for r in rows]
    coins = _coins(true_out, p, "stream_coin_flip")
    for r, rec, c in zip(rows, recs, coins):
        r["out"], r["tool"] = c, mean_recall_credit(rec) * c
    res = {f"stream_{k}": [r[k] for r in rows] for k in COMPONENTS}
    res["stream_coin_flip"] = [sum(w[k] * r[k] for k in COMPONENTS) for r in rows]
    res["coin_flip/true_stream_out"], res["coin_flip/true_stream_tool"] = true_out, true_tool
    return res
