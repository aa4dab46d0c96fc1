"""Format reward for responses that reason before answering: ``... <answer>L</answer>`` (FastRL's bench world)."""
from __future__ import annotations

import re
from typing import List

from mmrl.rewards.base import REWARDS, RewardContext

_TAIL = re.compile(r"<answer>\s*\(?([A-Z])\)?\.?\s*</answer>\s*$")


@REWARDS.register("answer_tag_format")
def answer_tag_format(ctx: List[RewardContext], min_reasoning_chars: int = 1) -> List[float]:
    """1 if the response ends with exactly one ``<answer>L</answer>`` naming an option, has at least
    ``min_reasoning_chars`` characters of reasoning before it, and the model stopped (not truncated); else 0."""
    out = []
    for c in ctx:
        text = c.trajectory.text
        m = _TAIL.search(text)
        ok = (m is not None and m.group(1) in c.letters and text.count("<answer>") == 1
              and len(text[: m.start()].strip()) >= min_reasoning_chars and not c.trajectory.truncated)
        out.append(1.0 if ok else 0.0)
    return out
