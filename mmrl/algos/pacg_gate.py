"""PACG scores and gate: pure tensor functions (specs/algorithms.md §2, **proposed spec** from the abstract).

With ``logp_orig`` the log-probs of a response's tokens under the media it was generated with (the old
log-probs) and ``logp_int`` those of the *same tokens* under an intervened media (fixed rollout, no
resampling; default the VPPO patch blackening), per token::

    d_t   = clamp(logp_int − logp_orig, −20, 20)
    EFS_t = clamp(e^{d_t} − d_t − 1, 0, 10)          (VPPO's dependency measure; logged only)
    R_t   = min(1, e^{d_t})                          (the share of the token's likelihood that survives)

and per claim ``c`` (a token span, ``pacg_claims``): ``EFS_c = mean_{t∈c} EFS_t``,
``P_c = mean_{t∈c} R_t ∈ (0, 1]`` (persistence: P_c ≈ 1 means the claim is kept without the evidence, i.e.
driven by the prior). With PACG's ``persistence: content`` the mean runs over the claim's content-word tokens
``C(c) ⊂ c`` only (several disjoint segments, ``segments_of``): ``P_c = mean_{t∈C(c)} R_t``, so the template tokens
around the content word (R_t = 1 when they do not depend on the image) do not pull P_c to 1.

Gate (over all claims of the batch, or per prompt group with ``per_group``)::

    z_c = (P_c − μ) / σ        (μ, σ: mean and unbiased std of P over the claims; σ = 0 flags nothing)
    flagged_c = z_c > κ        (``mode="zscore"``; ``mode="quantile"``: P_c above the (1 − q) quantile,
                                with κ replaced by that quantile's z)
    g_c = max(γ, 1 − η·(z_c − κ))   on flagged claims, 1 elsewhere

Applied after the base method's shaping: tokens of a flagged claim whose advantage is positive are scaled by
``g_c``; every other token keeps its advantage (negative credit is never attenuated). Defaults κ = 1, γ = 0.5,
η = 0.5, q = 0.2. Spec vector: P = [0.2, 0.3, 0.25, 0.95], κ = 1 flags only the 4th claim (z ≈ 1.49) with
g = max(0.5, 1 − 0.5·0.49) = 0.755.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch

LOGP_CLAMP, EFS_MAX = 20.0, 10.0


def log_ratio(logp_int: torch.Tensor, logp_orig: torch.Tensor) -> torch.Tensor:
    """``d = clamp(logp_int − logp_orig, ±20)`` (VPPO ``dp_actor.py``)."""
    return (logp_int.float() - logp_orig.float()).clamp(-LOGP_CLAMP, LOGP_CLAMP)


def efs_tokens(d: torch.Tensor) -> torch.Tensor:
    """Evidence-function sensitivity per token: ``clamp(e^d − d − 1, 0, 10)`` (VPPO's low_var_kl)."""
    return (torch.exp(d) - d - 1).clamp(0.0, EFS_MAX)


def retention_tokens(d: torch.Tensor) -> torch.Tensor:
    """Per-token share of likelihood surviving the intervention: ``min(1, e^d)``."""
    return torch.exp(d).clamp(max=1.0)


def _segment_sums(values: Sequence[torch.Tensor], rows: torch.Tensor, starts: torch.Tensor,
                  ends: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``sum(values[rows[s]][starts[s]:ends[s]])`` and the length of each segment ``s`` (non-empty) -> ``[S]``, ``[S]``."""
    if bool((ends <= starts).any()):
        raise ValueError("every claim span needs at least one token")
    flat = torch.cat([v.float().reshape(-1) for v in values])
    base = torch.tensor([0] + [int(v.numel()) for v in values], dtype=torch.long).cumsum(0)[:-1]
    lens = ends - starts
    if bool((ends > torch.tensor([int(values[int(r)].numel()) for r in rows])).any()):
        raise ValueError("a claim span runs past its response")
    owner = torch.repeat_interleave(torch.arange(rows.numel()), lens)
    within = torch.arange(int(lens.sum())) - torch.repeat_interleave(lens.cumsum(0) - lens, lens)
    idx = base[rows][owner] + starts[owner] + within
    return torch.zeros(rows.numel()).index_add_(0, owner, flat[idx]), lens


def span_means(values: Sequence[torch.Tensor], rows: torch.Tensor, starts: torch.Tensor,
               ends: torch.Tensor, owner: Optional[torch.Tensor] = None, n: int = 0) -> torch.Tensor:
    """``mean(values[rows[c]][starts[c]:ends[c]])`` for each span ``c`` (spans must be non-empty) -> ``[C]``.

    With ``owner`` ``[S]`` the spans are segments of ``n`` claims (segment ``s`` belongs to claim ``owner[s]``):
    the mean of each claim over the tokens of all its segments (token-weighted; disjoint segments) -> ``[n]``."""
    if rows.numel() == 0:
        return torch.zeros(n if owner is not None else 0)
    sums, lens = _segment_sums(values, rows, starts, ends)
    if owner is None:
        return sums / lens.float()
    tot = torch.zeros(n).index_add_(0, owner, sums)
    cnt = torch.zeros(n).index_add_(0, owner, lens.float())
    if bool((cnt == 0).any()):
        raise ValueError("every claim needs at least one content segment")
    return tot / cnt


def segments_of(spans: Sequence[Sequence[Tuple[int, int]]]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flatten per-claim segment lists ``[[(s, e), ...], ...]`` into ``(owner, starts, ends)`` ``[S]`` tensors."""
    flat = [(c, int(s), int(e)) for c, segs in enumerate(spans) for s, e in segs]
    t = torch.tensor(flat, dtype=torch.long).reshape(-1, 3)
    return t[:, 0], t[:, 1], t[:, 2]


def claim_scores(logp_int: Sequence[torch.Tensor], logp_orig: Sequence[torch.Tensor], rows: torch.Tensor,
                 starts: torch.Tensor, ends: torch.Tensor, owner: Optional[torch.Tensor] = None,
                 n: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Persistence ``P_c`` and ``EFS_c`` ``[C]`` of claims given as token spans of responses (per-response
    log-prob lists of lengths R_i); with ``owner`` and ``n`` (``span_means``) the spans are segments of ``n``
    claims, e.g. their content words (``persistence: content``)."""
    if len(logp_int) != len(logp_orig):
        raise ValueError(f"{len(logp_int)} re-scored responses for {len(logp_orig)} responses")
    d = []
    for i, (a, b) in enumerate(zip(logp_int, logp_orig)):
        if a.shape != b.shape:
            raise ValueError(f"response {i}: re-scored log-probs {tuple(a.shape)} vs original {tuple(b.shape)}")
        d.append(log_ratio(a, b))
    return (span_means([retention_tokens(x) for x in d], rows, starts, ends, owner, n),
            span_means([efs_tokens(x) for x in d], rows, starts, ends, owner, n))


@dataclass
class GateOutput:
    z: torch.Tensor  # [C]
    flagged: torch.Tensor  # [C] bool
    gain: torch.Tensor  # [C]: g_c on flagged claims, 1 elsewhere
    threshold: torch.Tensor  # [C]: the z threshold each claim was compared with (κ, or the quantile's z)


def _group_stats(p: torch.Tensor, groups: torch.Tensor):
    _, inv, counts = torch.unique(groups, return_inverse=True, return_counts=True)
    g = counts.numel()
    s = torch.zeros(g, dtype=torch.float64).index_add_(0, inv, p)
    mean = s / counts
    ss = torch.zeros(g, dtype=torch.float64).index_add_(0, inv, (p - mean[inv]) ** 2)
    std = torch.where(counts > 1, (ss / (counts - 1).clamp(min=1)).sqrt(), torch.zeros_like(ss))
    return inv, mean, std


def persistence_gate(persistence: torch.Tensor, groups: Optional[torch.Tensor] = None, kappa: float = 1.0,
                     gamma: float = 0.5, eta: float = 0.5, mode: str = "zscore", q: float = 0.2,
                     eps: float = 1e-8) -> GateOutput:
    """Flag unusually persistent claims and their gains (see module docstring).

    ``groups`` [C]: statistics per group (e.g. the claim's prompt group); ``None`` = one batch-wide group.
    """
    if mode not in ("zscore", "quantile"):
        raise ValueError(f"PACG gate mode must be 'zscore' or 'quantile', got {mode!r}")
    if not 0.0 < q < 1.0:
        raise ValueError(f"PACG quantile q must be in (0, 1), got {q}")
    p = persistence.to(torch.float64).reshape(-1)
    c = p.numel()
    if groups is None:
        groups = torch.zeros(c, dtype=torch.long)
    if groups.numel() != c:
        raise ValueError(f"{groups.numel()} group ids for {c} claims")
    if c == 0:
        e = torch.zeros(0)
        return GateOutput(e, e.bool(), e, e)
    inv, mean, std = _group_stats(p, groups)
    ok = (std > eps)[inv]
    z = torch.where(ok, (p - mean[inv]) / std[inv].clamp(min=eps), torch.zeros_like(p))
    thr = torch.full_like(p, float(kappa))
    if mode == "quantile":
        # per group: the z of the (1 - q) quantile of P (linear interpolation, torch.quantile's default)
        for gi in range(int(mean.numel())):
            sel = inv == gi
            qv = torch.quantile(p[sel], 1.0 - q)
            thr[sel] = float((qv - mean[gi]) / std[gi].clamp(min=eps))
    flagged = ok & (z > thr)
    gain = torch.where(flagged, (1.0 - eta * (z - thr)).clamp(min=gamma), torch.ones_like(p))
    return GateOutput(z.float(), flagged, gain.float(), thr.float())


def gate_advantages(advantages: torch.Tensor, lengths: Sequence[int], rows: torch.Tensor, starts: torch.Tensor,
                    ends: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    """Per-token advantages ``[N, T]`` (T = max length) after the gate.

    ``advantages`` is ``[N]`` (broadcast) or ``[N, T']`` (T' ≥ max length; a base's per-token shaping). Tokens
    of claim ``c`` with a positive advantage are multiplied by ``gain[c]``; all others are unchanged. Tokens
    past a response's length are 0. Overlapping claims take the smallest gain.
    """
    n = len(lengths)
    t = max([int(x) for x in lengths], default=0)
    if advantages.dim() == 1:
        if advantages.numel() != n:
            raise ValueError(f"{advantages.numel()} advantages for {n} responses")
        adv = advantages.float().view(-1, 1).expand(n, t).clone()
    elif advantages.dim() == 2 and advantages.shape[0] == n and advantages.shape[1] >= t:
        adv = advantages.float()[:, :t].clone()
    else:
        raise ValueError(f"advantages must be [N] or [N, T>=max length]; got {tuple(advantages.shape)} for N={n}, T={t}")
    valid = torch.arange(t).view(1, -1) < torch.tensor([int(x) for x in lengths]).view(-1, 1)
    adv = torch.where(valid, adv, torch.zeros_like(adv))
    g = torch.ones_like(adv)
    for c in range(rows.numel()):  # claims are few per response; spans are contiguous slices
        r, a, b = int(rows[c]), int(starts[c]), int(ends[c])
        g[r, a:b] = torch.minimum(g[r, a:b], gain[c].float())
    return torch.where(adv > 0, adv * g, adv)
