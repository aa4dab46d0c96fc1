"""The algorithm layer: algorithm specs (``ALGORITHMS``), their pure advantage estimators and the policy losses.

Importing this package registers every built-in spec in ``ALGORITHMS`` and every loss in ``POLICY_LOSSES``.
"""
from mmrl.algos.base import POLICY_LOSSES, AdvantageInputs, AdvantageOutput, LossParams
from mmrl.algos.spec import (ALGORITHMS, AlgorithmSpec, Intervention, Needs, Selection, StepBatch, WrapperSpec,
                             build_algorithm, build_spec, register_algorithm)
from mmrl.algos.grpo import GRPOParams, drgrpo_advantages, group_normalize, grpo, grpo_advantages
from mmrl.algos.gdpo import GDPOParams, gdpo, gdpo_advantages
from mmrl.algos.stream_gdpo import StreamGDPO, StreamGDPOParams, stream_gdpo_advantages
from mmrl.algos.dapo import DAPOParams, DynamicSamplingPlan, dynamic_sampling_keep, dynamic_sampling_plan, overlong_penalty
from mmrl.algos.tgrpo import TGRPOParams, tgrpo, tgrpo_advantages, tgrpo_length_bonus, tgrpo_temporal_bonus
from mmrl.algos.bpo import (
    BPOParams,
    anchor_baseline,
    bpo,
    bpo_advantages,
    contract_reward,
    contract_rewards,
    pack_scores,
    paired_advantages,
)
from mmrl.algos.vppo import VPPO, VPPOParams
from mmrl.algos.pacg import PACG, PACGParams
from mmrl.algos import dspo  # noqa: F401  (registers "dspo")
from mmrl.algos.fastrl import ARSState, FastRL, FastRLParams, dp_pad, mdap_keep
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
    "ALGORITHMS", "AlgorithmSpec", "WrapperSpec", "Intervention", "Needs", "Selection", "StepBatch",
    "build_algorithm", "build_spec", "register_algorithm",
    "POLICY_LOSSES", "AdvantageInputs", "AdvantageOutput", "LossParams",
    "GRPOParams", "grpo", "grpo_advantages", "drgrpo_advantages", "group_normalize",
    "GDPOParams", "gdpo", "gdpo_advantages", "StreamGDPO", "StreamGDPOParams", "stream_gdpo_advantages",
    "DAPOParams", "overlong_penalty", "dynamic_sampling_keep", "dynamic_sampling_plan", "DynamicSamplingPlan",
    "TGRPOParams", "tgrpo", "tgrpo_advantages", "tgrpo_temporal_bonus", "tgrpo_length_bonus",
    "BPOParams", "bpo", "contract_reward", "contract_rewards", "anchor_baseline", "bpo_advantages", "paired_advantages",
    "pack_scores", "VPPO", "VPPOParams", "PACG", "PACGParams", "ARSState", "FastRL", "FastRLParams", "dp_pad", "mdap_keep",
    "AGG_MODES", "aggregate", "k3_kl", "kl_term", "ppo_clip", "gspo_loss", "gspo_token_loss",
]
