"""Rollout correction: importance weights between the trainer and the sampler, and the mismatch between them.

The sampler (vLLM in bf16, its own kernels and prefix cache; or an older copy of the weights under async rollouts)
is not the policy the trainer scores, so a rollout is slightly off-policy. With ``Δ_t = log π_train(y_t) −
log π_rollout(y_t)`` on the trained tokens (``log_ratio``, mask 1):

- token level: ``ρ_t = exp(clamp(Δ_t, ±20))``; sequence level: ``ρ_i = exp(clamp(Σ_t Δ_t, ±20))`` on every token
  of response i (the product of its token ratios);
- truncation (TIS, ``threshold = C``): ``w = min(ρ, C)``; masking (IcePop, ``threshold = (low, high)``):
  ``w = ρ`` inside ``[low, high]``, 0 outside; ``w = 0`` on masked tokens; ``w`` carries no gradient;
- ``batch_normalize``: ``w / mean(w)`` (the mean over trained tokens at token level, over sequences at sequence level).

The weights multiply the per-token policy loss before aggregation (verl ``compute_policy_loss_*``:
``pg_losses * rollout_is_weights``). Semantics of verl 0.9.1 ``compute_rollout_correction_weights``
(``verl/trainer/ppo/rollout_corr_helper.py``), reimplemented; ``tests/algos/test_rollout_correction.py`` checks
equality on vectors recorded from it. TRL's ``vllm_importance_sampling_mode`` values are ``level × truncate|mask``
(``MODES``); TRL masks above its cap only, which is the band ``(0, cap]``. Docs: ``docs/rollout_correction.md``.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple, Union

import torch

from mmrl.loss_params import ROLLOUT_CORRECTION_MODES as MODES

SAFETY_BOUND = 20.0  # |log ratio| clamp before exp (verl)
LEVELS = ("token", "sequence")
Threshold = Union[float, Tuple[float, float], Sequence[float]]
_EPS = 1e-8  # verl's masked_mean denominator guard


def parse_threshold(threshold: Threshold) -> Tuple[Optional[float], float]:
    """``(low, high)``: ``low`` None for truncation (a float), the band's lower end for masking (a pair)."""
    if isinstance(threshold, bool):
        raise ValueError("rollout correction threshold must be a number or a (low, high) pair, not a boolean")
    if isinstance(threshold, (int, float)):
        low, high = None, float(threshold)
    elif isinstance(threshold, (tuple, list)) and len(threshold) == 2:
        low, high = float(threshold[0]), float(threshold[1])
        if low < 0 or low > high:
            raise ValueError(f"rollout correction band (low, high) needs 0 <= low <= high, got {tuple(threshold)}")
    else:
        raise ValueError(f"rollout correction threshold must be a number or a (low, high) pair, got {threshold!r}")
    if not high > 0:
        raise ValueError(f"rollout correction threshold must be > 0, got {high}")
    return low, high


def mode_threshold(mode: str, threshold: float, threshold_low: float = 0.0) -> Tuple[str, Threshold]:
    """``(level, threshold)`` of a config ``mode`` (``MODES``): truncation takes ``threshold`` as C, masking the band
    ``(threshold_low, threshold)``."""
    if MODES.get(mode) is None:
        raise ValueError(f"rollout correction mode {mode!r} has no weights; modes: {', '.join(MODES)}")
    level, kind = MODES[mode]
    return level, (float(threshold) if kind == "truncate" else (float(threshold_low), float(threshold)))


def _masked_mean(values: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    v = torch.where(mask.bool(), values, torch.zeros_like(values))
    return v.sum() / (mask.sum() + _EPS) if dim is None else v.sum(dim) / (mask.sum(dim) + _EPS)


def correction_weights(log_ratio: torch.Tensor, mask: torch.Tensor, level: str = "token", threshold: Threshold = 2.0,
                       batch_normalize: bool = False) -> Tuple[torch.Tensor, Dict[str, float]]:
    """Importance weights ``[B, T]`` (detached, 0 on masked tokens) and their metrics (module docstring).

    ``log_ratio``: trainer minus rollout per-token log-probs ``[B, T]``; ``mask``: the trained tokens ``[B, T]``;
    ``threshold``: C (truncation) or ``(low, high)`` (masking). Metrics (before batch normalisation, as verl):
    ``weight_mean`` (over trained tokens), ``weight_max``/``weight_min`` (token level: of the applied weights;
    sequence level: of the raw sequence ratios), ``ess`` = 1 / mean(ŵ²) with ŵ = w / mean(w) over trained tokens
    (1 = every token counts fully), ``ratio_frac_high``/``ratio_frac_low`` (share of ratios above the upper bound,
    below the lower one, 1/C under truncation; sequences at sequence level), ``clipped_frac`` (truncation: the share
    truncated) or ``masked_frac`` (masking: the share of trained tokens zeroed), and ``batch_norm_factor``.
    """
    if level not in LEVELS:
        raise ValueError(f"rollout correction level must be one of {', '.join(LEVELS)}, got {level!r}")
    if log_ratio.dim() != 2 or log_ratio.shape != mask.shape:
        raise ValueError(f"log_ratio and mask must share one [B, T] shape, got {tuple(log_ratio.shape)} and {tuple(mask.shape)}")
    low, high = parse_threshold(threshold)
    lr = log_ratio.detach().float()
    m = mask.to(lr.dtype)
    if level == "token":
        stat_log = lr
        raw = torch.exp(lr.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    else:
        stat_log = torch.where(mask.bool(), lr, torch.zeros_like(lr)).sum(-1, keepdim=True)  # log Π_t ρ_t
        raw = torch.exp(stat_log.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(lr)
    raw = raw * m
    if low is None:
        w = raw.clamp(max=high)
    else:
        w = torch.where((raw >= low) & (raw <= high), raw, torch.zeros_like(raw))
    metrics = _weight_metrics(w, raw, stat_log, m, level, low, high) if bool(mask.any()) else {}
    if batch_normalize:
        factor = _norm_mean(w, m, level)
        if factor > _EPS:
            w = w / factor
        metrics["batch_norm_factor"] = factor if factor > _EPS else 1.0
    return w.detach(), metrics


def _norm_mean(w: torch.Tensor, m: torch.Tensor, level: str) -> float:
    """The mean batch normalisation divides by: over trained tokens (token), over sequences with one (sequence)."""
    if level == "token":
        return float(_masked_mean(w, m))
    seq_w = _masked_mean(w, m, dim=-1)
    has = (m.sum(-1) > 0).to(w.dtype)
    return float((seq_w * has).sum() / has.sum().clamp_min(_EPS))


def _weight_metrics(w, raw, stat_log, m, level: str, low: Optional[float], high: float) -> Dict[str, float]:
    lo = 1.0 / high if low is None else low
    out: Dict[str, float] = {"weight_mean": float(_masked_mean(w, m))}
    if level == "sequence":
        out["weight_max"] = float(torch.exp(stat_log.max().clamp(max=SAFETY_BOUND)))
        out["weight_min"] = float(torch.exp(stat_log.min()))
        out["ratio_frac_high"] = float((stat_log > torch.log(torch.tensor(high))).float().mean())
        out["ratio_frac_low"] = float((stat_log < torch.log(torch.tensor(lo))).float().mean()) if lo > 0 else 0.0
    else:
        keep = m.bool()
        out["weight_max"] = float(w.masked_fill(~keep, float("-inf")).max())
        out["weight_min"] = float(w.masked_fill(~keep, float("inf")).min())
        out["ratio_frac_high"] = float(_masked_mean((raw > high).to(w.dtype), m))
        out["ratio_frac_low"] = float(_masked_mean((raw < lo).to(w.dtype), m))
    out["ess"] = ess(w.clamp(0.0, high), m)
    if low is None:
        out["clipped_frac"] = float(_masked_mean((raw > high).to(w.dtype), m))
    else:
        out["masked_frac"] = float(_masked_mean(((raw < low) | (raw > high)).to(w.dtype), m))
    return out


def ess(weights: torch.Tensor, mask: torch.Tensor) -> float:
    """Normalised effective sample size of ``weights`` on the masked entries: ``1 / mean(ŵ²)``, ŵ = w / mean(w),
    in (0, 1] (= (Σw)² / (n Σw²), Kish's ESS over n; verl's ``rollout_is_eff_sample_size``)."""
    mean = _masked_mean(weights, mask)
    return float(1.0 / _masked_mean((weights / (mean + _EPS)).square(), mask))


MISMATCH_QUANTILES = (0.01, 0.05, 0.5, 0.95, 0.99)


def mismatch_metrics(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor) -> Dict[str, float]:
    """How far the sampler is from the trainer on the trained tokens (``[B, T]`` each), whatever the correction.

    ``Δ = log π_train − log π_rollout``, ``ρ = exp(Δ)``: ``k3_kl`` = mean(ρ − Δ − 1) (≥ 0, the k3 estimator of
    KL(π_rollout ‖ π_train) under the sampler's tokens, verl's ``rollout_corr/k3_kl``); ``mean_abs_diff`` and
    ``max_abs_diff`` of |Δ| (TRL's ``sampling_logp_difference``); ``ratio_pXX`` the token ratio's quantiles;
    ``ess`` of the raw token ratios; ``seq_ratio_min``/``seq_ratio_max`` of ``exp(Σ_t Δ_t)`` per response; ``tokens``.
    Empty (no trained token): ``{"tokens": 0}``.
    """
    keep = mask.bool()
    if not bool(keep.any()):
        return {"tokens": 0.0}
    d_all = (trainer_logp.detach().double() - sampler_logp.detach().double())
    d = d_all[keep]
    rho = torch.exp(d.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    out = {"k3_kl": float((rho - d.clamp(-SAFETY_BOUND, SAFETY_BOUND) - 1).mean()),
           "mean_abs_diff": float(d.abs().mean()), "max_abs_diff": float(d.abs().max()),
           "ess": ess(rho, torch.ones_like(rho)), "tokens": float(d.numel())}
    qs = torch.quantile(rho, torch.tensor(MISMATCH_QUANTILES, dtype=rho.dtype))
    out.update({f"ratio_p{round(q * 100):02d}": float(v) for q, v in zip(MISMATCH_QUANTILES, qs)})
    seq = torch.where(keep, d_all, torch.zeros_like(d_all)).sum(-1)[keep.any(-1)]
    out["seq_ratio_min"] = float(torch.exp(seq.min().clamp(-SAFETY_BOUND, SAFETY_BOUND)))
    out["seq_ratio_max"] = float(torch.exp(seq.max().clamp(-SAFETY_BOUND, SAFETY_BOUND)))
    return out
