"""Built-in rewards: multiple-choice accuracy, format, length (DAPO overlong shaping)."""
from __future__ import annotations

from typing import List

from mmrl.rewards.base import REWARDS, RewardContext
from mmrl.rewards.parsing import is_well_formed, parse_choice


@REWARDS.register("accuracy")
def accuracy(ctx: List[RewardContext]) -> List[float]:
    """1 if the parsed letter equals the expected letter under the view, else 0 (expected unknown -> 0)."""
    out = []
    for c in ctx:
        pred = parse_choice(c.trajectory.text, c.letters)
        out.append(1.0 if c.expected is not None and pred == c.expected else 0.0)
    return out


@REWARDS.register("format")
def format_reward(ctx: List[RewardContext]) -> List[float]:
    """1 if the whole response is one option letter and the model stopped (not truncated)."""
    return [1.0 if (not c.trajectory.truncated and is_well_formed(c.trajectory.text, c.letters)) else 0.0 for c in ctx]


@REWARDS.register("length")
def length(ctx: List[RewardContext], max_len: int = 20480, cache_len: int = 4096) -> List[float]:
    """DAPO overlong shaping (``mmrl.algos.dapo.overlong_penalty``): 0 up to L_max-L_cache, linear to -1 at L_max."""
    import torch

    from mmrl.algos.dapo import overlong_penalty

    lengths = torch.tensor([int(c.trajectory.response_ids.numel()) for c in ctx])
    return overlong_penalty(lengths, max_len, cache_len).tolist()
