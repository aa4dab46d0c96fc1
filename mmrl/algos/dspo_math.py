"""DSPO's pure functions (specs/algorithms.md §3; arXiv 2609.36775): DEDR (Eqs. 13-16) and CVIG (Eqs. 8-11).

DEDR, for candidate VAD points z_1..z_K and the prior (mu*, Sigma* = diag(s)):

    D(S)   = Mahalanobis(mean_{k in S} z_k; mu*, Sigma*) = sqrt(sum_d (m_d - mu_d)^2 / s_d)
    D_all  = D({1..K}),   D_\\k = D({1..K} \\ {k}),   Delta_k = D_\\k - D_all
    R_div  = exp(-D_all^2 / (2 tau_ctr^2)) * sum_k w_k [1 - exp(-Delta_k / tau_div)]

Proposed guard (the spec's): Delta_k is clamped at >= -tau_div (``clamp=True``). With K = 1 the leave-one-out set
is empty: R_div = 0 (proposed).

CVIG, for candidate probabilities p_k = P(e_k | V, Q, t) and p^CF_k under the masked view:

    Delta P_k = (p_k - p^CF_k) (1 - S_region / S_image),  R_cf = (1/K) sum_k Delta P_k,  w_k = softmax_k(Delta P_k / tau)

p_k is, proposed, the product of the token probabilities of e_k at its position in the rollout (``span_prob``).
Box to tokens (Qwen2.5-VL): a ``grid_thw`` of (t, h, w) patches becomes (t, h/m, w/m) tokens after the m x m
merge (m = 2); a normalised box covers token rows floor(ymin*H)..ceil(ymax*H)-1 and columns
floor(xmin*W)..ceil(xmax*W)-1, so a full box masks the whole map.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import torch

from mmrl.models.feature_mask import box_token_mask  # noqa: F401  (re-exported: the box -> token rule)


def mahalanobis(x: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """sqrt(sum_d (x_d - mu_d)^2 / sigma_d) for a diagonal covariance ``sigma`` [D]; ``x`` is [..., D]."""
    return (((x - mu) ** 2) / sigma).sum(-1).sqrt()


def dedr_terms(z: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(D_all, Delta [K])`` for candidates ``z`` [K, 3] (K >= 2), vectorised over k."""
    z = z.to(torch.float64)
    k = z.shape[0]
    if k < 2:
        raise ValueError(f"leave-one-out needs at least 2 candidates, got {k}")
    d_all = mahalanobis(z.mean(0), mu.to(z), sigma.to(z))
    loo = (z.sum(0, keepdim=True) - z) / (k - 1)  # [K, 3] centroid without candidate k
    return d_all, mahalanobis(loo, mu.to(z), sigma.to(z)) - d_all


def r_div(z: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor, w: Optional[torch.Tensor] = None,
          tau_ctr: float = 1.0, tau_div: float = 1.0, clamp: bool = True) -> float:
    """R_div (Eq. 16) with weights ``w`` [K] (uniform 1/K when None); see the module docstring."""
    if z.shape[0] < 2:
        return 0.0
    d_all, delta = dedr_terms(z, mu, sigma)
    if clamp:
        delta = delta.clamp(min=-tau_div)
    w = torch.full_like(delta, 1.0 / delta.numel()) if w is None else w.to(delta)
    gate = torch.exp(-d_all ** 2 / (2 * tau_ctr ** 2))
    return float(gate * (w * (1 - torch.exp(-delta / tau_div))).sum())


def delta_p(p: torch.Tensor, p_cf: torch.Tensor, area_ratio: float) -> torch.Tensor:
    """Delta P_k = (p_k - p^CF_k)(1 - S_region / S_image)  (Eq. 9)."""
    if not 0.0 <= area_ratio <= 1.0:
        raise ValueError(f"area ratio must be in [0, 1], got {area_ratio}")
    return (p.to(torch.float64) - p_cf.to(torch.float64)) * (1.0 - area_ratio)


def r_cf(dp: torch.Tensor) -> float:
    """R_cf = mean_k Delta P_k  (Eq. 10)."""
    return float(dp.mean())


def cvig_weights(dp: torch.Tensor, tau: float = 0.1) -> torch.Tensor:
    """w_k = softmax_k(Delta P_k / tau)  (Eq. 11)."""
    return torch.softmax(dp.to(torch.float64) / tau, dim=0)


def span_prob(logprobs: torch.Tensor, span: Tuple[int, int]) -> float:
    """Proposed p_k: exp(sum of the token log-probs over the candidate's token span [lo, hi))."""
    lo, hi = span
    return math.exp(float(logprobs[lo:hi].double().sum()))


def char_to_token_span(offsets: Sequence[Tuple[int, int]], span: Tuple[int, int]) -> Tuple[int, int]:
    """Token range [lo, hi) of the tokens whose character ``offsets`` overlap the character ``span``."""
    a, b = span
    idx = [i for i, (s, e) in enumerate(offsets) if s < b and e > a]
    if not idx:
        raise ValueError(f"no token covers characters {span}")
    return idx[0], idx[-1] + 1


def box_area_ratio(box: Sequence[float]) -> float:
    """S_region / S_image of a normalised (ymin, xmin, ymax, xmax) box."""
    y0, x0, y1, x1 = box
    return max(0.0, y1 - y0) * max(0.0, x1 - x0)


def box_pixel_mask(box: Sequence[float], height: int, width: int) -> torch.Tensor:
    """Bool mask ``[H, W]`` of the pixels of a normalised box (Eq. 6: coordinates times H and W, floor/ceil)."""
    y0, x0, y1, x1 = (min(1.0, max(0.0, float(v))) for v in box)
    m = torch.zeros(height, width, dtype=torch.bool)
    m[math.floor(y0 * height):math.ceil(y1 * height), math.floor(x0 * width):math.ceil(x1 * width)] = True
    return m
