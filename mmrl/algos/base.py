"""Contracts of the algorithm layer: advantage estimators and policy losses are pure tensor functions.

Advantage estimator (registered in ``ADVANTAGES``)::

    fn(inp: AdvantageInputs, cfg: AlgoParams) -> AdvantageOutput

Policy loss (registered in ``POLICY_LOSSES``)::

    fn(logp, old_logp, advantages, mask, cfg: AlgoParams) -> (loss: scalar tensor, metrics: dict[str, float])

where ``logp``/``old_logp``/``mask`` are ``[N, T]`` (response tokens, padded, mask 1 on trained tokens) and
``advantages`` is ``[N]`` (broadcast over tokens) or ``[N, T]``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch

from mmrl.registry import Registry

ADVANTAGES = Registry("advantage estimator")
POLICY_LOSSES = Registry("policy loss")


@dataclass
class AlgoParams:
    """Every constant an estimator or loss reads; defaults follow specs/algorithms.md (GRPO/TRL where unstated)."""

    # advantage
    std_scale: str = "group"  # group | batch | none
    unbiased_std: bool = True
    eps: float = 1e-6
    component_weights: Dict[str, float] = field(default_factory=dict)  # GDPO / Stream-GDPO weights by component
    gdpo_eps: float = 1e-4
    gdpo_batch_norm: bool = True
    # BPO
    anchor_mode: str = "batch_std"  # batch_std | paired
    bpo_eps: float = 1e-6
    # T-GRPO
    tgrpo_mu: float = 0.8
    tgrpo_bonus: float = 0.3
    tgrpo_acc_threshold: float = 0.1
    tgrpo_eps: float = 1e-4  # Video-R1 code
    # loss
    clip_low: float = 0.2
    clip_high: float = 0.2
    gspo_clip_low: float = 3e-4
    gspo_clip_high: float = 4e-4
    gspo_loss_agg: str = "seq-mean-token-mean"  # GSPO is seq-mean (spec §7), whatever loss_agg says
    loss_agg: str = "token-mean"  # token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm
    max_response_len: Optional[int] = None  # normaliser for seq-mean-token-sum-norm / Dr.GRPO
    kl_coef: float = 0.0


@dataclass
class AdvantageInputs:
    """What an estimator sees about N trajectories of one batch."""

    rewards: torch.Tensor  # [N] total reward (weighted sum of components)
    group_ids: torch.Tensor  # [N] long: prompt group of each trajectory
    components: Dict[str, torch.Tensor] = field(default_factory=dict)  # name -> [N]
    roles: List[str] = field(default_factory=list)  # view role of each trajectory ('anchor' for plain GRPO)
    accuracy: Optional[torch.Tensor] = None  # [N] accuracy component, where an algorithm needs it apart
    lengths: Optional[torch.Tensor] = None  # [N] response lengths in tokens
    pack_ids: Optional[torch.Tensor] = None  # [N] long: BPO pack within the group (views of one pack share it)
    view_weights: Optional[torch.Tensor] = None  # [N] the view set's per-view ``weight`` (BPO scales A by it)


@dataclass
class AdvantageOutput:
    advantages: torch.Tensor  # [N]
    train_mask: Optional[torch.Tensor] = None  # [N] bool; None = train on all (T-GRPO drops the shuffled group)
    rewards: Optional[torch.Tensor] = None  # [N] rewards after shaping (e.g. the T-GRPO bonus), for logging
    metrics: Dict[str, Any] = field(default_factory=dict)
