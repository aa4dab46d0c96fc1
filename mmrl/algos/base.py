"""Contracts of the algorithm layer: advantage estimators and policy losses are pure tensor functions.

Advantage estimator (a pure function; an algorithm spec in ``mmrl.algos.spec`` calls it)::

    fn(inp: AdvantageInputs, params) -> AdvantageOutput   # params: the method's typed Params (mmrl.algos.spec)

Policy loss (registered in ``POLICY_LOSSES``)::

    fn(logp, old_logp, advantages, mask, cfg: LossParams, is_weights=None) -> (loss: scalar tensor, metrics: dict[str, float])

where ``logp``/``old_logp``/``mask`` are ``[N, T]`` (response tokens, padded, mask 1 on trained tokens) and
``advantages`` is ``[N]`` (broadcast over tokens) or ``[N, T]``. ``is_weights`` (``[N, T]``, detached, or None) are
the rollout-correction weights (``algorithm.rollout_correction``), which multiply the per-token loss before it is
aggregated; a loss without that parameter runs only with ``algorithm.rollout_correction.mode: none``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch

from mmrl.loss_params import LossParams  # noqa: F401  (torch-free, shared with the config; re-exported here)
from mmrl.registry import Registry

POLICY_LOSSES = Registry("policy loss", builtins={"mmrl.algos.losses": ("ppo", "gspo", "gspo_token")})


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
