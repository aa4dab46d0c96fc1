"""The policy update: teacher-forced log-probs, policy loss (+ k3 KL), micro-batched backward, clip, step.

One function for every backend (``mmrl.train.backend``). Micro-batch losses are weighted by their share of the
GLOBAL batch (tokens for token-mean, sequences for the seq-mean modes; counts all-reduced over ranks), and by the
world size because data-parallel backends average gradients over ranks: the summed gradient then equals one big
batch's on one process. Every rank runs the same number of backward passes (ZeRO reduces or gathers in each): a rank
with fewer micro-batches runs zero-weight passes on ``fallback``. With a ``Correction`` (``mmrl.train.correction``)
the rollout-correction weights multiply each micro-batch's per-token loss.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import torch

from mmrl.algos.base import POLICY_LOSSES
from mmrl.algos.losses import aggregate, k3_kl
from mmrl.data.schema import Trajectory
from mmrl.media.inputs import PromptInputs, pad_right


def _pad(rows: List[torch.Tensor], value=0.0) -> torch.Tensor:
    return pad_right([r.float() for r in rows], value)


def is_seq_mode(cfg_algo) -> bool:
    """Whether the loss averages over sequences (shares by rows) rather than over tokens."""
    return loss_agg(cfg_algo) != "token-mean"


def micro_batch_loss(loss_fn, logp, mask, adv, old=None, ref=None, cfg_algo=None, is_weights=None):
    """Policy loss of one micro-batch plus ``kl_coef`` x k3 KL to ``ref``; ``old=None`` means ratio = 1.

    ``adv`` is ``[n]`` or per token ``[n, T']`` (cut or zero-padded to the micro-batch's width); ``is_weights``: the
    rollout-correction weights ``[n, T]`` handed to the loss (None: none, and the loss is called without them)."""
    device = logp.device
    mask = mask.to(device)
    old = logp.detach() if old is None else old.to(device)
    adv = adv.to(device=device, dtype=logp.dtype)
    if adv.dim() == 2 and adv.shape[1] != logp.shape[1]:
        width = logp.shape[1]
        adv = adv[:, :width] if adv.shape[1] > width else torch.nn.functional.pad(adv, (0, width - adv.shape[1]))
    loss, m = loss_fn(logp, old, adv, mask, cfg_algo, **({} if is_weights is None else {"is_weights": is_weights}))
    kl_val = torch.zeros((), device=device)
    if ref is not None and cfg_algo.kl_coef > 0:
        kl_val = aggregate(k3_kl(logp, ref.to(device)), mask, cfg_algo.loss_agg, cfg_algo.max_response_len)
        loss = loss + cfg_algo.kl_coef * kl_val
    return loss, kl_val, m


def loss_agg(cfg_algo) -> str:
    """The aggregation the configured loss uses (GSPO losses have their own)."""
    return cfg_algo.gspo_loss_agg if cfg_algo.loss.startswith("gspo") else cfg_algo.loss_agg


def batch_share(mask, seq_mode: bool, total_rows: int, total_tokens: int, all_rows: Optional[int] = None) -> float:
    """The micro-batch's share of the whole batch: trained rows (seq-mean modes) or trained tokens (token-mean).

    ``all_rows`` (Dr.GRPO's ``seq-mean-token-sum-norm``, whose normaliser N x L_max counts every row, trained or
    not): the share is the micro-batch's row count over all rows."""
    if all_rows is not None:
        return mask.shape[0] / max(all_rows, 1)
    rows = int((mask.sum(dim=1) > 0).sum())
    return (rows / max(total_rows, 1)) if seq_mode else (float(mask.sum()) / max(total_tokens, 1))


def new_stats() -> Dict[str, float]:
    return {"loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "ratio_mean": 0.0}


def accumulate(stats: Dict[str, float], loss, kl_val, m: Dict[str, float], share: float) -> None:
    stats["loss"] += float(loss.detach()) * share
    stats["kl"] += float(kl_val.detach()) * share
    stats["clip_frac"] += float(m.get("clip_frac", 0.0)) * share
    stats["ratio_mean"] += float(m.get("ratio_mean", 1.0)) * share


def policy_update(backend, trajs: List[Trajectory], inputs: List[PromptInputs], advantages: torch.Tensor,
                  cfg_algo, micro_batch: int, old_logps: Optional[List[torch.Tensor]] = None,
                  ref_logps: Optional[List[torch.Tensor]] = None, fallback: Optional[Trajectory] = None,
                  correction=None) -> Dict[str, float]:
    """One optimizer step over this rank's ``trajs``; returns global stats (the same on every rank).

    ``old_logps=None`` means one update per rollout: ratio = 1 exactly. ``correction``: a
    ``mmrl.train.correction.Correction`` over ``trajs`` (None: no weights)."""
    loss_fn = POLICY_LOSSES.get(cfg_algo.loss)
    n = len(trajs)
    seq_mode = is_seq_mode(cfg_algo)
    W = backend.world_size
    total_tokens, total_rows, all_rows = backend.all_reduce([sum(int(t.loss_mask.sum()) for t in trajs),
                                                             sum(1 for t in trajs if bool(t.loss_mask.any())), n])
    by_all_rows = int(all_rows) if loss_agg(cfg_algo) == "seq-mean-token-sum-norm" else None
    n_mb = int(backend.all_reduce([math.ceil(n / micro_batch)], "max")[0])
    stats = new_stats()
    backend.zero_grad()
    for k in range(n_mb):
        idx = list(range(k * micro_batch, min(n, (k + 1) * micro_batch)))
        dummy = not idx
        mb_trajs = [trajs[i] for i in idx] if idx else [trajs[0] if trajs else fallback]
        items = [t.scoring_item(inputs) for t in mb_trajs]
        logp = _pad(backend.train_logprobs(items))
        mask = _pad([t.loss_mask for t in mb_trajs])
        old = _pad([old_logps[i] for i in idx]) if (old_logps is not None and not dummy) else None
        ref = _pad([ref_logps[i] for i in idx]) if (ref_logps is not None and not dummy) else None
        adv = advantages[idx] if not dummy else torch.zeros(1)
        w = correction.micro_batch(idx, logp, mask) if (correction is not None and not dummy) else None
        loss, kl_val, m = micro_batch_loss(loss_fn, logp, mask, adv, old, ref, cfg_algo, w)
        share = 0.0 if dummy else batch_share(mask, seq_mode, total_rows, total_tokens, by_all_rows)
        backend.backward(loss * (share * W), last=(k == n_mb - 1))
        accumulate(stats, loss, kl_val, m, share)
    grad_norm = backend.step()
    keys = list(stats)
    stats = dict(zip(keys, backend.all_reduce([stats[k] for k in keys])))
    stats["grad_norm"] = grad_norm
    return stats
