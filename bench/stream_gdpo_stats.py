"""The statistics of the Stream-GDPO offline diagnostic (``bench/stream_gdpo_diag.py``; issue 29 item 3): can the
decoupled advantage differ from GRPO's on the summed reward, on the SFT start's own rollouts?

Per prompt group g and reward component c (``stream_out``, ``_fmt``, ``_tool``, ``_mem``):

- zero-spread share: the share of groups where c is constant (``_preflight.zero_spread_share``). Such a component
  contributes exactly 0 to Stream-GDPO's advantage in that group (``mmrl.algos.gdpo.gdpo_advantages``);
- within-group spread: the unbiased std of c in the group (the σ_c(G) that Stream-GDPO divides by), mean over groups;
- the advantages themselves, from the project's functions: Stream-GDPO's
  ``A_i = Σ_c w_c (R_c^i − μ_c(G)) / (σ_c(G) + ε)`` (``mmrl.algos.stream_gdpo.stream_gdpo_advantages``) and GRPO's
  on the weighted sum ``R^i = Σ_c w_c R_c^i`` (``mmrl.algos.grpo.grpo_advantages``, std over the group);
- their Spearman rank correlation (Pearson's r of the average ranks, ties shared; Spearman 1904), pooled over every
  response and per group (the mean over groups where both advantages vary), and the share of groups where only one
  of the two is non-zero.

When the sum has one varying component per group, both advantages are the same standardised vector and the
correlation is 1: decoupling changes the update only where two or more components vary in one group with
different spreads, or cancel in the sum. A correlation >= ``NO_EFFECT_CORR`` on both counts means the two RL arms
would follow the same ranking of responses, so no difference between them can be attributed to decoupling.
"""
from __future__ import annotations

import math
from typing import Dict, List, Mapping, Sequence, Tuple

import torch

from _preflight import zero_spread_share

NO_EFFECT_CORR = 0.98
EPS_ZERO = 1e-9  # an advantage below this in absolute value counts as zero


def ranks(x: Sequence[float]) -> List[float]:
    """Average ranks (1-based; tied values share the mean of their ranks)."""
    order = sorted(range(len(x)), key=lambda i: x[i])
    out = [0.0] * len(x)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's r of the average ranks; nan when either side is constant or n < 2."""
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} vs {len(y)} values")
    if len(x) < 2:
        return float("nan")
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx <= 0 or syy <= 0:
        return float("nan")
    return sxy / math.sqrt(sxx * syy)


def by_group(values: Sequence[float], group_ids: Sequence[int]) -> List[List[float]]:
    """``values`` split into groups, in order of first appearance of each group id."""
    idx: Dict[int, List[float]] = {}
    for v, g in zip(values, group_ids):
        idx.setdefault(int(g), []).append(float(v))
    return list(idx.values())


def component_spread(components: Mapping[str, Sequence[float]], group_ids: Sequence[int]) -> Dict[str, Dict[str, float]]:
    """Per component: ``zero_share`` (groups where it is constant) and ``std`` (mean over groups of its unbiased
    within-group std; 0 for one-member groups)."""
    out = {}
    for name, vals in components.items():
        groups = by_group(vals, group_ids)
        stds = []
        for g in groups:
            m = sum(g) / len(g)
            stds.append(math.sqrt(sum((v - m) ** 2 for v in g) / (len(g) - 1)) if len(g) > 1 else 0.0)
        out[name] = {"zero_share": zero_spread_share(groups), "std": sum(stds) / len(stds) if stds else float("nan")}
    return out


def advantages(components: Mapping[str, Sequence[float]], group_ids: Sequence[int], weights: Mapping[str, float],
               eps: float = 1e-4) -> Tuple[List[float], List[float]]:
    """``(Stream-GDPO, GRPO on the weighted sum)`` advantages per response, from the project's own functions.
    ``components`` are keyed by role (``out``, ``fmt``, ``tool``, ``mem``); a role missing from ``weights`` weighs 1."""
    from mmrl.algos.grpo import grpo_advantages
    from mmrl.algos.stream_gdpo import stream_gdpo_advantages

    gid = torch.as_tensor([int(g) for g in group_ids])
    comps = {k: torch.as_tensor([float(v) for v in vs], dtype=torch.float64) for k, vs in components.items()}
    w = {k: float(weights.get(k, 1.0)) for k in comps}
    a_gdpo = stream_gdpo_advantages(comps, gid, w, eps=eps, unbiased=True, batch_norm=False)
    total = sum(w[k] * comps[k] for k in comps)
    a_grpo = grpo_advantages(total, gid, std_scale="group", unbiased=True, eps=eps)
    return a_gdpo.tolist(), a_grpo.tolist()


def rank_agreement(a: Sequence[float], b: Sequence[float], group_ids: Sequence[int]) -> Dict[str, float]:
    """Spearman of ``a`` vs ``b`` pooled and per group (mean over groups where both vary; ``groups_ranked``: their
    count), and the shares of groups where only ``a`` (``only_a``) or only ``b`` (``only_b``) is non-zero and where
    the within-group ranking differs (``rank_differs``: rho < 1 among ranked groups)."""
    ga, gb = by_group(a, group_ids), by_group(b, group_ids)
    per, only_a, only_b = [], 0, 0
    for x, y in zip(ga, gb):
        nz_a, nz_b = any(abs(v) > EPS_ZERO for v in x), any(abs(v) > EPS_ZERO for v in y)
        only_a += nz_a and not nz_b
        only_b += nz_b and not nz_a
        r = spearman(x, y)
        if not math.isnan(r):
            per.append(r)
    n = len(ga)
    return {"rho_pooled": spearman(a, b), "rho_group_mean": sum(per) / len(per) if per else float("nan"),
            "groups_ranked": float(len(per)), "rank_differs": sum(1 for r in per if r < 1 - 1e-12) / n if n else float("nan"),
            "only_a": only_a / n if n else float("nan"), "only_b": only_b / n if n else float("nan")}


def no_effect(agree: Mapping[str, float], threshold: float = NO_EFFECT_CORR) -> Tuple[bool, str]:
    """``(True, why)`` when both rank correlations are >= ``threshold`` and no group gets a non-zero advantage from
    one estimator only: decoupling cannot change which responses the update favours."""
    p, g, only = agree["rho_pooled"], agree["rho_group_mean"], agree["only_a"] + agree["only_b"]
    if math.isnan(p) and only <= 0:
        return True, "every advantage is zero or constant: neither estimator can move the policy"
    if not math.isnan(p) and p >= threshold and (math.isnan(g) or g >= threshold) and only <= 0:
        return True, (f"the advantages rank the responses alike (Spearman pooled {p:.3f}, per group {g:.3f} >= "
                      f"{threshold}) and no group gets a non-zero advantage from one estimator only")
    return False, (f"Spearman pooled {p:.3f}, per group {g:.3f}; {100 * agree['only_a']:.1f}% of groups non-zero "
                   f"under Stream-GDPO only, {100 * agree['only_b']:.1f}% under GRPO only")
