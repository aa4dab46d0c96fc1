"""Video-R1's length bonus (``len_control``) as a reward term for T-GRPO (``mmrl.algos.tgrpo.tgrpo_length_bonus``).

Video-R1 (``grpo_trainer.py``): when at least ``min_correct`` (2) of a prompt's responses are correct (accuracy >
0.1), each correct one whose length is in [``min_len``, ``max_len``] = [320, 512] tokens gets +``bonus`` (0.2),
added to the reward before the advantage. Here the count and the bonus cover the ordered (``anchor``-role)
responses of each prompt group only, as Video-R1 computes it on its ordered group; shuffled responses get 0.
Configure as ``{name: tgrpo_length, weight: 1.0, params: {bonus: 0.2, min_len: 320, max_len: 512}}``.
"""
from __future__ import annotations

from typing import List

import torch

from mmrl.algos.tgrpo import tgrpo_length_bonus
from mmrl.rewards.base import REWARDS, RewardContext
from mmrl.rewards.parsing import parse_choice


@REWARDS.register("tgrpo_length")
def tgrpo_length(ctx: List[RewardContext], bonus: float = 0.2, min_len: int = 320, max_len: int = 512,
                 acc_threshold: float = 0.1, min_correct: int = 2) -> List[float]:
    """Video-R1's length bonus for T-GRPO (``mmrl.algos.tgrpo.tgrpo_length_bonus``) on the ordered (anchor) responses:
    ``bonus`` for a correct response (accuracy > ``acc_threshold``) of ``min_len``..``max_len`` tokens when its
    group has at least ``min_correct`` correct ones."""
    if not ctx:
        return []
    acc = torch.tensor([1.0 if c.expected is not None and parse_choice(c.trajectory.text, c.letters) == c.expected
                        else 0.0 for c in ctx], dtype=torch.float64)
    lengths = torch.tensor([int(c.trajectory.response_ids.numel()) for c in ctx])
    groups = torch.tensor([int(c.trajectory.group_id) for c in ctx])
    ordered = torch.tensor([c.role == "anchor" for c in ctx])
    return tgrpo_length_bonus(acc, lengths, groups, ordered, bonus, min_len, max_len, acc_threshold,
                              min_correct).tolist()
