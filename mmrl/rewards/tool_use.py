"""Rewards that see tool use: they read the calls recorded in ``trajectory.turns`` (``mmrl.tools.calls``).

- ``tool_format``: valid calls / calls of the episode; ``no_call`` for an episode without a call.
- ``seek_iou``: 1-D IoU, in seconds of the source video, between the union of the episode's valid ``video_seek``
  intervals (clip times plus the clip's start) and the union of the sample's evidence segments:
  ``|S ∩ E| / |S ∪ E|``; 0 when it did not seek, ``no_evidence`` when the sample has no evidence segment.
"""
from __future__ import annotations

from typing import Iterable, List, Tuple

from mmrl.rewards.base import REWARDS, RewardContext


def _calls(ctx: RewardContext) -> List[dict]:
    return [t for t in ctx.trajectory.turns if "tool" in t]


@REWARDS.register("tool_format")
def tool_format(ctx: List[RewardContext], no_call: float = 0.0) -> List[float]:
    """The fraction of the episode's tool calls that were valid; ``no_call`` for an episode without a call."""
    out = []
    for c in ctx:
        calls = _calls(c)
        out.append(sum(bool(k["valid"]) for k in calls) / len(calls) if calls else float(no_call))
    return out


def merge(intervals: Iterable[Tuple[float, float]]) -> List[Tuple[float, float]]:
    """Disjoint sorted intervals covering the same points (empty or reversed intervals dropped)."""
    out: List[Tuple[float, float]] = []
    for a, b in sorted((float(a), float(b)) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def interval_iou(a: Iterable[Tuple[float, float]], b: Iterable[Tuple[float, float]]) -> float:
    """``|A ∩ B| / |A ∪ B|`` of two unions of intervals (0 when both are empty)."""
    a, b = merge(a), merge(b)
    inter = sum(max(0.0, min(x1, y1) - max(x0, y0)) for x0, x1 in a for y0, y1 in b)
    union = sum(x1 - x0 for x0, x1 in a) + sum(y1 - y0 for y0, y1 in b) - inter
    return inter / union if union > 0 else 0.0


@REWARDS.register("seek_iou")
def seek_iou(ctx: List[RewardContext], no_evidence: float = 0.0) -> List[float]:
    """IoU in seconds between the union of the episode's valid ``video_seek`` intervals and the sample's evidence
    segments; ``no_evidence`` for a sample without segments."""
    out = []
    for c in ctx:
        evidence = c.sample.evidence.segments
        if not evidence:
            out.append(float(no_evidence))
            continue
        offset = (c.sample.video.start or 0.0) if c.sample.video is not None else 0.0
        seeks = [(k["interval"][0] + offset, k["interval"][1] + offset) for k in _calls(c)
                 if k["tool"] == "video_seek" and k["valid"] and "interval" in k]
        out.append(interval_iou(seeks, evidence))
    return out
