"""Stream-GDPO's four rewards of one streaming rollout (WTI, arXiv 2609.37035; specs/algorithms.md §5), read from
the episode's ``EpisodeRecord`` (``mmrl.stream.record``).

Per question q of the episode (those active at one of its decisions at least; q's *decision interval* is the
sub-turns at which q is active):

- ``R_out^q = max_{y ∈ V_q} 1[match(ŷ_q, y)]`` with causality: ŷ_q is q's first answer, and it counts only when
  given at or after α_q (``mmrl.data.stream_rules.causal``). A forward question (``probes``) scores the mean over its
  probes inside the episode of the same test on the latest answer at the probe's time, against the probe's gold
  and α. ``match``: case-insensitive equality after stripping spaces, brackets and trailing punctuation; numbers
  compare as numbers.
- ``R_fmt^q = 1`` when every decision in q's interval follows the action grammar (``Action.valid``), else 0.
- ``R_tool^q = ℓ_q · u_q · R_out^q``: ℓ_q = 1 when the teacher (``record.teacher_actions``) recalls in q's decision
  interval, u_q = 1 when the rollout makes a syntactically and temporally valid recall there (``SubTurn.valid``).
- R_out, R_fmt and R_tool are averaged over the questions; an episode without a question scores R_out = R_tool = 0
  and R_fmt = the fraction of its decisions that follow the grammar (our reading; the paper defines them per q).
  A forward probe reads the stream's latest answer, including those carried in from the stream's earlier blocks
  (``record.answers_before``), as the streaming eval does: staying silent while the answer holds is rewarded.
- ``R_mem``: ½[ΔS_time + ΔS_keep] of each compaction, averaged over the episode's compactions
  (``mmrl.rewards.stream_memory``), with the oracle's salient facts (``record.facts``: note + range) as the teacher
  evidence intervals and facts; the facts seen by the compaction's time only.

Registered reward ``stream``: one call returns ``stream_out``, ``stream_fmt``, ``stream_tool``, ``stream_mem`` and
``stream`` = Σ_c w_c R_c (w = 1, 1, 0.5, 0.5 by default), which alone enters the run's total (GRPO on the sum);
Stream-GDPO (``mmrl.algos.stream_gdpo``) normalises the four components instead.
"""
from __future__ import annotations

import math
import re
from typing import Dict, List, Optional

from mmrl.data.stream_rules import answer_at, causal
from mmrl.rewards.base import REWARDS, RewardContext
from mmrl.rewards.stream_memory import compaction_reward

COMPONENTS = ("out", "fmt", "tool", "mem")
DEFAULT_WEIGHTS = {"out": 1.0, "fmt": 1.0, "tool": 0.5, "mem": 0.5}
_STRIP = re.compile(r"^[\s\(\[\"']+|[\s\)\]\"'.,;:!]+$")


def _norm(text: str) -> str:
    return _STRIP.sub("", str(text)).casefold()


def match(pred: Optional[str], gold: List[str]) -> bool:
    """``pred`` equals one accepted answer (module docstring)."""
    if pred is None:
        return False
    p = _norm(pred)
    for g in gold:
        g = _norm(g)
        if p == g:
            return True
        try:
            a, b = float(p), float(g)
        except ValueError:
            continue
        if math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-6 * max(1.0, abs(b)):
            return True
    return False


def _in_episode(rec, t: float) -> bool:
    lo = rec.first_chunk * rec.chunk_s
    return lo < t <= (rec.first_chunk + rec.n_chunks) * rec.chunk_s + 1e-9


def outcome(rec, q) -> float:
    """R_out^q with the causality check (module docstring)."""
    if q.probes:
        probes = [p for p in q.probes if _in_episode(rec, p.time)]
        if not probes:
            return 0.0
        hits = 0
        for p in probes:
            a = answer_at(rec, q.qid, p.time)
            hits += bool(a is not None and causal(a.time, p.alpha) and match(a.answer, [str(p.gold)]))
        return hits / len(probes)
    got = rec.answers_for(q.qid)
    if not got:
        return 0.0
    first = got[0]
    return float(causal(first.time, q.alpha) and match(first.answer, [str(g) for g in q.gold]))


def _interval(subturns, qid: str):
    return [s for s in subturns if qid in s.active]


def questions_scored(rec) -> list:
    """The episode's questions that were active at one of its decisions at least."""
    return [q for q in rec.questions if _interval(rec.subturns, q.qid)]


def memory_reward(rec) -> float:
    """Mean over compactions of ½[ΔS_time + ΔS_keep]; 0 without a compaction."""
    if not rec.compactions:
        return 0.0
    vals = []
    for c in rec.compactions:
        pre = [(ln.note, ln.start, ln.end) for ln in c.pre]
        post = [(ln.note, ln.start, ln.end) for ln in c.post]
        facts = [f for f in rec.facts if f.start < c.time]
        vals.append(compaction_reward(pre, post, c.time, [(f.start, f.end) for f in facts],
                                      [f.note for f in facts if f.end <= c.time]))
    return sum(vals) / len(vals)


def recall_credit(rec, q) -> float:
    """ℓ_q · u_q: the teacher recalls in q's decision interval and the rollout makes a valid recall there
    (R_tool^q = ℓ_q · u_q · R_out^q)."""
    teacher = any(s.action.kind == "recall" for s in _interval(rec.teacher_actions, q.qid))
    used = any(s.action.kind == "recall" and s.valid for s in _interval(rec.subturns, q.qid))
    return float(teacher) * float(used)


def mean_recall_credit(rec) -> float:
    """ℓ_q · u_q averaged over the episode's scored questions (0 without one)."""
    qs = questions_scored(rec)
    return sum(recall_credit(rec, q) for q in qs) / len(qs) if qs else 0.0


def stream_components(rec) -> Dict[str, float]:
    """``{out, fmt, tool, mem}`` of one episode (module docstring)."""
    qs = questions_scored(rec)
    if not qs:
        n = len(rec.subturns)
        fmt = sum(s.action.valid for s in rec.subturns) / n if n else 0.0
        return {"out": 0.0, "fmt": fmt, "tool": 0.0, "mem": memory_reward(rec)}
    out = fmt = tool = 0.0
    for q in qs:
        r_out = outcome(rec, q)
        out += r_out
        fmt += float(all(s.action.valid for s in _interval(rec.subturns, q.qid)))
        tool += recall_credit(rec, q) * r_out
    n = len(qs)
    return {"out": out / n, "fmt": fmt / n, "tool": tool / n, "mem": memory_reward(rec)}


RECORD_KEY = "stream_record"  # where mmrl.stream.loop keeps the episode record (its RECORD_KEY; a test checks)


def record_of(ctx: RewardContext):
    """The episode record the ``stream`` loop attached to the trajectory's last turn (``mmrl.stream.loop.record_of``)."""
    rec = next((t[RECORD_KEY] for t in reversed(ctx.trajectory.turns) if isinstance(t, dict) and RECORD_KEY in t), None)
    if rec is None:
        raise ValueError(f"sample '{ctx.sample.id}': the 'stream' reward needs a streaming rollout "
                         f"(rollout.agent_loop: stream); this trajectory has no episode record")
    return rec


def component_weights(weights: Optional[Dict[str, float]] = None) -> Dict[str, float]:
    """``DEFAULT_WEIGHTS`` updated by ``weights``; a ``ValueError`` names a key that is not a component."""
    w = dict(DEFAULT_WEIGHTS)
    for k, v in (weights or {}).items():
        if k not in COMPONENTS:
            raise ValueError(f"stream reward: weights.{k} is not a component; components: {', '.join(COMPONENTS)}")
        w[k] = float(v)
    return w


@REWARDS.register("stream")
def stream(ctx: List[RewardContext], weights: Optional[Dict[str, float]] = None) -> Dict[str, List[float]]:
    """The four components per rollout plus their weighted sum ``stream`` (the total; module docstring)."""
    w = component_weights(weights)
    rows = [stream_components(record_of(c)) for c in ctx]
    res = {f"stream_{k}": [r[k] for r in rows] for k in COMPONENTS}
    res["stream"] = [sum(w[k] * r[k] for k in COMPONENTS) for r in rows]
    return res
