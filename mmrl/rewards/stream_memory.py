"""Memory scores of Stream-GDPO's R_mem (specs/algorithms.md §5, "proposed where the paper is silent").

A memory is a list of lines, each a note plus a source time range ``(note, start s, end s)``.

- ``S_time(M) = valid(M) · IoU(∪ ranges of M, ∪ teacher evidence intervals seen so far)``, where ``valid(M)`` is
  the fraction of lines whose range is ordered (``0 ≤ start ≤ end``) and inside the observed prefix
  (``end ≤ observed``); the IoU is the 1-D interval IoU of ``mmrl.rewards.tool_use`` over the valid lines' ranges
  and the teacher's evidence intervals clipped to the prefix. An empty memory scores 0.
- ``S_keep(M) = mean over teacher salient facts f of max_line tokenF1(f, note)`` (SQuAD token-F1 on lower-cased
  word tokens): the recall of the facts, softened by F1. No facts: 1 (nothing to keep).
- ``R_mem = ½[ΔS_time + ΔS_keep]`` with ``ΔS = S(M_post) − S(M_pre)`` of one compaction; a rollout with several
  compactions averages their R_mem (our reading: the paper computes it "once per rollout"), none gives 0.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, List, Sequence, Tuple

from mmrl.rewards.tool_use import interval_iou

Line = Tuple[str, float, float]
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> List[str]:
    return _WORD.findall(str(text).lower())


def token_f1(a: str, b: str) -> float:
    """SQuAD token-F1 of two strings' lower-cased word tokens (0 when either is empty)."""
    x, y = words(a), words(b)
    common = sum((Counter(x) & Counter(y)).values())
    if not x or not y or common == 0:
        return 0.0
    p, r = common / len(x), common / len(y)
    return 2 * p * r / (p + r)


def line_valid(line: Line, observed: float) -> bool:
    """An ordered range inside the observed prefix ``[0, observed]``."""
    _, a, b = line
    return 0.0 <= float(a) <= float(b) <= float(observed)


def s_time(lines: Sequence[Line], observed: float, teacher: Iterable[Tuple[float, float]]) -> float:
    """``valid fraction × coverage IoU`` (module docstring)."""
    if not lines:
        return 0.0
    valid = [ln for ln in lines if line_valid(ln, observed)]
    seen = [(float(a), min(float(b), observed)) for a, b in teacher if float(a) < observed]
    cover = interval_iou([(a, b) for _, a, b in valid], seen)
    return len(valid) / len(lines) * cover


def s_keep(lines: Sequence[Line], facts: Sequence[str]) -> float:
    """Mean over ``facts`` of the best token-F1 with a line's note; 1 without facts."""
    if not facts:
        return 1.0
    return sum(max((token_f1(f, note) for note, _, _ in lines), default=0.0) for f in facts) / len(facts)


def compaction_reward(pre: Sequence[Line], post: Sequence[Line], observed: float,
                      teacher: Iterable[Tuple[float, float]], facts: Sequence[str]) -> float:
    """``½[ΔS_time + ΔS_keep]`` from ``pre`` to ``post`` at time ``observed``."""
    teacher = list(teacher)
    d_time = s_time(post, observed, teacher) - s_time(pre, observed, teacher)
    d_keep = s_keep(post, facts) - s_keep(pre, facts)
    return 0.5 * (d_time + d_keep)
