"""Build reward contexts by hand: one sample, one trajectory, one view per row."""
from __future__ import annotations

from typing import List, Optional

import torch

from mmrl.data.schema import Sample, Trajectory
from mmrl.rewards.base import RewardContext

ABSTAIN_TEXT = "cannot be determined"
COLOURS = ["red", "green", "blue"]


def ctx(text: str, expected: Optional[str] = "A", *, role: str = "anchor", view: str = "original",
        candidates: Optional[List[str]] = None, answer: str = "red", group: int = 0, pack: int = 0,
        truncated: bool = False, n_tokens: int = 2, sid: str = "s0") -> RewardContext:
    """A context whose sample's gold is ``answer`` among ``COLOURS`` (+ the abstention option by default)."""
    cands = list(candidates) if candidates is not None else COLOURS + [ABSTAIN_TEXT]
    sample = Sample(id=sid, question="What colour?", candidates=[c for c in cands if c != ABSTAIN_TEXT],
                    answer=answer)
    traj = Trajectory(sample_id=sid, group_id=group, view=view, role=role, prompt_ids=torch.zeros(1, dtype=torch.long),
                      response_ids=torch.arange(n_tokens), logprobs=torch.zeros(n_tokens),
                      loss_mask=torch.ones(n_tokens, dtype=torch.bool), text=text, truncated=truncated,
                      expected=expected, pack_id=pack)
    return RewardContext(sample=sample, trajectory=traj, candidates=cands, view=view, role=role, expected=expected)
