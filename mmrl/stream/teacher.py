"""The world's oracle: ideal decisions, recalls and memory lines for a stream block (masked-SFT targets, and the
teacher recalls of the Stream-GDPO tool reward, specs/algorithms.md section 5).

``oracle_text(env)`` decides from what the world knows (``StreamBlock``: the questions with their gold answers,
answerable times and evidence, ``chunk_notes`` and ``facts``), never from pixels:

- think: the chunk's note (``chunk_notes[k]``), cut to the think budget;
- a forward question whose answer changed by now (its latest probe with ``alpha <= now``) is answered first
  (answer when the event happens), then open choice questions with ``alpha <= now`` in order;
- a choice question whose evidence began before the window the episode shows is first recalled
  (``recall(s, e)``, the end pulled inside the rule ``e < chunk start``), then answered at the same time;
- otherwise silence; at the boundary the memory is the world's facts observed so far, within the budget.

``teacher_episode`` runs these decisions through the real ``StreamEnvironment`` (so every teacher action obeys
the environment's rules) and returns its record; ``teacher_texts`` lists its model turns, which
``mmrl.stream.loop.teacher_trajectory`` renders as a multi-turn SFT trajectory.
"""
from __future__ import annotations

from typing import List, Optional

from mmrl.data.schema import Sample
from mmrl.stream.actions import recall, response, silence
from mmrl.stream.block import StreamBlock
from mmrl.stream.config import StreamConfig
from mmrl.stream.env import CountTokens, StreamEnvironment, fit_budget, word_count
from mmrl.stream.record import CHOICE, EpisodeRecord, StreamQuestion, answer_at, render_memory


def forward_target(q: StreamQuestion, now: float) -> Optional[str]:
    """The answer a forward question has by ``now``: the gold of its latest probe whose ``alpha <= now``."""
    ready = [p for p in q.probes if p.alpha <= now]
    return str(max(ready, key=lambda p: (p.alpha, p.time)).gold) if ready else None


def _think(env: StreamEnvironment) -> str:
    note = env.block.chunk_notes.get(env.k, "nothing new")
    return " ".join(note.split()[: env.cfg.max_think_words])


def oracle_text(env: StreamEnvironment) -> str:
    """The oracle's model turn for the environment's current decision (or its compaction)."""
    cfg, block, rec = env.cfg, env.block, env.record
    if env.k > block.last_chunk:
        facts = [f for f in block.facts if f.end <= env.chunk_start]
        return "<memory>\n" + render_memory(fit_budget(facts, cfg.memory_budget, env.count)) + "\n</memory>"
    think, now = _think(env), env.now
    for q in rec.questions:
        if q.kind == CHOICE or q.asked > now:
            continue
        target, last = forward_target(q, now), answer_at(rec, q.qid, now)
        if target is not None and (last is None or last.answer != target):
            return response(q.qid, target, think).render()
    answered = {a.qid for a in rec.answers_before + rec.answers}
    shown_from = max(0, block.first_chunk - cfg.carry_chunks) * cfg.chunk_seconds
    for q in rec.questions:
        if q.kind != CHOICE or q.qid in answered or q.asked > now or q.alpha > now:
            continue
        if env.sub < cfg.max_recalls_per_chunk:
            for s, e in q.evidence:
                chunks = {int(s // cfg.chunk_seconds)}
                if s < shown_from and not chunks <= env.state.memory.recalled:
                    end = e if e < env.chunk_start else max(s, env.chunk_start - cfg.chunk_seconds / 2)
                    return recall(s, end, think).render()
        return response(q.qid, q.gold[0], think).render()
    return silence(think).render()


def teacher_episode(sample: Optional[Sample], cfg: StreamConfig, count_tokens: CountTokens = word_count,
                    block: Optional[StreamBlock] = None) -> EpisodeRecord:
    """The oracle's episode on ``sample``'s block (or ``block``), run through the real environment."""
    env = StreamEnvironment(cfg, count_tokens, block=block)
    env.reset(sample, None)
    for _ in range(cfg.max_turns):
        if env.step(oracle_text(env)) is None:
            break
    env.record.teacher = True
    return env.record


def teacher_texts(record: EpisodeRecord) -> List[str]:
    """The teacher's model turns in order: every decision, then the compaction."""
    return [s.text for s in record.subturns] + [c.text for c in record.compactions]
