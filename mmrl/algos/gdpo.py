"""GDPO: Group reward-Decoupled Normalization Policy Optimization (NVIDIA, arXiv 2601.05242).

Follows the TRL version of the official code ``NVlabs/GDPO`` (specs/algorithms.md §5)::

    Â^k_i = (r^k_i - mean_g(r^k)) / (std_g(r^k) + 1e-4)        per reward component k, unbiased std
    pre_i = Σ_k w_k Â^k_i                                      w_k = 1 unless configured
    A_i   = (pre_i - mean_B(pre)) / (std_B(pre) + 1e-4)        over the whole batch, unbiased std

The batch renormalisation can be switched off (``batch_norm=False``), which is the Stream-GDPO advantage of
WTI (§5, the paper shows no batch step). The verl version of GDPO whitens at token level (token-weighted,
eps 1e-8); that variant is not implemented here. A component with zero spread in a group contributes 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional

import torch

from mmrl.algos.base import AdvantageInputs, AdvantageOutput
from mmrl.algos.grpo import SequenceSpec, group_normalize, out_dtype, reward_metrics
from mmrl.algos.spec import register_algorithm


def gdpo_advantages(
    components: Mapping[str, torch.Tensor],
    group_ids: torch.Tensor,
    weights: Optional[Mapping[str, float]] = None,
    eps: float = 1e-4,
    unbiased: bool = True,
    batch_norm: bool = True,
    batch_eps: Optional[float] = None,
) -> torch.Tensor:
    """GDPO advantage ``[N]`` from reward components ``{name: [N]}`` grouped by ``group_ids [N]``.

    ``weights`` maps component names to w_k (missing names weigh 1; a name that is not a component is an
    error, to catch typos). ``batch_eps`` defaults to ``eps``.
    """
    if not components:
        raise ValueError("gdpo needs at least one reward component")
    weights = dict(weights or {})
    unknown = sorted(set(weights) - set(components))
    if unknown:
        raise ValueError(f"gdpo: weights name unknown components {unknown}; components: {sorted(components)}")
    first = next(iter(components.values()))
    pre = torch.zeros(first.shape[0], dtype=torch.float64, device=first.device)
    for name, r in components.items():
        w = float(weights.get(name, 1.0))
        if w == 0.0:
            continue
        pre = pre + w * group_normalize(r, group_ids, "group", unbiased, eps)
    if batch_norm:
        pre = group_normalize(pre, torch.zeros_like(group_ids), "group", unbiased, eps if batch_eps is None else batch_eps)
    return pre.to(out_dtype(first))


def gdpo_components(inp: AdvantageInputs) -> Dict[str, torch.Tensor]:
    """The components GDPO normalises: ``inp.components``, or the total reward when there are none."""
    return dict(inp.components) if inp.components else {"reward": inp.rewards}


@dataclass
class GDPOParams:
    component_weights: Dict[str, float] = field(default_factory=dict)  # weight per reward component (default 1)
    eps: float = 1e-4
    unbiased_std: bool = True
    batch_norm: bool = True  # renormalise the weighted sum over the batch (the GDPO code)


def gdpo(inp: AdvantageInputs, params: GDPOParams) -> AdvantageOutput:
    """GDPO: ``params.component_weights``, ``eps``, ``unbiased_std``, ``batch_norm``."""
    comps = gdpo_components(inp)
    adv = gdpo_advantages(comps, inp.group_ids, params.component_weights, params.eps, params.unbiased_std, params.batch_norm)
    metrics = reward_metrics(inp.rewards, inp.group_ids, adv)
    for name, r in comps.items():
        metrics[f"component/{name}_mean"] = float(r.double().mean()) if r.numel() else 0.0
    return AdvantageOutput(advantages=adv, rewards=inp.rewards, metrics=metrics)


@register_algorithm("gdpo")
class GDPO(SequenceSpec):
    """GDPO: per-component group normalisation, weighted sum, batch renormalisation (spec §5)."""

    Params = GDPOParams

    def estimate(self, inp):
        return gdpo(inp, self.params)
