"""Does the model look at the media? Per-view accuracy, stability, sensitivity, abstention P/R/F1 and the
answer-without-looking rate (non-abstaining answers on views whose evidence is destroyed), every step and in eval.

Definitions (per trajectory, ``pred`` = parsed letter, ``ABST`` = the abstention option's letter):
- per-view accuracy ``view_acc/<view>``: ``pred`` equals the view's expected letter, or is ``ABST`` where the
  expected answer is "abstain"; views whose expected answer is unknown (``expected`` None) have none;
- stability rate: share of ``stable``-role responses whose answer equals the view's expected answer;
- sensitivity rate: share of ``sensitive``-role responses that do NOT give the original gold answer;
- abstention precision = P(expected abstain | pred ABST), recall = P(pred ABST | expected abstain), F1; a view
  whose expected answer is unknown (``expected`` None, e.g. a ``sensitive`` view with effect ``unknown`` such as
  BPO's ``mask_support`` / ``occlude_obj``) does not enter precision: abstaining there may well be right (the BPO
  contract rewards it), so it is neither a true nor a false abstention;
- answer-without-looking: share of responses on expected-abstain views that answer something other than ABST.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional

from mmrl.data.schema import ANSWER_ABSTAIN, LETTERS
from mmrl.rewards.parsing import parse_choice


def view_metrics(trajs, si, abstain_text: Optional[str] = None) -> Dict[str, float]:
    by_view: Dict[str, List[float]] = defaultdict(list)
    stable, sensitive, abst_pred, abst_exp, abst_tp, nolook = [], [], 0, 0, 0, []
    for t in trajs:
        cands = si.candidates[(t.sample_id, t.view)]
        letters = LETTERS[: len(cands)]
        pred = parse_choice(t.text, letters)
        abst = LETTERS[cands.index(abstain_text)] if abstain_text and abstain_text in cands else None
        gold = si.samples[t.sample_id].expected_letter
        is_abst = abst is not None and pred == abst
        if t.expected == ANSWER_ABSTAIN:  # the expected answer is the abstention option, whatever its letter
            by_view[t.view].append(float(is_abst))
        elif t.expected is not None:  # undetermined views have no accuracy
            by_view[t.view].append(float(pred is not None and pred == t.expected))
        if t.role == "stable":
            stable.append(float(pred == t.expected))
        if t.role == "sensitive":
            sensitive.append(float(pred != gold))
        if t.expected is not None:  # undetermined views: abstaining is neither right nor wrong
            abst_pred += is_abst
        if t.expected == ANSWER_ABSTAIN:
            abst_exp += 1
            abst_tp += is_abst
            nolook.append(float(not is_abst))
    out = {f"view_acc/{k}": sum(v) / len(v) for k, v in by_view.items()}
    if stable:
        out["stability_rate"] = sum(stable) / len(stable)
    if sensitive:
        out["sensitivity_rate"] = sum(sensitive) / len(sensitive)
    if abst_exp or abst_pred:
        p = abst_tp / abst_pred if abst_pred else 0.0
        r = abst_tp / abst_exp if abst_exp else 0.0
        out.update({"abstain_precision": p, "abstain_recall": r, "abstain_f1": 2 * p * r / (p + r) if p + r else 0.0})
    if nolook:
        out["answer_without_looking"] = sum(nolook) / len(nolook)
    return out
