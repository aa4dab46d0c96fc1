"""Emotion metrics on hand-computed cases: top-1, KL to the annotators, top-k overlap, diversity, box IoU."""
import math

import pytest

from mmrl.data.affect import BUILTIN_VAD, builtin_lexicon
from mmrl.eval.benchmarks.emotion.metrics import (box_iou, candidate_distribution, candidate_diversity, emotion_metrics, kl_to_annotators,
                               top1, topk_overlap)
from mmrl.rewards.dspo_format import parse_dspo


def resp(cands, choice, box="0.0, 0.0, 0.5, 0.5"):
    return parse_dspo(rf"<step1>e \bboxed{{[{box}]}}</step1><step2>r</step2><step3>\list{{{', '.join(cands)}}}"
                      rf"</step3><step4>\boxed{{{choice}}}</step4>")


def test_metrics_by_hand():
    ps = [resp(["joy", "surprise"], "joy"), resp(["fear", "anger"], "anger"), parse_dspo("junk")]
    dists = [{"joy": 0.5, "surprise": 0.5, "fear": 0.0}, {"joy": 1.0, "surprise": 0.0, "fear": 0.0},
             {"joy": 0.2, "surprise": 0.3, "fear": 0.5}]
    assert top1(ps, ["joy", "fear", "joy"]) == pytest.approx(1 / 3)
    q = candidate_distribution(["joy", "surprise"], ["joy", "surprise", "fear"], eps=0.1)
    assert q == pytest.approx({"joy": 0.45, "surprise": 0.45, "fear": 0.1})
    kl0 = math.log(0.5 / ((1 - 1e-3) / 2))  # first: p = (.5, .5, 0) vs q = (.4995, .4995, .001)
    kl1 = math.log(1.0 / (1e-3 / 2))  # second: joy is not listed
    kl2 = sum(p * math.log(p / (1 / 3)) for p in (0.2, 0.3, 0.5))  # malformed: uniform q
    assert kl_to_annotators(ps, dists) == pytest.approx((kl0 + kl1 + kl2) / 3)
    assert topk_overlap(ps, dists, k=2) == pytest.approx((1.0 + 0.0 + 0.0) / 3)  # top-2 of the 2nd: joy, surprise
    lex = builtin_lexicon()
    d0 = math.dist(BUILTIN_VAD["joy"], BUILTIN_VAD["surprise"])
    d1 = math.dist(BUILTIN_VAD["fear"], BUILTIN_VAD["anger"])
    assert candidate_diversity(ps, lex) == pytest.approx((d0 + d1 + 0.0) / 3)
    boxes = [(0.0, 0.0, 0.5, 0.5), (0.25, 0.25, 0.75, 0.75), None]
    assert box_iou(ps, boxes) == pytest.approx((1.0 + (0.0625 / (0.25 + 0.25 - 0.0625))) / 2)  # None: left out
    assert box_iou(ps, [None, None, (0, 0, 1, 1)]) == 0.0  # malformed: IoU 0
    m = emotion_metrics(ps, ["joy", "fear", "joy"], dists, boxes, lex, k=2)
    assert m["well_formed"] == pytest.approx(2 / 3) and set(m) == {"top1", "kl_to_annotators", "topk_overlap",
                                                                   "candidate_diversity", "box_iou", "well_formed",
                                                                   "n", "n_dist", "n_box"}
    assert (m["n"], m["n_dist"], m["n_box"]) == (3, 3, 2)
    # no annotator distribution / no evidence box (EmoSet): those metrics are None, not 0
    m = emotion_metrics(ps, ["joy", "fear", "joy"], [None] * 3, [None] * 3, lex, k=2)
    assert m["kl_to_annotators"] is None and m["topk_overlap"] is None and m["box_iou"] is None
    assert kl_to_annotators(ps, [dists[0], None, None]) == pytest.approx(kl0)
