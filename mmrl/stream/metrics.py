"""Per-step metrics of stream episodes (``rollout.agent_loop: stream``), from each trajectory's ``EpisodeRecord``.

``stream/invalid/<reason>``: decisions (memory reasons: compactions; ``memory_bad_line``: lines) with that reason
per decision, every reason always present; ``stream/invalid_frac``: invalid decisions / decisions;
``stream/recall_frac`` and ``stream/recall_valid_frac``: recall decisions / decisions and valid ones / recall
decisions; per episode: decisions, answers, visual tokens, and the memory's tokens after compaction.
"""
from __future__ import annotations

from typing import Dict, List

from mmrl.stream.actions import RECALL, REASONS
from mmrl.stream.record import RECORD_KEY, record_of


def stream_metrics(trajs: List) -> Dict[str, float]:
    recs = [record_of(t) for t in trajs if t.turns and RECORD_KEY in t.turns[-1]]
    if not recs:
        return {}
    n = len(recs)
    subs = [s for r in recs for s in r.subturns]
    d = max(len(subs), 1)
    recalls = [s for s in subs if s.action.kind == RECALL]
    counts: Dict[str, int] = {}
    for r in recs:
        for k, v in r.invalid_counts().items():
            counts[k] = counts.get(k, 0) + v
    out = {"stream/invalid_frac": sum(not s.valid for s in subs) / d,
           "stream/recall_frac": len(recalls) / d,
           "stream/recall_valid_frac": sum(s.valid for s in recalls) / max(len(recalls), 1),
           "stream/decisions_per_episode": len(subs) / n,
           "stream/answers_per_episode": sum(len(r.answers) for r in recs) / n,
           "stream/visual_tokens_per_episode": sum(r.visual_tokens for r in recs) / n,
           "stream/memory_tokens": sum(c.tokens_post for r in recs for c in r.compactions) /
           max(sum(len(r.compactions) for r in recs), 1)}
    for reason in REASONS:
        out[f"stream/invalid/{reason}"] = counts.get(reason, 0) / d
    return out
