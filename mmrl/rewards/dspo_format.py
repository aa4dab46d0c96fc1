"""DSPO's four-step response: the prompt that asks for it, its parser and its format reward (specs/algorithms.md §3).

The response the prompt asks for::

    <step1> evidence text ... \\bboxed{[ymin, xmin, ymax, xmax]} </step1>     box normalised to [0, 1] (Eq. 6)
    <step2> psychological reflection </step2>
    <step3> \\list{e1, e2, ..., eK} </step3>                                    K candidate emotions
    <step4> \\boxed{choice} </step4>                                            the chosen option

``parse_dspo`` never raises: a malformed response gives ``DSPOParse.ok == False`` and one ``reason`` from
``REASONS`` (the first check that failed, in the order listed), so a run can count them. The format reward is 1 for a
well-formed, not truncated response and 0 otherwise (the paper's binary fmt term).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

REASONS = ("truncated", "missing_step", "step_order", "no_box", "bad_box", "no_list", "bad_list_size",
           "duplicate_candidate", "no_choice")

TERM = "dspo_div/t{}"  # the per-candidate DEDR term components (dspo_div reward -> dspo spec)

_STEP = {i: re.compile(rf"<step{i}>(.*?)</step{i}>", re.S) for i in range(1, 5)}
_BBOX = re.compile(r"\\bboxed\{\s*\[([^\]]*)\]\s*\}")
_LIST = re.compile(r"\\list\{([^}]*)\}")
_BOXED = re.compile(r"\\boxed\{([^}]*)\}")


@dataclass
class DSPOParse:
    ok: bool
    reason: Optional[str] = None  # the first failed check (``REASONS``) when not ok
    evidence: str = ""
    box: Optional[Tuple[float, float, float, float]] = None  # (ymin, xmin, ymax, xmax) in [0, 1]
    reflection: str = ""
    candidates: List[str] = field(default_factory=list)
    candidate_spans: List[Tuple[int, int]] = field(default_factory=list)  # char spans of each candidate in the text
    choice: Optional[str] = None


def dspo_prompt(k: int = 5) -> str:
    """The four-step instruction appended to the question, asking for ``k`` candidates (paper default K=5)."""
    return ("Answer in four steps.\n"
            "<step1> Describe the visual evidence for the emotion and give its region as "
            "\\bboxed{[ymin,xmin,ymax,xmax]} with coordinates in [0,1]. </step1>\n"
            "<step2> Reflect on how a viewer would feel and why. </step2>\n"
            f"<step3> List {int(k)} candidate emotions as \\list{{e1, e2, ...}}. </step3>\n"
            "<step4> Give your final choice as \\boxed{}. </step4>")


def normalize_emotion(word: str) -> str:
    return re.sub(r"\s+", " ", word.strip().strip(".,;:'\"").lower())


def parse_dspo(text: str, k: Optional[int] = None, truncated: bool = False) -> DSPOParse:
    """Parse a four-step response; ``k`` (if given) is the required number of candidates.

    Checks, in order: not truncated; the four ``<stepN>...</stepN>`` blocks present and in order; step 1 holds a
    ``\\bboxed{[...]}`` with four numbers in [0, 1], ymin < ymax and xmin < xmax; step 3 holds a ``\\list{...}`` of
    comma-separated non-empty names (exactly ``k`` when given), no duplicate; step 4 holds a non-empty ``\\boxed{}``.
    """
    if truncated:
        return DSPOParse(False, "truncated")
    found = [_STEP[i].search(text) for i in range(1, 5)]
    if any(m is None for m in found):
        return DSPOParse(False, "missing_step")
    if any(found[i].start() >= found[i + 1].start() for i in range(3)):
        return DSPOParse(False, "step_order")
    s1, s2, s3, s4 = found
    bm = _BBOX.search(s1.group(1))
    if bm is None:
        return DSPOParse(False, "no_box")
    try:
        nums = [float(x) for x in bm.group(1).split(",")]
    except ValueError:
        return DSPOParse(False, "bad_box")
    if len(nums) != 4 or not all(0.0 <= v <= 1.0 for v in nums) or nums[0] >= nums[2] or nums[1] >= nums[3]:
        return DSPOParse(False, "bad_box")
    lm = _LIST.search(s3.group(1))
    if lm is None:
        return DSPOParse(False, "no_list")
    base = s3.start(1) + lm.start(1)
    cands, spans, pos = [], [], 0
    for raw in lm.group(1).split(","):
        name = normalize_emotion(raw)
        lead = len(raw) - len(raw.lstrip())
        start = base + pos + lead
        spans.append((start, start + len(raw.strip())))
        cands.append(name)
        pos += len(raw) + 1
    if not cands or any(not c for c in cands) or (k is not None and len(cands) != k):
        return DSPOParse(False, "bad_list_size")
    if len(set(cands)) != len(cands):
        return DSPOParse(False, "duplicate_candidate")
    cm = _BOXED.search(s4.group(1))
    if cm is None or not cm.group(1).strip():
        return DSPOParse(False, "no_choice")
    evidence = _BBOX.sub("", s1.group(1)).strip()
    return DSPOParse(True, None, evidence=evidence, box=tuple(nums), reflection=s2.group(1).strip(),
                     candidates=cands, candidate_spans=spans, choice=cm.group(1).strip())


def count_reasons(parses: List[DSPOParse]) -> Counter:
    """``reason -> count`` over the malformed parses (for the run's metrics)."""
    return Counter(p.reason for p in parses if not p.ok)
