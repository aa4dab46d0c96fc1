"""Held-out contract metrics (``mmrl.rollout.view_metrics``) on hand-built trajectories."""
from types import SimpleNamespace

import pytest
import torch

from mmrl.data.schema import Sample, Trajectory, View
from mmrl.rollout.view_metrics import view_metrics

ABST = "cannot be determined"


def traj(sid, view, role, text, expected):
    z = torch.zeros(1, dtype=torch.long)
    return Trajectory(sample_id=sid, group_id=0, view=view, role=role, prompt_ids=z, response_ids=z,
                      logprobs=torch.zeros(1), loss_mask=torch.ones(1, dtype=torch.bool), text=text, expected=expected)


def build(rows, differ=None, prior=None, skipped=()):
    """rows: (sample id, view, role, answer text, expected). Every sample: gold 'left' = A, candidates + ABST."""
    cands = ["left", "right", "up", ABST]
    samples = {sid: Sample(id=sid, question="?", candidates=cands[:3], answer="left",
                           meta={"prior_answer": prior} if prior else {}) for sid, *_ in rows}
    si = SimpleNamespace(samples=samples, candidates={(r[0], r[1]): cands for r in rows},
                         views={(r[0], r[1]): View(r[1], r[2], None, r[4], pixels_differ=(differ or {}).get(r[1], True))
                                for r in rows}, skipped_views=list(skipped))
    return [traj(*r) for r in rows], si


def test_stability_counts_only_views_that_change_the_pixels():
    trajs, si = build([("s1", "shuffle", "stable", "A", "A"), ("s2", "shuffle", "stable", "B", "A"),
                       ("s3", "noise", "stable", "B", "A")], differ={"shuffle": False})
    m = view_metrics(trajs, si, ABST)
    assert m["stability_rate"] == 0.0 and m["n/stability_rate"] == 1.0  # only s3's noise view


def test_sensitivity_scored_against_each_views_expected_answer():
    trajs, si = build([("s1", "reverse", "sensitive", "B", "B"),  # mapped, right
                       ("s2", "reverse", "sensitive", "C", "B"),  # mapped: not gold, but not the mapped answer
                       ("s3", "occlude", "sensitive", "D", None),  # removed: abstaining is not gold
                       ("s4", "occlude", "sensitive", "A", None)])  # removed: gold
    m = view_metrics(trajs, si, ABST)
    assert m["sensitivity_mapped"] == 0.5 and m["n/sensitivity_mapped"] == 2
    assert m["sensitivity_removed"] == 0.5 and m["n/sensitivity_removed"] == 2
    assert m["sensitivity_rate"] == 0.5 and m["n/sensitivity_rate"] == 4


def test_abstention_per_null_view_prior_rate_and_counts():
    trajs, si = build([("s1", "null_black", "abstain", "D", "abstain"), ("s1", "null_noise", "abstain", "A", "abstain"),
                       ("s2", "null_black", "abstain", "A", "abstain"), ("s2", "null_noise", "abstain", "B", "abstain"),
                       ("s1", "original", "anchor", "D", "A")], prior="left", skipped=[("s1", "shuffle", "static")])
    m = view_metrics(trajs, si, ABST)
    assert m["abstain_recall/null_black"] == 0.5 and m["abstain_recall/null_noise"] == 0.0
    assert m["n/abstain_recall/null_black"] == 2
    assert m["abstain_recall"] == 0.25 and m["abstain_precision"] == 0.5  # 1 of 2 abstentions on a null view
    assert m["n/abstain_expected"] == 4 and m["n/abstain_predicted"] == 2
    assert m["answer_without_looking"] == 0.75
    assert m["null_prior_rate"] == pytest.approx(2 / 4)  # two null answers are 'left', the prior answer
    assert m["views_skipped"] == 1.0
