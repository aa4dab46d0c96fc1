"""Emotion-task metrics (issue 17): pure functions over parsed DSPO responses and the samples' annotations.

- ``top1``: fraction of responses whose step-4 choice is the gold label (malformed = wrong).
- ``kl_to_annotators``: mean KL(p_ann || q) where q is the response's candidate set as a distribution: each
  listed emotion of the class set gets mass (1 - eps) / K', the remaining eps is spread over the other classes
  (``eps`` keeps the KL finite; our choice, the paper reports no such metric).
- ``topk_overlap``: |candidates ∩ top-k annotator classes| / k (k = the number of candidates asked for).
- ``candidate_diversity``: mean pairwise Euclidean distance of the candidates' VAD points (0 for K < 2).
- ``box_iou``: IoU of step 1's box with the evidence box, both normalised (ymin, xmin, ymax, xmax).

KL and top-k overlap are means over the samples with an annotator distribution (``None``: left out; EmoSet has
none), box IoU over those with an evidence box (Emotion6 and EmoSet have none); a metric with no sample is None.
A malformed response counts in every mean it enters (empty candidate set, IoU 0).
"""
from __future__ import annotations

import itertools
import math
from typing import Dict, List, Mapping, Optional, Sequence

from mmrl.data.affect import VADLexicon
from mmrl.rewards.dspo_format import DSPOParse, normalize_emotion


def top1(parses: Sequence[DSPOParse], gold: Sequence[str]) -> float:
    if not parses:
        return 0.0
    hits = [p.ok and normalize_emotion(p.choice or "") == normalize_emotion(g) for p, g in zip(parses, gold)]
    return sum(hits) / len(parses)


def candidate_distribution(cands: Sequence[str], classes: Sequence[str], eps: float = 1e-3) -> Dict[str, float]:
    """The response's candidates as a distribution over ``classes`` (module docstring)."""
    inside = [c for c in classes if c in set(cands)]
    out_n = len(classes) - len(inside)
    if not inside:
        return {c: 1.0 / len(classes) for c in classes}
    rest = eps / out_n if out_n else 0.0
    mass = (1.0 - (eps if out_n else 0.0)) / len(inside)
    return {c: (mass if c in inside else rest) for c in classes}


def kl(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """KL(p || q) over p's keys (terms with p = 0 are 0)."""
    tot = sum(p.values())
    return sum((v / tot) * math.log((v / tot) / q[k]) for k, v in p.items() if v > 0)


def _mean(vals: List[float]) -> Optional[float]:
    return sum(vals) / len(vals) if vals else None


def kl_to_annotators(parses: Sequence[DSPOParse], dists: Sequence[Optional[Mapping[str, float]]],
                     eps: float = 1e-3) -> Optional[float]:
    vals = []
    for p, d in zip(parses, dists):
        if d is None:
            continue
        q = candidate_distribution(p.candidates if p.ok else [], list(d), eps)
        vals.append(kl(d, q))
    return _mean(vals)


def topk_overlap(parses: Sequence[DSPOParse], dists: Sequence[Optional[Mapping[str, float]]],
                 k: Optional[int] = None) -> Optional[float]:
    vals = []
    for p, d in zip(parses, dists):
        if d is None:
            continue
        kk = k or max(1, len(p.candidates))
        top = [c for c, _ in sorted(d.items(), key=lambda kv: -kv[1])[:kk]]
        vals.append(len(set(p.candidates if p.ok else []) & set(top)) / kk)
    return _mean(vals)


def candidate_diversity(parses: Sequence[DSPOParse], lex: VADLexicon) -> float:
    vals = []
    for p in parses:
        zs = [z for z in (lex.lookup(c) for c in (p.candidates if p.ok else [])) if z is not None]
        pairs = list(itertools.combinations(zs, 2))
        vals.append(sum(math.dist(a, b) for a, b in pairs) / len(pairs) if pairs else 0.0)
    return sum(vals) / len(vals) if vals else 0.0


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def box_iou(parses: Sequence[DSPOParse], boxes: Sequence[Optional[Sequence[float]]]) -> Optional[float]:
    return _mean([iou(p.box, b) if p.ok else 0.0 for p, b in zip(parses, boxes) if b is not None])


def emotion_metrics(parses: List[DSPOParse], gold: List[str], dists: List[Optional[Mapping[str, float]]],
                    boxes: List[Optional[Sequence[float]]], lex: VADLexicon,
                    k: Optional[int] = None) -> Dict[str, Optional[float]]:
    """All five metrics, the well-formed rate, and how many samples each mean is over (``n``, ``n_dist``,
    ``n_box``)."""
    n = len(parses)
    return {"top1": top1(parses, gold), "kl_to_annotators": kl_to_annotators(parses, dists),
            "topk_overlap": topk_overlap(parses, dists, k), "candidate_diversity": candidate_diversity(parses, lex),
            "box_iou": box_iou(parses, boxes), "well_formed": sum(p.ok for p in parses) / n if n else 0.0,
            "n": n, "n_dist": sum(d is not None for d in dists), "n_box": sum(b is not None for b in boxes)}
