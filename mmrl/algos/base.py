"""Contracts of the algorithm layer: advantage estimators and policy losses are pure tensor functions.

Advantage estimator (a pure function; an algorithm spec in ``mmrl.algos.spec`` calls it)::

    fn(inp: AdvantageInputs, params) -> AdvantageOutput   # params: the method's typed Params (mmrl.algos.spec)

Policy loss (registered in ``POLICY_LOSSES``)::

    fn(logp, old_logp, advantages, mask, cfg: LossParams) -> (loss: scalar tensor, metrics: dict[str, float])

where ``logp``/``old_logp``/``mask`` are ``[N, T]`` (response tokens, padded, mask 1 on trained tokens) and
``advantages`` is ``[N]`` (broadcast over tokens) or ``[N, T]``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch

from mmrl.registry import Registry

POLICY_LOSSES = Registry("policy loss", builtins={"mmrl.algos.losses": ("ppo", "gspo", "gspo_token")})


@dataclass
class LossParams:
    """Constants of the policy loss and KL, shared by every algorithm (``algorithm.*`` in the config).

    A method's own constants live in its spec's ``Params`` (``algorithm.params``; ``mmrl.algos.spec``).
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip_c: Optional[float] = None  # dual-clip PPO (Ye et al. 2020; verl clip_ratio_c): cap -A*c for A < 0; off = None
    gspo_clip_low: float = 3e-4
    gspo_clip_high: float = 4e-4
    gspo_log_ratio_clamp: float = 20.0  # |mean_t log rho| clamp of GSPO's sequence ratio before exp (verl: max 10)
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
    advantages: torch.Tensor  # [N] per sequence, or [N, T] per token (right-padded to the longest response)
    train_mask: Optional[torch.Tensor] = None  # [N] bool; None = train on all (T-GRPO drops the shuffled group)
    rewards: Optional[torch.Tensor] = None  # [N] rewards after shaping (e.g. the T-GRPO bonus), for logging
    metrics: Dict[str, Any] = field(default_factory=dict)
