"""The streaming agent's action grammar (WTI, specs/algorithms.md section 5) and its validity reasons.

At each chunk (and again after a recall) the model writes one short think update and exactly one action::

    <think>red square enters left</think>
    <action>silence</action>                 # nothing to say now
    <action>response(q2, B)</action>         # answer question q2 with "B" (a letter, a number, Yes/No ...)
    <action>recall(3, 7.5)</action>          # archived chunks overlapping [3, 7.5] seconds

At a controller boundary it rewrites its memory instead, one line per fact, each a source time range and a note::

    <memory>
    [0-4] red square moved left
    [4-8] blue flash at 6 s
    </memory>

``parse_action`` checks the grammar only (``reason`` is ``None`` when it holds); ``check_recall`` checks a
recall's times against the current chunk: valid iff ``0 <= start <= end < chunk_start`` (the start of the current
chunk, gamma_t). The environment adds its own reasons (``ENV_REASONS``). Every reason is a counted metric
``stream/invalid/<reason>``; nothing here raises on model text.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

SILENCE, RESPONSE, RECALL = "silence", "response", "recall"
KINDS = (SILENCE, RESPONSE, RECALL)

# grammar reasons (parse_action / parse_memory)
GRAMMAR_REASONS = ("no_think", "multiple_thinks", "think_too_long", "no_action", "multiple_actions", "extra_text",
                   "unknown_action", "malformed_action", "non_finite", "empty_answer")
# time reasons (check_recall)
RECALL_TIME_REASONS = ("recall_negative", "recall_order", "recall_future")
# reasons only the environment can tell
ENV_REASONS = ("unknown_question", "question_not_active", "recall_nothing_new", "recall_limit", "no_memory",
               "memory_bad_line", "memory_over_budget")
REASONS = GRAMMAR_REASONS + RECALL_TIME_REASONS + ENV_REASONS

MAX_THINK_WORDS = 40

_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL)
_MEMORY = re.compile(r"<memory>(.*?)</memory>", re.DOTALL)
_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?inf(?:inity)?|nan)"
_RECALL = re.compile(rf"recall\(\s*{_NUM}\s*,\s*{_NUM}\s*\)", re.IGNORECASE)
_RESPONSE = re.compile(r"response\(\s*([A-Za-z_][\w\-]*)\s*,(.*)\)", re.DOTALL)
_VERB = re.compile(r"\s*([A-Za-z_]+)")
_LINE = re.compile(rf"^\s*\[\s*{_NUM}\s*(?:-|–|,|to)\s*{_NUM}\s*\]\s*(.*?)\s*$", re.IGNORECASE)


@dataclass
class Action:
    """One parsed decision. ``kind`` is ``None`` when the grammar failed (then ``reason`` says why)."""

    kind: Optional[str]
    think: str = ""
    qid: Optional[str] = None  # response
    answer: Optional[str] = None  # response
    start: Optional[float] = None  # recall, seconds since the stream began
    end: Optional[float] = None
    reason: Optional[str] = None  # None: the grammar holds

    @property
    def valid(self) -> bool:
        return self.reason is None

    def render(self) -> str:
        """The canonical text of this action (what a teacher writes)."""
        body = {SILENCE: "silence", RESPONSE: f"response({self.qid}, {self.answer})",
                RECALL: f"recall({fmt_time(self.start)}, {fmt_time(self.end)})"}[self.kind]
        return f"<think>{self.think}</think>\n<action>{body}</action>"


def fmt_time(t: Optional[float]) -> str:
    """Seconds as the grammar writes them: ``3``, ``7.5``."""
    return "?" if t is None else f"{float(t):g}"


def silence(think: str = "") -> Action:
    return Action(SILENCE, think=think)


def response(qid: str, answer: str, think: str = "") -> Action:
    return Action(RESPONSE, think=think, qid=qid, answer=answer)


def recall(start: float, end: float, think: str = "") -> Action:
    return Action(RECALL, think=think, start=float(start), end=float(end))


def parse_action(text: str, max_think_words: int = MAX_THINK_WORDS) -> Action:
    """The decision in ``text``; grammar failures give ``Action(kind=None or the verb, reason=...)``."""
    thinks = _THINK.findall(text or "")
    actions = _ACTION.findall(text or "")
    think = thinks[0].strip() if thinks else ""
    if not actions:
        return Action(None, think=think, reason="no_action")
    if len(actions) > 1:
        return Action(None, think=think, reason="multiple_actions")
    if not thinks:
        return Action(None, reason="no_think")
    if len(thinks) > 1:
        return Action(None, think=think, reason="multiple_thinks")
    if len(think.split()) > max_think_words:
        return Action(None, think=think, reason="think_too_long")
    rest = _ACTION.sub("", _THINK.sub("", text)).strip()
    if rest:
        return Action(None, think=think, reason="extra_text")
    body = actions[0].strip()
    verb = _VERB.match(body)
    name = verb.group(1).lower() if verb else ""
    if name not in KINDS:
        return Action(None, think=think, reason="unknown_action")
    if name == SILENCE:
        return Action(SILENCE, think=think) if body.lower() == "silence" else \
            Action(SILENCE, think=think, reason="malformed_action")
    if name == RECALL:
        m = _RECALL.fullmatch(body)
        if not m:
            return Action(RECALL, think=think, reason="malformed_action")
        start, end = float(m.group(1)), float(m.group(2))
        if not (math.isfinite(start) and math.isfinite(end)):
            return Action(RECALL, think=think, reason="non_finite")
        return Action(RECALL, think=think, start=start, end=end)
    m = _RESPONSE.fullmatch(body)
    if not m:
        return Action(RESPONSE, think=think, reason="malformed_action")
    answer = m.group(2).strip()
    if not answer:
        return Action(RESPONSE, think=think, qid=m.group(1), reason="empty_answer")
    return Action(RESPONSE, think=think, qid=m.group(1), answer=answer)


def check_recall(start: float, end: float, chunk_start: float) -> Optional[str]:
    """Why a recall of ``[start, end]`` is invalid at a chunk starting at ``chunk_start`` (gamma_t), or ``None``:
    valid iff ``0 <= start <= end < chunk_start`` (specs/algorithms.md section 5, WTI setting)."""
    if start < 0:
        return "recall_negative"
    if start > end:
        return "recall_order"
    if end >= chunk_start:
        return "recall_future"
    return None


def parse_memory(text: str) -> Tuple[Optional[List[Tuple[float, float, str]]], int]:
    """``(lines, bad)``: the ``[start-end] note`` lines of the ``<memory>`` block (``None`` when there is no
    block) and how many non-empty lines did not parse (dropped; counted as ``memory_bad_line``)."""
    blocks = _MEMORY.findall(text or "")
    if not blocks:
        return None, 0
    lines, bad = [], 0
    for raw in blocks[-1].splitlines():
        if not raw.strip():
            continue
        m = _LINE.match(raw)
        if not m or not m.group(3):
            bad += 1
            continue
        a, b = float(m.group(1)), float(m.group(2))
        if not (math.isfinite(a) and math.isfinite(b)):
            bad += 1
            continue
        lines.append((a, b, m.group(3)))
    return lines, bad
