"""The policy update on a DeepSpeed engine: ``mmrl.train.update.policy_update`` with ZeRO's backward and step.

Same loss, same micro-batching, same share weighting as ``policy_update``; the differences are only those
ZeRO needs (see ``mmrl.dist``):

- token / sequence counts are all-reduced, so shares are of the GLOBAL batch, and each rank's loss is scaled by
  the world size because ZeRO averages gradients over ranks;
- every rank runs the same number of backward passes (ZeRO-2 reduces, ZeRO-3 gathers, in each): a rank with fewer
  micro-batches runs zero-weight passes on one of its trajectories;
- forwards go through ``engine(...)`` (``engine_logprobs``); ``engine.backward`` per micro-batch with the
  accumulation boundary set on the last, then one ``engine.step`` (clipping by ``gradient_clipping`` in the
  DeepSpeed config = ``train.grad_clip``).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import torch

from mmrl.algos.base import POLICY_LOSSES
from mmrl.data.schema import Trajectory
from mmrl.media.inputs import PromptInputs
from mmrl.dist import all_reduce, world_size
from mmrl.models.scoring import response_logprobs
from mmrl.train.update import _pad, accumulate, batch_share, is_seq_mode, micro_batch_loss, new_stats


def engine_logprobs(engine, items, temperature: float, micro_batch: int, pad_id: int) -> List[torch.Tensor]:
    """``response_logprobs`` run as the forward of a DeepSpeed engine.

    Going through ``engine(...)`` runs what DeepSpeed does around a forward (ZeRO-3 step reset, the micro-step
    bookkeeping that makes gradients accumulate instead of overwrite, the backward-prologue hooks); calling the
    model's submodules directly skips it (on ZeRO-3 only the last micro-batch's gradient would survive).
    """
    module = engine.module
    module.forward = lambda batch: response_logprobs(module, batch, temperature, micro_batch, pad_id)
    try:
        return engine(items)
    finally:
        del module.forward


def lockstep_logprobs(engine, items, temperature: float, micro_batch: int, pad_id: int, fallback=None) -> List[torch.Tensor]:
    """``engine_logprobs`` with the item count padded to the largest rank's (ZeRO-3 forwards are collective)."""
    n = len(items)
    n_max = int(all_reduce([n], "max")[0])
    pad = items[0] if items else fallback
    lps = engine_logprobs(engine, list(items) + [pad] * (n_max - n), temperature, micro_batch, pad_id)
    return lps[:n]


def ds_policy_update(engine, trajs: List[Trajectory], inputs: List[PromptInputs], advantages: torch.Tensor,
                     cfg_algo, cfg_train, temperature: float, pad_id: int,
                     old_logps: Optional[List[torch.Tensor]] = None, ref_logps: Optional[List[torch.Tensor]] = None,
                     fallback: Optional[Trajectory] = None) -> Dict[str, float]:
    """One optimizer step of ``engine`` over this rank's ``trajs``; returns global stats (same on every rank)."""
    loss_fn = POLICY_LOSSES.get(cfg_algo.loss)
    model = engine.module
    n = len(trajs)
    seq_mode = is_seq_mode(cfg_algo)
    W = world_size()
    total_tokens, total_rows = all_reduce([sum(int(t.loss_mask.sum()) for t in trajs),
                                           sum(1 for t in trajs if bool(t.loss_mask.any()))])
    mb = cfg_train.micro_batch
    n_mb = int(all_reduce([math.ceil(n / mb)], "max")[0])
    stats = new_stats()
    model.train()
    for k in range(n_mb):
        idx = list(range(k * mb, min(n, (k + 1) * mb)))
        dummy = not idx
        mb_trajs = [trajs[i] for i in idx] if idx else [trajs[0] if trajs else fallback]
        items = [t.scoring_item(inputs) for t in mb_trajs]
        lps = engine_logprobs(engine, items, temperature, len(items), pad_id)
        logp = _pad(lps)
        mask = _pad([t.loss_mask for t in mb_trajs])
        old = _pad(old_logps[i] for i in idx) if (old_logps is not None and not dummy) else None
        ref = _pad([ref_logps[i] for i in idx]) if (ref_logps is not None and not dummy) else None
        adv = advantages[idx] if not dummy else torch.zeros(1)
        loss, kl_val, m = micro_batch_loss(loss_fn, logp, mask, adv, old, ref, cfg_algo)
        share = 0.0 if dummy else batch_share(mask, seq_mode, total_rows, total_tokens)
        engine.set_gradient_accumulation_boundary(k == n_mb - 1)
        engine.backward(loss * (share * W))
        accumulate(stats, loss, kl_val, m, share)
    engine.step()
    keys = list(stats)
    stats = dict(zip(keys, all_reduce([stats[k] for k in keys])))
    norm = engine.get_global_grad_norm()
    stats["grad_norm"] = float(norm) if norm is not None else float("nan")
    return stats
