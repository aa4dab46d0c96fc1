"""DAPO (Yu et al. 2025, ByteDance Seed; verl ``recipe/dapo``), specs/algorithms.md §7.

- Advantage: the GRPO advantage (registered here as ``dapo``).
- Overlong reward shaping (soft punishment), with L = ``max_len`` and C = ``cache_len``::

      R_len(|y|) = 0                       if |y| <= L - C
                 = ((L - C) - |y|) / C     if L - C < |y| <= L
                 = -1                      if |y| > L

- Dynamic sampling: keep only groups with mixed outcomes, 0 < #correct < G, and resample prompts until the
  batch holds enough groups. ``dynamic_sampling_plan`` is the pure decision the trainer calls after each
  generation round. (verl filters on std(metric) > 0; for 0/1 accuracy the two rules agree.)
- The loss side (token-mean, clip 0.2/0.28, no KL) lives in ``losses.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import torch

from mmrl.advice import advice
from mmrl.algos.base import AdvantageOutput
from mmrl.algos.grpo import GRPO, GRPOParams, _check_1d, group_index
from mmrl.algos.spec import Selection, StepBatch, register_algorithm


def overlong_penalty(lengths: torch.Tensor, max_len: int = 20480, cache_len: int = 4096) -> torch.Tensor:
    """DAPO soft overlong punishment ``R_len`` [N] (float32) for response lengths [N] in tokens.

    Spec vectors (L=20480, C=4096): 16384 -> 0, 18432 -> -0.5, 20481 -> -1.
    """
    if cache_len <= 0 or cache_len > max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    n = torch.as_tensor(lengths).to(torch.float64)
    start = float(max_len - cache_len)
    pen = torch.where(n <= start, torch.zeros_like(n), (start - n) / cache_len)
    pen = torch.where(n > max_len, torch.full_like(n, -1.0), pen)
    return pen.to(torch.float32)


def _correct_counts(acc: torch.Tensor, group_ids: torch.Tensor, correct_threshold: float):
    _check_1d("acc", acc)
    _check_1d("group_ids", group_ids, acc.shape[0])
    inv, g = group_index(group_ids)
    correct = (acc > correct_threshold).to(torch.float64)
    n_correct = torch.zeros(g, dtype=torch.float64, device=acc.device).index_add_(0, inv, correct)
    size = torch.zeros(g, dtype=torch.float64, device=acc.device).index_add_(0, inv, torch.ones_like(correct))
    return inv, g, n_correct, size


def dynamic_sampling_keep(acc: torch.Tensor, group_ids: torch.Tensor, correct_threshold: float = 0.5) -> torch.Tensor:
    """Bool mask ``[N]`` over trajectories: True where the trajectory's group has 0 < #correct < G.

    A response counts as correct when ``acc > correct_threshold``. Groups may have unequal sizes.
    """
    inv, _, n_correct, size = _correct_counts(acc, group_ids, correct_threshold)
    mixed = (n_correct > 0) & (n_correct < size)
    return mixed[inv]


@dataclass
class DynamicSamplingPlan:
    """What one generation round contributes to a dynamic-sampling batch.

    ``keep`` [N] selects the trajectories to add to the batch (mixed groups, in order of first appearance,
    trimmed so the batch never exceeds ``target_groups``). ``prompts_to_sample`` is how many new prompts to
    generate next, estimated from this round's keep rate (a full round of the same size when nothing was kept).
    """

    keep: torch.Tensor
    kept_group_ids: List[int] = field(default_factory=list)
    num_groups: int = 0
    num_mixed: int = 0
    num_kept: int = 0
    num_needed: int = 0
    keep_rate: float = 0.0
    prompts_to_sample: int = 0

    @property
    def done(self) -> bool:
        return self.num_needed == 0


def dynamic_sampling_plan(
    acc: torch.Tensor,
    group_ids: torch.Tensor,
    target_groups: int,
    already_kept: int = 0,
    correct_threshold: float = 0.5,
    max_prompts: Optional[int] = None,
) -> DynamicSamplingPlan:
    """Decide which groups of this round to keep and how many prompts are still needed.

    ``target_groups`` is the number of prompt groups a full training batch holds and ``already_kept`` the
    number kept in earlier rounds of this step. ``max_prompts`` caps ``prompts_to_sample``.
    """
    if target_groups <= 0 or already_kept < 0:
        raise ValueError(f"need target_groups > 0 and already_kept >= 0, got {target_groups}, {already_kept}")
    inv, g, n_correct, size = _correct_counts(acc, group_ids, correct_threshold)
    mixed = (n_correct > 0) & (n_correct < size)
    # dense index -> original id, in order of first appearance in the batch
    uniq = torch.unique(group_ids)
    first_pos = torch.full((g,), acc.shape[0], dtype=torch.long, device=acc.device)
    first_pos = first_pos.scatter_reduce(0, inv, torch.arange(acc.shape[0], device=acc.device), reduce="amin")
    order = [int(i) for i in torch.argsort(first_pos).tolist() if bool(mixed[i])]
    room = max(0, target_groups - already_kept)
    chosen = order[:room]
    chosen_mask = torch.zeros(g, dtype=torch.bool, device=acc.device)
    if chosen:
        chosen_mask[torch.tensor(chosen, device=acc.device)] = True
    num_mixed = len(order)
    needed = max(0, target_groups - already_kept - len(chosen))
    rate = num_mixed / g if g else 0.0
    if needed == 0:
        to_sample = 0
    elif num_mixed > 0:
        to_sample = -(-needed * g // num_mixed)  # ceil(needed / keep_rate), in integers
    else:
        to_sample = max(g, needed)
    if max_prompts is not None:
        to_sample = min(to_sample, max_prompts)
    return DynamicSamplingPlan(
        keep=chosen_mask[inv],
        kept_group_ids=[int(uniq[i]) for i in chosen],
        num_groups=g,
        num_mixed=num_mixed,
        num_kept=len(chosen),
        num_needed=needed,
        keep_rate=rate,
        prompts_to_sample=to_sample,
    )


@dataclass
class DAPOParams(GRPOParams):
    dynamic_sampling: bool = True  # keep only groups with 0 < #correct < G and refill by resampling
    max_resample_rounds: int = 3  # extra generation rounds per step at most
    correct_threshold: float = 0.5  # accuracy above which a response counts as correct


@register_algorithm("dapo")
class DAPO(GRPO):
    """DAPO: the GRPO advantage; ``select`` is dynamic sampling. The loss side (clip-higher, token-mean) and the
    overlong reward are set in the config (``algorithm.clip_high: 0.28``, ``loss_agg: token-mean``, reward ``length``)."""

    Params = DAPOParams

    def max_resample_rounds(self) -> int:
        return self.params.max_resample_rounds if self.params.dynamic_sampling else 0

    def select(self, batch: StepBatch, out: AdvantageOutput) -> Selection:
        base = super().select(batch, out)
        if not self.params.dynamic_sampling:
            return base
        if "accuracy" not in batch.components:
            raise ValueError("DAPO dynamic sampling needs the 'accuracy' reward (rewards: [{name: accuracy}, ...]), "
                             f"or set {advice('dapo_no_accuracy')}")
        target = batch.target_groups or int(batch.groups["prompt"].unique().numel())
        keep = dynamic_sampling_keep(batch.components["accuracy"], batch.groups["prompt"], self.params.correct_threshold)
        gids = batch.groups["prompt"]
        kept = sorted({int(g) for g, k in zip(gids.tolist(), keep.tolist()) if k})
        chosen = set(kept[:target])
        mask = torch.tensor([int(g) in chosen for g in gids.tolist()], dtype=torch.bool) & base.train_mask
        return Selection(train_mask=mask, resample=max(0, target - len(kept)),
                         metrics={"dapo/kept_groups": float(len(chosen)), "dapo/mixed_groups": float(len(kept))})
