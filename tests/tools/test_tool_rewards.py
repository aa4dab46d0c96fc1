"""Rewards that see tool use, on hand-computed values."""
import math

import pytest
import torch

from mmrl.data.schema import Evidence, Sample, Trajectory, VideoRef
from mmrl.rewards import REWARDS, RewardContext
from mmrl.rewards.tool_use import interval_iou, merge


def _ctx(turns, segments=((2.0, 4.0),), start=None):
    z = torch.zeros(1, dtype=torch.long)
    s = Sample("s", "q?", ["a", "b"], "a", video=VideoRef("v.mp4", start=start), evidence=Evidence(segments=list(segments)))
    return RewardContext(sample=s, trajectory=Trajectory("s", 0, "original", "anchor", z, z, z.float(), z.bool(), "",
                                                         turns=turns), candidates=["a", "b"])


def _seek(a, b, valid=True):
    return {"tool": "video_seek", "valid": valid, "interval": [a, b]}


def test_interval_iou_by_hand():
    assert merge([(3, 5), (0, 1), (4, 6), (2, 2)]) == [(0, 1), (3, 6)]
    assert interval_iou([(0, 2)], [(1, 3)]) == 1 / 3
    assert interval_iou([(0, 1), (2, 3)], [(0, 3)]) == 2 / 3
    assert interval_iou([], [(0, 1)]) == 0.0 and interval_iou([], []) == 0.0


def test_seek_iou_and_tool_format():
    seek, fmt = REWARDS.get("seek_iou"), REWARDS.get("tool_format")
    ctx = [
        _ctx([_seek(2.0, 4.0)]),  # exactly the evidence
        _ctx([_seek(1.0, 3.0), {"tool": "zoom", "valid": True}]),  # overlap 1 s of 3 s
        _ctx([_seek(2.0, 4.0, valid=False), {"tool": "?", "valid": False}]),  # invalid seeks do not count
        _ctx([]),  # no call
        _ctx([_seek(0.0, 1.0)], start=2.0),  # clip time 0..1 is source time 2..3: half the evidence
        _ctx([_seek(0.0, 1.0)], segments=()),  # no evidence
    ]
    assert seek(ctx) == [1.0, 1 / 3, 0.0, 0.0, 0.5, 0.0]
    assert seek(ctx, no_evidence=0.5)[-1] == 0.5
    assert fmt(ctx) == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0] and fmt(ctx, no_call=1.0)[3] == 1.0
    half = [_ctx([_seek(0, 1), {"tool": "x", "valid": False}])]
    assert math.isclose(fmt(half)[0], 0.5)


MERGES = [
    ([(0, 1), (1, 2)], [(0, 2)]),  # touching intervals join
    ([(0, 1), (2, 3), (4, 5), (4.5, 6)], [(0, 1), (2, 3), (4, 6)]),  # the last kept interval grows, not another
    ([(4, 5), (0, 1), (2, 3), (2.5, 2.8)], [(0, 1), (2, 3), (4, 5)]),  # inside the last one: it keeps its end
    ([(0, 3), (1, 2), (2.5, 4)], [(0, 4)]),
    ([(5, 4), (1, 1), (0, 0.5)], [(0, 0.5)]),  # reversed and empty dropped
]


@pytest.mark.parametrize("intervals,want", MERGES, ids=[str(i) for i in range(len(MERGES))])
def test_merge_by_hand(intervals, want):
    assert merge(intervals) == want


@pytest.mark.parametrize("a,b,want", [
    ([(0, 1)], [(2, 3)], 0.0),  # disjoint: nothing shared
    ([(0, 0.5)], [(0, 0.5)], 1.0),  # short intervals: a union under 1 s still counts
    ([(0, 0.2)], [(0.1, 0.3)], 1 / 3),
    ([(0, 1), (1, 2)], [(0, 2)], 1.0),
    ([(0, 4)], [(1, 2), (3, 5)], 2 / 5),
])
def test_interval_iou_short_and_disjoint(a, b, want):
    assert interval_iou(a, b) == pytest.approx(want)
