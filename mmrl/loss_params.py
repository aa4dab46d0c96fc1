"""The constants of the policy loss and KL shared by every algorithm: ``algorithm.*`` in the run config
(``mmrl.config.AlgorithmConfig``) and the loss functions' input (``mmrl.algos.losses``). Torch-free, so that the
config loads without torch (``mmrl train``'s pre-flight)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


# algorithm.rollout_correction.mode -> (level, kind) (TRL's names; mmrl.algos.rollout_correction)
ROLLOUT_CORRECTION_MODES = {"none": None, "token_truncate": ("token", "truncate"), "token_mask": ("token", "mask"),
                            "sequence_truncate": ("sequence", "truncate"), "sequence_mask": ("sequence", "mask")}


@dataclass
class RolloutCorrection:
    """``algorithm.rollout_correction``: importance weights w(π_train / π_rollout) on the policy loss, for the gap
    between the sampler and the trainer (docs/rollout_correction.md). Default: verl's recommended token-level
    truncation at 2 (TRL defaults to sequence_mask at 3, verl to off; the docs say why)."""

    mode: str = "token_truncate"  # none | token_truncate | token_mask | sequence_truncate | sequence_mask
    threshold: float = 2.0  # truncate: C in w = min(rho, C); mask: the kept band's upper end
    threshold_low: float = 0.0  # mask modes: the kept band's lower end (0: above the cap only, TRL; IcePop 0.5)
    batch_normalize: bool = False  # divide the weights by their batch mean (one extra scoring pass per step)


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
    rollout_correction: RolloutCorrection = field(default_factory=RolloutCorrection)
