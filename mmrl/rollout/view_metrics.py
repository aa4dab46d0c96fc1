"""Does the model look at the media? Per-view accuracy, stability, sensitivity, abstention P/R/F1 and the
answer-without-looking rate (non-abstaining answers on views whose evidence is destroyed), every step and in eval.

Definitions (per trajectory, ``pred`` = parsed letter, ``ABST`` = the abstention option's letter, ``gold`` = the
letter of the sample's answer on the original clip):
- per-view accuracy ``view_acc/<view>``: ``pred`` equals the view's expected letter, or is ``ABST`` where the
  expected answer is "abstain"; views whose expected answer is unknown (``expected`` None) have none;
- stability rate: share of ``stable``-role responses whose answer equals the view's expected answer, counted
  only on views whose pixels differ from the anchor's (``View.pixels_differ``; a shuffle of a static clip is the
  anchor itself and would only repeat its accuracy);
- sensitivity rate: ``sensitive``-role responses scored against the view's expected answer: where it is a letter
  (a ``mapped`` view such as ``reverse``: the mapped answer) ``pred`` must equal it (``sensitivity_mapped``);
  where it is unknown or "abstain" (the evidence is removed) any answer but ``gold`` counts, abstaining included
  (``sensitivity_removed``);
- abstention precision = P(expected abstain | pred ABST), recall = P(pred ABST | expected abstain), F1; a view
  whose expected answer is unknown (``expected`` None, e.g. a ``sensitive`` view with effect ``unknown`` such as
  BPO's ``mask_support`` / ``occlude_obj``) does not enter precision: abstaining there may well be right (the BPO
  contract rewards it), so it is neither a true nor a false abstention; ``abstain_recall/<view>`` per null view;
- answer-without-looking: share of responses on expected-abstain views that answer something other than ABST;
  ``null_prior_rate``: share of those that give the sample's prior answer (``meta["prior_answer"]``, the
  synthetic world's ``prior="frequent"``), i.e. answering from the prior rather than from the pixels.

``n/<metric>`` is the number of responses behind each rate; ``views_skipped`` counts views left out because
they would not have changed the pixels (``if_unchanged: skip``).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional

from mmrl.data.schema import ANSWER_ABSTAIN, LETTERS
from mmrl.rewards.parsing import parse_choice


def _rate(out: Dict[str, float], name: str, xs: List[float]) -> None:
    if xs:
        out[name] = sum(xs) / len(xs)
        out[f"n/{name}"] = float(len(xs))


def view_metrics(trajs, si, abstain_text: Optional[str] = None) -> Dict[str, float]:
    by_view: Dict[str, List[float]] = defaultdict(list)
    null_by_view: Dict[str, List[float]] = defaultdict(list)
    views = getattr(si, "views", {}) or {}
    stable, sens_map, sens_rm, nolook, prior = [], [], [], [], []
    abst_pred = abst_exp = abst_tp = 0
    for t in trajs:
        cands = si.candidates[(t.sample_id, t.view)]
        letters = LETTERS[: len(cands)]
        pred = parse_choice(t.text, letters)
        abst = LETTERS[cands.index(abstain_text)] if abstain_text and abstain_text in cands else None
        sample = si.samples[t.sample_id]
        gold = sample.expected_letter
        is_abst = abst is not None and pred == abst
        if t.expected == ANSWER_ABSTAIN:  # the expected answer is the abstention option, whatever its letter
            by_view[t.view].append(float(is_abst))
        elif t.expected is not None:  # undetermined views have no accuracy
            by_view[t.view].append(float(pred is not None and pred == t.expected))
        view = views.get((t.sample_id, t.view))
        if t.role == "stable" and (view is None or view.pixels_differ is not False):
            stable.append(float(pred == t.expected))
        if t.role == "sensitive":
            if t.expected is not None and t.expected != ANSWER_ABSTAIN:
                sens_map.append(float(pred is not None and pred == t.expected))
            else:
                sens_rm.append(float(pred != gold))
        if t.expected is not None:  # undetermined views: abstaining is neither right nor wrong
            abst_pred += is_abst
        if t.expected == ANSWER_ABSTAIN:
            abst_exp += 1
            abst_tp += is_abst
            nolook.append(float(not is_abst))
            null_by_view[t.view].append(float(is_abst))
            pa = (getattr(sample, "meta", None) or {}).get("prior_answer")
            if pa is not None and pa in cands:
                prior.append(float(pred == LETTERS[cands.index(pa)]))
    out = {f"view_acc/{k}": sum(v) / len(v) for k, v in by_view.items()}
    _rate(out, "stability_rate", stable)
    _rate(out, "sensitivity_rate", sens_map + sens_rm)
    _rate(out, "sensitivity_mapped", sens_map)
    _rate(out, "sensitivity_removed", sens_rm)
    if abst_exp or abst_pred:
        p = abst_tp / abst_pred if abst_pred else 0.0
        r = abst_tp / abst_exp if abst_exp else 0.0
        out.update({"abstain_precision": p, "abstain_recall": r, "abstain_f1": 2 * p * r / (p + r) if p + r else 0.0,
                    "n/abstain_expected": float(abst_exp), "n/abstain_predicted": float(abst_pred)})
    for k, v in null_by_view.items():
        _rate(out, f"abstain_recall/{k}", v)
    _rate(out, "answer_without_looking", nolook)
    _rate(out, "null_prior_rate", prior)
    skipped = getattr(si, "skipped_views", None)
    if skipped is not None:
        out["views_skipped"] = float(len(skipped))
    return out
