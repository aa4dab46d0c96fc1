"""Built-in rewards: accuracy (multiple choice, or an open answer's verifier), format, length (DAPO overlong shaping)."""
from __future__ import annotations

from typing import List, Optional

from mmrl.rewards.base import REWARDS, RewardContext
from mmrl.rewards.parsing import is_well_formed, parse_choice
from mmrl.rewards.verifiers import extract_answer, verify


@REWARDS.register("accuracy")
def accuracy(ctx: List[RewardContext], verifier: Optional[str] = None, **verifier_params) -> List[float]:
    """Multiple choice: 1 if the parsed letter equals the expected letter under the view, else 0 (expected unknown
    -> 0). Open answers: the sample's verifier (``mmrl.rewards.verifiers``; ``verifier`` names another one)."""
    out = []
    for c in ctx:
        if c.sample.is_choice and verifier in (None, "choice"):
            pred = parse_choice(c.trajectory.text, c.letters)
            out.append(1.0 if c.expected is not None and pred == c.expected else 0.0)
        else:
            out.append(verify(verifier, c.trajectory.text, c.sample, c.letters, c.expected, **verifier_params))
    return out


@REWARDS.register("format")
def format_reward(ctx: List[RewardContext]) -> List[float]:
    """1 if the model stopped (not truncated) and the response is one option letter (multiple choice) or holds a
    non-empty answer span (open answers: ``<answer>``, ``\\boxed{}`` or the text)."""
    def ok(c) -> bool:
        if c.sample.is_choice:
            return is_well_formed(c.trajectory.text, c.letters)
        return bool(extract_answer(c.trajectory.text))

    return [1.0 if (not c.trajectory.truncated and ok(c)) else 0.0 for c in ctx]


@REWARDS.register("length")
def length(ctx: List[RewardContext], max_len: int = 20480, cache_len: int = 4096) -> List[float]:
    """DAPO overlong shaping (``mmrl.algos.dapo.overlong_penalty``): 0 up to L_max-L_cache, linear to -1 at L_max."""
    import torch

    from mmrl.algos.dapo import overlong_penalty

    lengths = torch.tensor([int(c.trajectory.response_ids.numel()) for c in ctx])
    return overlong_penalty(lengths, max_len, cache_len).tolist()
