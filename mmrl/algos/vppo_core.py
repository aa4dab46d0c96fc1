"""VPPO — "Spotlight on Token Perception for Multimodal Reinforcement Learning" (Huang et al. 2025,
arXiv 2510.09285; code ``huaixuheqing/VPPO-RL``), specs/algorithms.md §7. Pure tensor functions.

Source: ``verl/workers/actor/dp_actor.py`` (``update_policy``), ``verl/workers/perc_utils.py`` and
``examples/configs/train_vppo_7b.sh`` of the VPPO-RL repository.

- **Intervention** (``perc_utils.random_patch_blackening``): the image is cut into 14 x 14 px cells from its
  top-left corner (edge cells cropped) and each cell is set to 0 with probability 0.5; the same response tokens
  are re-scored under it, giving ``aug_log_probs`` (one extra forward pass, ``compute_aug_log_probs``). In mmrl
  this is the registered view transform ``patch_mask`` (patch=14, p=0.5, value=0).
- **Visual dependency per token** (the ``low_var_kl`` of ``aug`` against ``old``)::

      d_t = clamp(logp_aug_t − logp_old_t, −20, 20),   S_t = clamp(e^{d_t} − d_t − 1, 0, 10)

- **Trajectory-level Advantage Shaping (TAS)**: ``S̄_i = Σ_t S_t / max(|o_i|, 1)``; over the mini-batch,
  ``n_i = clamp((S̄_i − min S̄)/(max S̄ − min S̄), 0, 1)`` and, with ``μ = mean_i n_i``,
  ``α_max = α_min + (1 − α_min)/(μ + 1e-8)``, ``scale_i = α_min + n_i (α_max − α_min)`` (so mean scale = 1);
  ``A_i ← A_i · scale_i``. When ``max S̄ − min S̄ ≤ 1e-6`` (or fewer than two responses) every scale is 1.
  The code takes min/max over the PPO mini-batch and μ over each micro-batch; mmrl takes all three over the
  step's trained rows (one mini-batch per step), so the mean scale is exactly 1 over the batch.
- **Token-level Gradient Filtering (TGF)**: per response, keep the top ``k_i = ⌈k·|o_i|⌉`` tokens by S_t
  (ties by position, as ``torch.sort``); the others get no gradient but still count in the token-mean
  denominator. With the PPO clip loss that is exactly a zero advantage on those tokens, so VPPO's advantage is
  per token: ``A_{i,t} = A_i · scale_i · 1[t ∈ top-k_i]``.
- **Defaults**: ``k = 0.4`` and ``α_min = 0.9`` (the 7B script; the config defaults are 0.2 and 0.8); the rest
  is DAPO (clip 0.2/0.28, token-mean, online filtering on accuracy, no KL), n = 8. The code also adds
  ``0.06 · mean(−log π)`` (its "entropy penalty") to the loss; that is a loss term, not part of this file.

Spec vectors: S̄ = [0, .1, .3], α_min = 0.9 -> scales [0.9, 0.975, 1.125]; |o| = 5, k = 0.4 selects 2 tokens.
"""
from __future__ import annotations

import math
from typing import Sequence, Tuple

import torch

from mmrl.algos.pacg_gate import efs_tokens, log_ratio


def padded(rows: Sequence[torch.Tensor], width: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Right-pad per-response vectors ``[R_i]`` to ``[N, T]`` (T = max(R_i, width)) and the valid mask."""
    t = max([int(r.numel()) for r in rows] + [int(width)])
    out = torch.zeros((len(rows), t))
    mask = torch.zeros((len(rows), t), dtype=torch.bool)
    for i, r in enumerate(rows):
        out[i, : r.numel()] = r.float()
        mask[i, : r.numel()] = True
    return out, mask


def visual_dependency(logp_aug: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``S_t`` ``[N, T]`` (0 outside ``mask``)."""
    s = efs_tokens(log_ratio(logp_aug, logp_old))
    return torch.where(mask.bool(), s, torch.zeros_like(s))


def trajectory_scores(s: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``S̄_i = Σ_t S_t / max(|o_i|, 1)`` ``[N]``."""
    m = mask.bool()
    return torch.where(m, s, torch.zeros_like(s)).sum(1) / m.sum(1).clamp(min=1).float()


def tas_scales(scores: torch.Tensor, valid: torch.Tensor, alpha_min: float = 0.9, eps: float = 1e-8) -> torch.Tensor:
    """TAS scale per response ``[N]`` from trajectory scores ``S̄`` (``valid``: responses with ≥ 1 token)."""
    if not 0.0 <= alpha_min <= 1.0:
        raise ValueError(f"VPPO alpha_min must be in [0, 1], got {alpha_min}")
    scale = torch.ones_like(scores, dtype=torch.float32)
    v = scores[valid.bool()].double()
    if v.numel() < 2:
        return scale
    lo, hi = v.min(), v.max()
    if float(hi - lo) <= 1e-6:
        return scale
    n = ((v - lo) / (hi - lo)).clamp(0.0, 1.0)
    alpha_max = alpha_min + (1.0 - alpha_min) / (n.mean() + eps)
    scale[valid.bool()] = (alpha_min + n * (alpha_max - alpha_min)).float()
    return scale


def tgf_mask(s: torch.Tensor, mask: torch.Tensor, k: float = 0.4) -> torch.Tensor:
    """Bool ``[N, T]``: the top ``⌈k·|o_i|⌉`` valid tokens of each row by ``S_t``."""
    if not 0.0 < k <= 1.0:
        raise ValueError(f"VPPO top-k token ratio must be in (0, 1], got {k}")
    m = mask.bool()
    keep_n = torch.tensor([math.ceil(k * int(x)) for x in m.sum(1)], dtype=torch.long)
    masked = torch.where(m, s.float(), torch.full_like(s.float(), -float("inf")))
    order = torch.sort(masked, dim=1, descending=True, stable=True).indices
    rank_ok = torch.arange(s.shape[1]).view(1, -1) < keep_n.view(-1, 1)
    out = torch.zeros_like(m).scatter_(1, order, rank_ok)
    return out & m


def vppo_token_advantages(advantages: torch.Tensor, logp_aug: Sequence[torch.Tensor], logp_old: Sequence[torch.Tensor],
                          alpha_min: float = 0.9, k: float = 0.4, shaping: bool = True, filtering: bool = True):
    """VPPO's per-token advantages ``[N, T]`` from sequence advantages ``[N]`` and the two log-prob lists.

    Returns ``(adv [N, T], S [N, T], scale [N], keep [N, T])``.
    """
    if len(logp_aug) != len(logp_old) or len(logp_old) != advantages.numel():
        raise ValueError(f"VPPO needs one re-scored and one old log-prob row per response: got {len(logp_aug)}, "
                         f"{len(logp_old)} for {advantages.numel()} advantages")
    for i, (a, o) in enumerate(zip(logp_aug, logp_old)):
        if a.shape != o.shape:
            raise ValueError(f"response {i}: re-scored log-probs {tuple(a.shape)} vs old {tuple(o.shape)}")
    aug, mask = padded(list(logp_aug))
    old, _ = padded(list(logp_old))
    s = visual_dependency(aug, old, mask)
    scale = tas_scales(trajectory_scores(s, mask), mask.any(1), alpha_min) if shaping else torch.ones(len(logp_old))
    keep = tgf_mask(s, mask, k) if filtering else mask
    adv = advantages.float().view(-1, 1) * scale.view(-1, 1) * keep.float()
    return adv, s, scale, keep
