"""GRPO and Dr.GRPO advantages, plus the group statistics the other estimators share.

GRPO (DeepSeekMath; TRL / verl / EasyR1 code), specs/algorithms.md §7::

    A_i = (r_i - mean_g(r)) / (std(r) + eps)

``std_scale`` picks the std: ``"group"`` (the prompt group, the GRPO default), ``"batch"`` (the std of all
rewards in the batch, TRL's ``scale_rewards="batch"``) or ``"none"`` (no division: Dr.GRPO, A_i = r_i - mean_g).
``unbiased=True`` is ddof=1 (torch.std, TRL, verl, EasyR1); ``False`` is the population std (ddof=0).

Guarantees (ours, not a paper's): groups are given by arbitrary integer ids in any order and may differ in
size; a group whose rewards are all equal (a single-member group included) gets exactly 0, never NaN.
Statistics are computed in float64 and cast back to the reward dtype.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

import torch

from mmrl.algos.base import AdvantageInputs, AdvantageOutput
from mmrl.algos.spec import AlgorithmSpec, NoParams, StepBatch, register_algorithm

STD_SCALES = ("group", "batch", "none")


def _check_1d(name: str, x: torch.Tensor, n: int | None = None) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor [N], got {type(x).__name__} {getattr(x, 'shape', '')}")
    if n is not None and x.shape[0] != n:
        raise ValueError(f"{name} has {x.shape[0]} entries, expected {n}")


def out_dtype(x: torch.Tensor) -> torch.dtype:
    return x.dtype if x.is_floating_point() else torch.float32


def group_index(group_ids: torch.Tensor) -> Tuple[torch.Tensor, int]:
    """Map arbitrary group ids ``[N]`` to dense indices ``0..G-1``; returns ``(inverse [N], G)``."""
    _check_1d("group_ids", group_ids)
    uniq, inv = torch.unique(group_ids, return_inverse=True)
    return inv, int(uniq.numel())


def group_stats(
    values: torch.Tensor, inv: torch.Tensor, num_groups: int, unbiased: bool = True
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group ``(mean [G], std [G], constant [G] bool)`` of float64 ``values`` [N].

    std is 0 where it is undefined (one member with ``unbiased=True``); ``constant`` marks groups whose values
    are all exactly equal.
    """
    v = values.to(torch.float64)
    count = torch.zeros(num_groups, dtype=torch.float64, device=v.device).index_add_(0, inv, torch.ones_like(v))
    mean = torch.zeros(num_groups, dtype=torch.float64, device=v.device).index_add_(0, inv, v) / count
    sq = torch.zeros(num_groups, dtype=torch.float64, device=v.device).index_add_(0, inv, (v - mean[inv]) ** 2)
    denom = count - (1.0 if unbiased else 0.0)
    std = torch.where(denom > 0, sq / denom.clamp(min=1.0), torch.zeros_like(sq)).sqrt()
    vmax = torch.full((num_groups,), -float("inf"), dtype=torch.float64, device=v.device)
    vmax = vmax.scatter_reduce(0, inv, v, reduce="amax")
    vmin = torch.full((num_groups,), float("inf"), dtype=torch.float64, device=v.device)
    vmin = vmin.scatter_reduce(0, inv, v, reduce="amin")
    return mean, std, vmax == vmin


def group_normalize(
    values: torch.Tensor,
    group_ids: torch.Tensor,
    std_scale: str = "group",
    unbiased: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """``(v - mean_g) / (std + eps)`` (or without the std for ``std_scale="none"``), as float64 [N].

    Members of a constant group get exactly 0.
    """
    if std_scale not in STD_SCALES:
        raise ValueError(f"std_scale must be one of {STD_SCALES}, got {std_scale!r}")
    _check_1d("values", values)
    _check_1d("group_ids", group_ids, values.shape[0])
    if values.numel() == 0:
        return values.to(torch.float64)
    inv, g = group_index(group_ids)
    v = values.to(torch.float64)
    mean, std, const = group_stats(v, inv, g, unbiased)
    const_t = const[inv]
    zero = torch.zeros_like(v)
    centered = torch.where(const_t, zero, v - mean[inv])
    if std_scale == "none":
        return centered
    if std_scale == "group":
        scale = std[inv]
    else:  # batch
        _, bstd, _ = group_stats(v, torch.zeros_like(inv), 1, unbiased)
        scale = bstd.expand_as(v)
    return torch.where(const_t, zero, centered / (scale + eps))  # no 0/0 even with eps=0


def grpo_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    std_scale: str = "group",
    unbiased: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO advantage ``A_i = (r_i - mean_g) / (std + eps)`` for rewards ``[N]`` grouped by ``group_ids [N]``.

    ``std_scale``: ``"group"`` | ``"batch"`` | ``"none"`` (see the module docstring). Returns ``[N]`` in the
    rewards' float dtype. Example (spec §7): r=[1,0,0,1] in one group gives ±0.866 (unbiased) or ±1.0
    (population std).
    """
    return group_normalize(rewards, group_ids, std_scale, unbiased, eps).to(out_dtype(rewards))


def drgrpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Dr.GRPO advantage ``A_i = r_i - mean_g`` (no std; Liu et al. 2025, TRL ``loss_type="dr_grpo"``)."""
    return grpo_advantages(rewards, group_ids, std_scale="none")


def reward_metrics(rewards: torch.Tensor, group_ids: torch.Tensor, adv: torch.Tensor) -> Dict[str, float]:
    """Batch reward/advantage summaries and the fraction of groups with zero reward spread."""
    if rewards.numel() == 0:
        return {}
    inv, g = group_index(group_ids)
    _, _, const = group_stats(rewards, inv, g)
    return {
        "reward_mean": float(rewards.double().mean()),
        "reward_std": float(rewards.double().std(unbiased=False)),
        "adv_abs_mean": float(adv.double().abs().mean()),
        "frac_groups_zero_std": float(const.double().mean()),
    }


def _grpo_like(inp: AdvantageInputs, std_scale: str, unbiased: bool, eps: float) -> AdvantageOutput:
    adv = grpo_advantages(inp.rewards, inp.group_ids, std_scale, unbiased, eps)
    return AdvantageOutput(advantages=adv, rewards=inp.rewards, metrics=reward_metrics(inp.rewards, inp.group_ids, adv))


@dataclass
class GRPOParams:
    std_scale: str = "group"  # group | batch | none
    unbiased_std: bool = True
    eps: float = 1e-6

    def __post_init__(self):
        if self.std_scale not in ("group", "batch", "none"):
            raise ValueError(f"std_scale must be group, batch or none, got {self.std_scale!r}")


def grpo(inp: AdvantageInputs, params: GRPOParams) -> AdvantageOutput:
    """GRPO: ``params.std_scale``, ``params.unbiased_std``, ``params.eps``."""
    return _grpo_like(inp, params.std_scale, params.unbiased_std, params.eps)


class SequenceSpec(AlgorithmSpec):
    """A spec whose advantage is a pure function of ``AdvantageInputs`` (``estimate``)."""

    def estimate(self, inp: AdvantageInputs) -> AdvantageOutput:
        raise NotImplementedError

    def advantages(self, batch: StepBatch) -> AdvantageOutput:
        return self.estimate(advantage_inputs(batch))


def advantage_inputs(batch: StepBatch) -> AdvantageInputs:
    """The pure estimators' view of a step batch: prompt groups, roles, packs, lengths, components."""
    return AdvantageInputs(rewards=batch.rewards, group_ids=batch.groups["prompt"], components=batch.components,
                           roles=list(batch.roles), accuracy=batch.components.get("accuracy"), lengths=batch.lengths,
                           pack_ids=batch.groups.get("pack"), view_weights=batch.view_weights)


@register_algorithm("grpo")
class GRPO(SequenceSpec):
    """GRPO (Shao et al. 2024): group-normalised sequence advantage, spec §7."""

    Params = GRPOParams

    def estimate(self, inp):
        return grpo(inp, self.params)


@register_algorithm("gspo")
class GSPO(GRPO):
    """GSPO uses the GRPO advantage (spec §7); its difference is the policy loss (``algorithm.loss: gspo``)."""


@register_algorithm("drgrpo")
class DrGRPO(SequenceSpec):
    """Dr.GRPO: ``r - mean_g`` (pair it with ``loss_agg: seq-mean-token-sum-norm`` and ``max_response_len``)."""

    Params = NoParams

    def estimate(self, inp):
        return _grpo_like(inp, "none", True, 0.0)
