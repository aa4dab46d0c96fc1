"""The algorithm layer: advantage estimators and policy losses as pure tensor functions.

Importing this package registers every built-in method in ``ADVANTAGES`` and ``POLICY_LOSSES``.
"""
from mmrl.algos.base import (
    ADVANTAGES,
    POLICY_LOSSES,
    AdvantageInputs,
    AdvantageOutput,
    AlgoParams,
)
from mmrl.algos.grpo import drgrpo_advantages, group_normalize, grpo_advantages
from mmrl.algos.gdpo import gdpo_advantages
from mmrl.algos.dapo import DynamicSamplingPlan, dynamic_sampling_keep, dynamic_sampling_plan, overlong_penalty
from mmrl.algos.tgrpo import tgrpo_advantages, tgrpo_length_bonus, tgrpo_temporal_bonus
from mmrl.algos.bpo import (
    anchor_baseline,
    bpo_advantages,
    contract_reward,
    contract_rewards,
    pack_scores,
    paired_advantages,
)
from mmrl.algos.losses import (
    AGG_MODES,
    aggregate,
    gspo_loss,
    gspo_token_loss,
    k3_kl,
    kl_term,
    ppo_clip,
)

__all__ = [
    "ADVANTAGES", "POLICY_LOSSES", "AdvantageInputs", "AdvantageOutput", "AlgoParams",
    "grpo_advantages", "drgrpo_advantages", "group_normalize", "gdpo_advantages",
    "overlong_penalty", "dynamic_sampling_keep", "dynamic_sampling_plan", "DynamicSamplingPlan",
    "tgrpo_advantages", "tgrpo_temporal_bonus", "tgrpo_length_bonus",
    "contract_reward", "contract_rewards", "anchor_baseline", "bpo_advantages", "paired_advantages", "pack_scores",
    "AGG_MODES", "aggregate", "k3_kl", "kl_term", "ppo_clip", "gspo_loss", "gspo_token_loss",
]
