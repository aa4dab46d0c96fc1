"""Policy losses, loss aggregation and the k3 KL (specs/algorithms.md, notation and §7).

Shapes: ``logp``, ``old_logp``, ``mask`` are ``[N, T]`` (response tokens, padded; mask 1 on trained tokens);
advantages are ``[N]`` (broadcast over tokens) or ``[N, T]``. Every loss returns ``(loss, metrics)`` where
``metrics`` holds floats: ``clip_frac`` (fraction of trained tokens whose clipped term is the active one,
verl's ``pg_clipfrac``; ``clip_frac_low``/``clip_frac_high`` split it by the side), ``ratio_mean`` (mean
ratio over trained tokens) and ``ppo_kl`` (mean of log πold − log πθ). Log-ratios are clamped to ±20 before
``exp`` (verl), which only matters for diverged policies. The KL term is separate: the trainer adds
``kl_coef · aggregate(k3_kl(logp, ref_logp), mask, mode)`` (``kl_term``).

- PPO with clip-higher (DAPO): ℓ = −min(ρA, clip(ρ, 1−ε_lo, 1+ε_hi)A), ρ = exp(logπθ − logπold).
  Dual-clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games"; verl ``compute_policy_loss_vanilla``
  ``clip_ratio_c``): for A < 0 the loss is further capped, ℓ = min(ℓ, −c·A), c > 1 (verl's default 3); off unless set.
- GSPO (Zheng et al. 2025): s_i = exp(mean_t logρ_{i,t}); ℓ_i = −min(s_i A_i, clip(s_i, 1−3e-4, 1+4e-4) A_i),
  seq-mean. GSPO-token: s_{i,t} = sg[s_i]·πθ(y_t)/sg[πθ(y_t)] (same value, token-level gradient; verl's form).
- Aggregations (verl ``agg_loss`` names): token-mean = Σ tokens / Σ|o_i| (DAPO); seq-mean-token-mean = mean
  over sequences of the token mean (GRPO); seq-mean-token-sum = mean over sequences of the token sum;
  seq-mean-token-sum-norm = Σ tokens / (N·L_max) (Dr.GRPO's constant normaliser, L_max = ``max_len``).
- Rollout correction (``mmrl.algos.rollout_correction``): ``is_weights [N, T]`` (detached) multiply the per-token
  loss before aggregation, ℓ_t ← w_t·ℓ_t (verl ``pg_losses * rollout_is_weights``); None = 1.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from mmrl.algos.base import POLICY_LOSSES, LossParams

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
LOG_RATIO_CLAMP = 20.0
LossOut = Tuple[torch.Tensor, Dict[str, float]]


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean", max_len: Optional[int] = None) -> torch.Tensor:
    """Reduce per-token ``values [N, T]`` over trained tokens (``mask [N, T]``) to a scalar.

    Sequences without trained tokens do not count in the seq-mean modes. ``seq-mean-token-sum-norm`` divides
    by ``N · max_len`` (all N rows); without ``max_len`` it falls back to T (verl's default), which then
    depends on padding, so pass ``max_len`` for Dr.GRPO. An all-masked batch gives 0 (with a graph).
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation {mode!r}; known: {', '.join(AGG_MODES)}")
    if values.shape != mask.shape or values.dim() != 2:
        raise ValueError(f"aggregate needs values and mask of the same shape [N, T], got {tuple(values.shape)} and {tuple(mask.shape)}")
    m = mask.to(torch.bool)
    v = torch.where(m, values, torch.zeros_like(values))
    if mode == "token-mean":
        return v.sum() / m.sum().clamp(min=1).to(values.dtype)
    seq_sum = v.sum(-1)
    if mode == "seq-mean-token-sum-norm":
        length = values.shape[-1] if max_len is None else int(max_len)
        return seq_sum.sum() / float(max(values.shape[0] * length, 1))
    tok = m.sum(-1)
    n_rows = (tok > 0).sum().clamp(min=1).to(values.dtype)
    if mode == "seq-mean-token-mean":
        return (seq_sum / tok.clamp(min=1).to(values.dtype)).sum() / n_rows
    return seq_sum.sum() / n_rows  # seq-mean-token-sum


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor, clamp: bool = False) -> torch.Tensor:
    """k3 estimator of KL(πθ‖πref) per token: ``e^x − x − 1`` with ``x = ref_logp − logp`` (≥ 0, 0 iff equal).

    ``clamp=True`` applies verl's ``low_var_kl`` guards (x to ±20, result to ±10).
    """
    x = ref_logp - logp
    if clamp:
        x = x.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    kl = torch.exp(x) - x - 1
    return kl.clamp(-10.0, 10.0) if clamp else kl


def kl_term(
    logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, coef: float, mode: str = "token-mean", max_len: Optional[int] = None
) -> LossOut:
    """``coef · aggregate(k3_kl(logp, ref_logp), mask, mode)`` and ``{"kl": mean k3 over trained tokens}``."""
    kl = k3_kl(logp, ref_logp)
    with torch.no_grad():
        m = mask.to(torch.bool)
        mean = float(kl[m].mean()) if bool(m.any()) else 0.0
    return coef * aggregate(kl, mask, mode, max_len), {"kl": mean}


def _broadcast_adv(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    a = advantages.detach().to(like.dtype)
    if a.dim() == 1 and a.shape[0] == like.shape[0]:
        return a[:, None].expand_as(like)
    if a.shape == like.shape:
        return a
    raise ValueError(f"advantages must be [N] or [N, T] for log-probs {tuple(like.shape)}, got {tuple(a.shape)}")


def _check(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> None:
    if logp.dim() != 2 or logp.shape != old_logp.shape or logp.shape != mask.shape:
        raise ValueError(f"logp, old_logp and mask must share one [N, T] shape, got {tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(mask.shape)}")


def _weighted(per_token: torch.Tensor, is_weights: Optional[torch.Tensor]) -> torch.Tensor:
    """``per_token · is_weights`` (the rollout-correction weights, detached), or ``per_token`` without them."""
    if is_weights is None:
        return per_token
    if is_weights.shape != per_token.shape:
        raise ValueError(f"is_weights must be [N, T] like the loss {tuple(per_token.shape)}, got {tuple(is_weights.shape)}")
    return per_token * is_weights.detach().to(per_token.dtype)


def _metrics(ratio: torch.Tensor, l1: torch.Tensor, l2: torch.Tensor, adv: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor) -> Dict[str, float]:
    with torch.no_grad():
        m = mask.to(torch.bool)
        if not bool(m.any()):
            return {"clip_frac": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0, "ratio_mean": 1.0, "ppo_kl": 0.0}
        binding = (l2 > l1) & m
        n = m.sum().double()
        return {
            "clip_frac": float(binding.sum() / n),
            "clip_frac_low": float((binding & (adv < 0)).sum() / n),
            "clip_frac_high": float((binding & (adv > 0)).sum() / n),
            "ratio_mean": float(ratio[m].double().mean()),
            "ppo_kl": float((-log_ratio[m]).double().mean()),
        }


def ppo_clip(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    agg: str = "token-mean",
    max_len: Optional[int] = None,
    dual_clip_c: Optional[float] = None,
    is_weights: Optional[torch.Tensor] = None,
) -> LossOut:
    """PPO clipped surrogate with clip-higher: ``agg(−min(ρA, clip(ρ, 1−clip_low, 1+clip_high)A))``; with
    ``dual_clip_c = c`` tokens with A < 0 take ``min(that, −c·A)`` (dual-clip, verl ``clip_ratio_c``).

    DAPO: clip_low=0.2, clip_high=0.28, token-mean. GRPO: 0.2/0.2, seq-mean-token-mean. Dr.GRPO:
    seq-mean-token-sum-norm with ``max_len``.
    """
    _check(logp, old_logp, mask)
    adv = _broadcast_adv(advantages, logp)
    log_ratio = (logp - old_logp.detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    l1 = -adv * ratio
    l2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(l1, l2)
    metrics_extra = {}
    if dual_clip_c is not None:
        if dual_clip_c <= 1.0:
            raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
        l3 = -adv * dual_clip_c
        capped = (adv < 0) & (l3 < per_token)
        per_token = torch.where(adv < 0, torch.minimum(per_token, l3), per_token)
        m = mask.to(torch.bool)
        metrics_extra["dual_clip_frac"] = float((capped & m).sum() / m.sum().clamp(min=1))
    loss = aggregate(_weighted(per_token, is_weights), mask, agg, max_len)
    return loss, {**_metrics(ratio, l1, l2, adv, log_ratio, mask), **metrics_extra}


def _seq_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor,
                   clamp: float = LOG_RATIO_CLAMP) -> Tuple[torch.Tensor, torch.Tensor]:
    """GSPO's log s_i = mean over trained tokens of log ρ_{i,t}, clamped to ±``clamp`` before ``exp``."""
    m = mask.to(torch.bool)
    lr = torch.where(m, logp - old_logp.detach(), torch.zeros_like(logp))
    tok = m.sum(-1).clamp(min=1).to(logp.dtype)
    return (lr.sum(-1) / tok).clamp(-clamp, clamp), lr


def gspo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    agg: str = "seq-mean-token-mean",
    max_len: Optional[int] = None,
    log_ratio_clamp: float = LOG_RATIO_CLAMP,
    is_weights: Optional[torch.Tensor] = None,
) -> LossOut:
    """GSPO with the sequence-level ratio s_i = exp(mean_t logρ_{i,t}); the gradient flows through s_i.

    ``[N, T]`` advantages are reduced to their mean over each sequence's trained tokens. The sequence loss is
    broadcast to the tokens and reduced with ``agg`` (default seq-mean, as in the paper).
    """
    _check(logp, old_logp, mask)
    log_s, lr = _seq_log_ratio(logp, old_logp, mask, log_ratio_clamp)
    s = torch.exp(log_s)
    if advantages.dim() == 2:
        a2 = _broadcast_adv(advantages, logp)
        m = mask.to(logp.dtype)
        adv = (a2 * m).sum(-1) / m.sum(-1).clamp(min=1)
    else:
        adv = _broadcast_adv(advantages, logp)[:, 0]
    l1 = -adv * s
    l2 = -adv * s.clamp(1.0 - clip_low, 1.0 + clip_high)
    seq_loss = torch.maximum(l1, l2)
    loss = aggregate(_weighted(seq_loss[:, None].expand_as(logp), is_weights), mask, agg, max_len)
    ex = lambda x: x[:, None].expand_as(logp)  # noqa: E731
    return loss, _metrics(ex(s), ex(l1), ex(l2), ex(adv), lr, mask)


def gspo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    agg: str = "seq-mean-token-mean",
    max_len: Optional[int] = None,
    log_ratio_clamp: float = LOG_RATIO_CLAMP,
    is_weights: Optional[torch.Tensor] = None,
) -> LossOut:
    """GSPO-token: s_{i,t} = sg[s_i]·exp(logπθ(y_t) − sg[logπθ(y_t)]), allowing token-level advantages.

    With a per-sequence advantage and seq-mean-token-mean its value and gradient equal ``gspo_loss``'s.
    """
    _check(logp, old_logp, mask)
    log_s, lr = _seq_log_ratio(logp, old_logp, mask, log_ratio_clamp)
    s_t = torch.exp(logp - logp.detach() + log_s.detach()[:, None])
    adv = _broadcast_adv(advantages, logp)
    l1 = -adv * s_t
    l2 = -adv * s_t.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = aggregate(_weighted(torch.maximum(l1, l2), is_weights), mask, agg, max_len)
    return loss, _metrics(s_t, l1, l2, adv, lr, mask)


@POLICY_LOSSES.register("ppo")
def ppo(logp, old_logp, advantages, mask, cfg: LossParams, is_weights=None) -> LossOut:
    """Registered PPO/clip-higher loss: ``cfg.clip_low``, ``cfg.clip_high``, ``cfg.loss_agg``, ``cfg.max_response_len``,
    ``cfg.dual_clip_c``; ``is_weights``: the rollout-correction weights."""
    return ppo_clip(logp, old_logp, advantages, mask, cfg.clip_low, cfg.clip_high, cfg.loss_agg, cfg.max_response_len,
                    cfg.dual_clip_c, is_weights)


@POLICY_LOSSES.register("gspo")
def gspo(logp, old_logp, advantages, mask, cfg: LossParams, is_weights=None) -> LossOut:
    """Registered GSPO: ``cfg.gspo_clip_low``, ``cfg.gspo_clip_high``, ``cfg.gspo_loss_agg``, ``cfg.gspo_log_ratio_clamp``;
    ``is_weights`` as ``ppo``."""
    return gspo_loss(logp, old_logp, advantages, mask, cfg.gspo_clip_low, cfg.gspo_clip_high, cfg.gspo_loss_agg, cfg.max_response_len,
                     cfg.gspo_log_ratio_clamp, is_weights)


@POLICY_LOSSES.register("gspo_token")
def gspo_token(logp, old_logp, advantages, mask, cfg: LossParams, is_weights=None) -> LossOut:
    """Registered GSPO-token: as ``gspo``."""
    return gspo_token_loss(logp, old_logp, advantages, mask, cfg.gspo_clip_low, cfg.gspo_clip_high, cfg.gspo_loss_agg, cfg.max_response_len,
                     cfg.gspo_log_ratio_clamp, is_weights)
