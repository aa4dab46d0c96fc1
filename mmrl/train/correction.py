"""Rollout correction in the step: which trainer log-probs the weights compare with the sampler's, the batch-wide
normaliser, and the per-step mismatch metrics (formulas: ``mmrl.algos.rollout_correction``; docs/rollout_correction.md).

Three policies (decoupled PPO, AReaL; verl's ``rollout_correction``): the behaviour policy μ that sampled (its
log-probs ride on ``Trajectory.logprobs``), the proximal/old policy π_old = the trainer's own log-probs at the
weights before this step's update, and π_θ being trained. The loss is ``w_t · ℓ_clip(π_θ / π_old)`` with
``w_t = f(π_old / μ)`` fixed for the step:

- ``ppo_epochs = 1`` and no batch normalisation: π_old is each micro-batch's own log-probs (detached) in the single
  update, taken before the optimizer steps, so no extra pass; the PPO ratio stays 1 exactly.
- ``ppo_epochs > 1``, a spec that needs old log-probs, or ``batch_normalize``: π_old is the scoring pass before the
  first epoch (``prox``), the same for every epoch; the weights do not drift with θ.

The mismatch (``mismatch/*``) is measured every step on the trained tokens whatever the mode, from π_old and μ;
``rollout_corr/*`` are the weights' statistics when a mode is on. Both are global (rows gathered over ranks).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch

from mmrl.algos.rollout_correction import correction_weights, mismatch_metrics, mode_threshold
from mmrl.media.inputs import pad_right


@dataclass
class Correction:
    """One step's correction: the config, the sampler's log-probs ``behav`` of the update's trajectories (in order),
    π_old's ``prox`` (None: each micro-batch's own detached log-probs, collected into ``collected``) and the batch
    normaliser ``norm`` (1 without ``batch_normalize``)."""

    rc: object  # mmrl.loss_params.RolloutCorrection
    behav: List[torch.Tensor]
    prox: Optional[List[torch.Tensor]] = None
    norm: float = 1.0
    collected: Dict[int, torch.Tensor] = field(default_factory=dict)

    @property
    def on(self) -> bool:
        return self.rc.mode != "none"

    def micro_batch(self, idx: List[int], logp: torch.Tensor, mask: torch.Tensor) -> Optional[torch.Tensor]:
        """The weights ``[n, T]`` of rows ``idx`` (``logp``, ``mask`` their padded ``[n, T]``), None when off; records
        π_old's rows when there is no ``prox`` (the first call per row wins: the first epoch, before any step)."""
        if self.prox is None:
            for j, i in enumerate(idx):
                self.collected.setdefault(i, logp[j, : self.behav[i].numel()].detach().float().cpu())
        if not self.on:
            return None
        width = logp.shape[1]
        old = logp.detach() if self.prox is None else _pad([self.prox[i] for i in idx], width).to(logp.device)
        behav = _pad([self.behav[i] for i in idx], width).to(logp.device)
        level, thr = mode_threshold(self.rc.mode, self.rc.threshold, self.rc.threshold_low)
        w, _ = correction_weights(old.float() - behav.float(), mask.to(logp.device), level, thr)
        return (w / self.norm).to(logp.dtype)

    def trainer_logps(self) -> List[torch.Tensor]:
        """π_old's log-probs of every row: ``prox`` or what the update collected."""
        return list(self.prox) if self.prox is not None else [self.collected[i] for i in range(len(self.behav))]


def _pad(rows: List[torch.Tensor], width: int) -> torch.Tensor:
    t = pad_right([r.float() for r in rows], 0.0)
    return torch.nn.functional.pad(t, (0, width - t.shape[1])) if t.shape[1] < width else t[:, :width]


def batch_norm_factor(backend, rc, prox: List[torch.Tensor], behav: List[torch.Tensor],
                      masks: List[torch.Tensor]) -> float:
    """The global mean of the un-normalised weights (verl's ``distributed_masked_mean``): over trained tokens at
    token level, over sequences with a trained token at sequence level; 1 when it is ~0."""
    level, thr = mode_threshold(rc.mode, rc.threshold, rc.threshold_low)
    total = count = 0.0
    if prox:
        m = pad_right([x.float() for x in masks], 0.0)
        w, _ = correction_weights(pad_right([p.float() for p in prox], 0.0) - pad_right([b.float() for b in behav], 0.0),
                                  m, level, thr)
        if level == "token":
            total, count = float(w.sum()), float(m.sum())
        else:
            has = m.sum(-1) > 0
            total, count = float((w.sum(-1)[has] / m.sum(-1)[has]).sum()), float(has.sum())
    total, count = backend.all_reduce([total, count])
    mean = total / max(count, 1e-8)
    return mean if mean > 1e-8 else 1.0


def step_metrics(backend, corr: Correction, masks: List[torch.Tensor]) -> Dict[str, float]:
    """``mismatch/*`` (always) and ``rollout_corr/*`` (a mode on) over every rank's trained rows."""
    local = {"t": corr.trainer_logps(), "b": [b.float().cpu() for b in corr.behav], "m": [m.float().cpu() for m in masks]}
    parts = backend.gather(local)
    rows = {k: [x for p in parts for x in p[k]] for k in local}
    if not rows["m"]:  # no row trained this step (e.g. dynamic sampling kept none): nothing was scored
        return {"mismatch/tokens": 0.0}
    t, b, m = (pad_right(rows[k], 0.0) for k in ("t", "b", "m"))
    out = {f"mismatch/{k}": v for k, v in mismatch_metrics(t, b, m).items()}
    if corr.on and bool(m.bool().any()):
        level, thr = mode_threshold(corr.rc.mode, corr.rc.threshold, corr.rc.threshold_low)
        _, wm = correction_weights(t - b, m, level, thr)
        out.update({f"rollout_corr/{k}": v for k, v in wm.items()})
        if corr.rc.batch_normalize:
            out["rollout_corr/batch_norm_factor"] = float(corr.norm)
    return out
