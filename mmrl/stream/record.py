"""What one streaming episode did, as plain dataclasses: the input of the Stream-GDPO rewards and of the eval.

Times are seconds since the stream began. Chunk ``k`` covers ``[k * chunk_s, (k + 1) * chunk_s)``; a decision on
chunk ``k`` happens at ``time = (k + 1) * chunk_s`` (the chunk has been received) and its recall bound is the
chunk's start ``chunk_start = k * chunk_s`` (gamma_t). A question is answerable from ``alpha`` (alpha_q): an answer
counts only when given at ``time >= alpha`` (``causal``; specs/algorithms.md section 5, R_out's causality check).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from mmrl.data.stream_rules import answer_at, causal  # noqa: F401  (re-exported: the env, teacher and tests use them from here)
from mmrl.stream.actions import Action, fmt_time

CHOICE, FORWARD = "choice", "forward"


@dataclass
class MemoryLine:
    """One memory line: a note about the source time range ``[start, end]`` seconds."""

    note: str
    start: float
    end: float

    def render(self) -> str:
        return f"[{fmt_time(self.start)}-{fmt_time(self.end)}] {self.note}"

    def range_valid(self, now: float) -> bool:
        """Ordered and inside the observed prefix: ``0 <= start <= end <= now``."""
        return 0.0 <= self.start <= self.end <= now


def render_memory(lines: List[MemoryLine]) -> str:
    return "\n".join(line.render() for line in lines)


@dataclass
class Recall:
    """A recall that ran: the asked range and the archived chunks it returned (each at most once per episode)."""

    start: float
    end: float
    chunks: List[int] = field(default_factory=list)
    intervals: List[Tuple[float, float]] = field(default_factory=list)


@dataclass
class SubTurn:
    """One decision: at chunk ``chunk`` (``sub`` > 0: the k-th re-decision after a recall at the same time)."""

    time: float
    chunk: int
    chunk_start: float
    sub: int
    text: str
    action: Action
    reason: Optional[str] = None  # grammar or environment reason; None: valid
    recall: Optional[Recall] = None  # the recall that ran (valid recalls only)
    active: List[str] = field(default_factory=list)  # question ids asked and not closed at this decision

    @property
    def valid(self) -> bool:
        return self.reason is None


@dataclass
class Compaction:
    """A controller boundary: the memory before (``pre``: kept lines plus the block's think updates, each with its
    chunk's range) and after the model's rewrite (``post``, within ``budget`` tokens)."""

    time: float
    chunk: int
    pre: List[MemoryLine]
    post: List[MemoryLine]
    text: str = ""
    reason: Optional[str] = None  # no_memory (no block: pre is kept, cut to the budget), memory_over_budget ...
    bad_lines: int = 0  # lines that did not parse (dropped)
    dropped: int = 0  # oldest lines dropped to meet the budget
    tokens_pre: int = 0
    tokens_post: int = 0
    budget: int = 0

    @property
    def valid(self) -> bool:
        return self.reason is None and self.bad_lines == 0


@dataclass
class AnswerEvent:
    qid: str
    answer: str
    time: float
    chunk: int


@dataclass
class Probe:
    """A forward question's check point (OVO ``test_info`` entry): the answer expected at ``time``."""

    time: float
    gold: Any
    alpha: float  # from when the gold answer is answerable (the event's time; 0 for "not yet")
    info: Dict[str, Any] = field(default_factory=dict)  # the probe's own fields (count, type, step ...)


@dataclass
class StreamQuestion:
    """A question of the stream: asked at ``asked`` (it arrives with the first decision at or after it), answerable
    from ``alpha``; ``qid`` is local to the stream (``q0, q1, ...`` in arrival order, ``mmrl.stream.ovo``); ``gold``
    is the accepted answers (letters, numbers, Yes/No); forward questions have ``probes``."""

    qid: str
    task: str
    mode: str  # backward | realtime | forward (OVO-Bench modes)
    text: str  # what the agent is asked
    asked: float
    alpha: float
    gold: List[str] = field(default_factory=list)
    kind: str = CHOICE  # choice: answered once; forward: the latest answer at each probe counts
    probes: List[Probe] = field(default_factory=list)
    evidence: List[Tuple[float, float]] = field(default_factory=list)  # source intervals (teacher recall, coverage)
    item_id: Any = None  # the OVO item id
    source: str = ""  # the OVO handle a stream-local qid maps back to: "<item id>" (SSR "<item id>:<step>")
    facts: List[str] = field(default_factory=list)  # salient facts a memory should keep (S_keep)


@dataclass
class EpisodeRecord:
    """One stream episode (a block of chunks between two controller boundaries, or a whole eval stream)."""

    sample_id: str
    chunk_s: float
    first_chunk: int
    n_chunks: int
    questions: List[StreamQuestion] = field(default_factory=list)
    memory_initial: List[MemoryLine] = field(default_factory=list)
    subturns: List[SubTurn] = field(default_factory=list)
    compactions: List[Compaction] = field(default_factory=list)
    answers: List[AnswerEvent] = field(default_factory=list)  # given in this episode
    answers_before: List[AnswerEvent] = field(default_factory=list)  # given by earlier blocks of the same stream
    teacher: bool = False  # written by the world's oracle (teacher_episode)
    teacher_actions: List[SubTurn] = field(default_factory=list)  # the oracle's decisions on the same block
    facts: List[MemoryLine] = field(default_factory=list)  # the oracle's salient facts (S_keep), with ranges
    end: str = ""  # why it stopped: done | max_turns | max_total_tokens
    visual_tokens: int = 0  # visual tokens the environment showed (window, chunks, recalled frames)
    forward_passes: int = 0  # model turns (one generate per decision or compaction)

    # ---- views the rewards and the eval read ---------------------------------------------------------------------
    def question(self, qid: str) -> StreamQuestion:
        for q in self.questions:
            if q.qid == qid:
                return q
        raise KeyError(f"{self.sample_id}: no question {qid!r} (known: {', '.join(q.qid for q in self.questions)})")

    def answers_for(self, qid: str, earlier: bool = True) -> List[AnswerEvent]:
        """Answers to ``qid`` in time order; ``earlier``: with those of the stream's earlier blocks."""
        return [a for a in (self.answers_before if earlier else []) + self.answers if a.qid == qid]

    def invalid_counts(self) -> Dict[str, int]:
        """Reason -> count over sub-turns and compactions (``memory_bad_line`` counts lines)."""
        out: Dict[str, int] = {}
        for s in self.subturns:
            if s.reason:
                out[s.reason] = out.get(s.reason, 0) + 1
        for c in self.compactions:
            if c.reason:
                out[c.reason] = out.get(c.reason, 0) + 1
            if c.bad_lines:
                out["memory_bad_line"] = out.get("memory_bad_line", 0) + c.bad_lines
        return out

    def recalls(self) -> List[SubTurn]:
        return [s for s in self.subturns if s.action.kind == "recall"]

    @property
    def memory_final(self) -> List[MemoryLine]:
        return self.compactions[-1].post if self.compactions else list(self.memory_initial)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: Dict[str, Any]) -> "EpisodeRecord":
        def line(x):
            return MemoryLine(**x)

        def sub(x):
            x = dict(x)
            x["action"] = Action(**x["action"])
            x["recall"] = Recall(**x["recall"]) if x.get("recall") else None
            return SubTurn(**x)

        def ques(x):
            x = dict(x)
            x["probes"] = [Probe(**p) for p in x.get("probes", [])]
            x["evidence"] = [tuple(e) for e in x.get("evidence", [])]
            return StreamQuestion(**x)

        d = dict(d)
        d["questions"] = [ques(q) for q in d.get("questions", [])]
        d["memory_initial"] = [line(x) for x in d.get("memory_initial", [])]
        d["facts"] = [line(x) for x in d.get("facts", [])]
        d["subturns"] = [sub(s) for s in d.get("subturns", [])]
        d["teacher_actions"] = [sub(s) for s in d.get("teacher_actions", [])]
        d["compactions"] = [Compaction(**{**c, "pre": [line(x) for x in c["pre"]], "post": [line(x) for x in c["post"]]})
                            for c in d.get("compactions", [])]
        d["answers"] = [AnswerEvent(**a) for a in d.get("answers", [])]
        d["answers_before"] = [AnswerEvent(**a) for a in d.get("answers_before", [])]
        return EpisodeRecord(**d)


# ---- causality (R_out's verifier, specs/algorithms.md section 5) -------------------------------------------------
def first_causal_answer(record: EpisodeRecord, qid: str) -> Optional[AnswerEvent]:
    """The first answer to ``qid`` given at or after its ``alpha`` (a choice question's scored answer)."""
    q = record.question(qid)
    return next((a for a in record.answers_for(qid) if causal(a.time, q.alpha)), None)


RECORD_KEY = "stream_record"  # the trajectory turn key under which the stream loop keeps its EpisodeRecord


def record_of(trajectory) -> EpisodeRecord:
    """The ``EpisodeRecord`` of a ``stream`` trajectory (kept on its last turn)."""
    for turn in reversed(trajectory.turns):
        if RECORD_KEY in turn:
            return turn[RECORD_KEY]
    raise KeyError(f"trajectory of {trajectory.sample_id} holds no stream record (not from the 'stream' loop)")
