"""The two time rules of a streaming episode's answers, shared by the environment (``mmrl.stream.record``) and the
Stream-GDPO rewards (``mmrl.rewards.stream``), which sit below it in the import layers.

- causality (specs/algorithms.md section 5, R_out): an answer counts only when given at ``time >= alpha``, the
  question's answerable time;
- a forward probe at ``time`` reads the latest answer given at or before ``time``.
"""
from __future__ import annotations


def causal(answer_time: float, alpha: float) -> bool:
    """An answer counts only when given at or after the answerable time: ``answer_time >= alpha``."""
    return float(answer_time) >= float(alpha)


def answer_at(record, qid: str, time: float):
    """The latest answer to ``qid`` given at or before ``time`` (what a forward probe at ``time`` reads);
    ``record`` is anything with ``answers_for(qid)`` in time order (``mmrl.stream.record.EpisodeRecord``)."""
    got = [a for a in record.answers_for(qid) if a.time <= time]
    return got[-1] if got else None
