"""The policy update: teacher-forced log-probs, policy loss (+ k3 KL), micro-batched backward, clip, step.

Micro-batch losses are weighted by their share of the batch (tokens for token-mean, sequences for the
seq-mean modes), so gradient accumulation gives the same gradient as one big batch.
"""
from __future__ import annotations

import contextlib
from typing import Dict, List, Optional

import torch

from mmrl.algos.base import POLICY_LOSSES
from mmrl.algos.losses import aggregate, k3_kl
from mmrl.data.schema import Trajectory
from mmrl.media.inputs import PromptInputs, pad_right
from mmrl.models.scoring import response_logprobs


def _pad(rows: List[torch.Tensor], value=0.0) -> torch.Tensor:
    return pad_right([r.float() for r in rows], value)


def is_seq_mode(cfg_algo) -> bool:
    """Whether the loss averages over sequences (shares by rows) rather than over tokens."""
    agg = cfg_algo.gspo_loss_agg if cfg_algo.loss.startswith("gspo") else cfg_algo.loss_agg
    return agg != "token-mean"


def micro_batch_loss(loss_fn, logp, mask, adv, old=None, ref=None, cfg_algo=None):
    """Policy loss of one micro-batch plus ``kl_coef`` x k3 KL to ``ref``; ``old=None`` means ratio = 1."""
    device = logp.device
    mask = mask.to(device)
    old = logp.detach() if old is None else old.to(device)
    loss, m = loss_fn(logp, old, adv.to(device=device, dtype=logp.dtype), mask, cfg_algo)
    kl_val = torch.zeros((), device=device)
    if ref is not None and cfg_algo.kl_coef > 0:
        kl_val = aggregate(k3_kl(logp, ref.to(device)), mask, cfg_algo.loss_agg, cfg_algo.max_response_len)
        loss = loss + cfg_algo.kl_coef * kl_val
    return loss, kl_val, m


def batch_share(mask, seq_mode: bool, total_rows: int, total_tokens: int) -> float:
    """The micro-batch's share of the whole batch: trained rows (seq-mean modes) or trained tokens (token-mean)."""
    rows = int((mask.sum(dim=1) > 0).sum())
    return (rows / max(total_rows, 1)) if seq_mode else (float(mask.sum()) / max(total_tokens, 1))


def new_stats() -> Dict[str, float]:
    return {"loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "ratio_mean": 0.0}


def accumulate(stats: Dict[str, float], loss, kl_val, m: Dict[str, float], share: float) -> None:
    stats["loss"] += float(loss.detach()) * share
    stats["kl"] += float(kl_val.detach()) * share
    stats["clip_frac"] += float(m.get("clip_frac", 0.0)) * share
    stats["ratio_mean"] += float(m.get("ratio_mean", 1.0)) * share


def policy_update(model, optimizer, trajs: List[Trajectory], inputs: List[PromptInputs], advantages: torch.Tensor,
                  cfg_algo, cfg_train, temperature: float, pad_id: int,
                  old_logps: Optional[List[torch.Tensor]] = None, ref_logps: Optional[List[torch.Tensor]] = None,
                  autocast=None) -> Dict[str, float]:
    """One optimizer step over ``trajs``. ``old_logps=None`` means one update per rollout: ratio = 1 exactly."""
    loss_fn = POLICY_LOSSES.get(cfg_algo.loss)
    n = len(trajs)
    seq_mode = is_seq_mode(cfg_algo)
    total_tokens = sum(int(t.loss_mask.sum()) for t in trajs)
    total_rows = sum(1 for t in trajs if bool(t.loss_mask.any()))  # aggregate() skips rows with no trained token
    mb = cfg_train.micro_batch
    stats = new_stats()
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for s in range(0, n, mb):
        idx = list(range(s, min(n, s + mb)))
        items = [trajs[i].scoring_item(inputs) for i in idx]
        with autocast() if autocast else contextlib.nullcontext():
            lps = response_logprobs(model, items, temperature=temperature, micro_batch=len(items), pad_id=pad_id)
        logp = _pad(lps)
        mask = _pad([trajs[i].loss_mask for i in idx])
        old = _pad(old_logps[i] for i in idx) if old_logps is not None else None
        ref = _pad([ref_logps[i] for i in idx]) if ref_logps is not None else None
        loss, kl_val, m = micro_batch_loss(loss_fn, logp, mask, advantages[idx], old, ref, cfg_algo)
        share = batch_share(mask, seq_mode, total_rows, total_tokens)
        (loss * share).backward()
        accumulate(stats, loss, kl_val, m, share)
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg_train.grad_clip if cfg_train.grad_clip > 0 else float("inf"))
    optimizer.step()
    stats["grad_norm"] = float(grad_norm)
    return stats
