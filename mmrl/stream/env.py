"""The streaming environment: one block of a video stream as a ``multi_turn`` episode (WTI setting,
specs/algorithms.md section 5; docs/streaming.md).

``reset`` shows the memory the block starts from, the window before the block plus its first chunk (one video),
and the questions asked so far. Then each model turn is one decision (``mmrl.stream.actions``): ``silence`` and
``response(q, y)`` move to the next chunk (whose frames, and any question arriving with it, are the next
observation); a valid ``recall(s, e)`` returns up to 4 archived chunks (``mmrl.tools.memory.memory_recall``: each
at most once) and asks again at the same time. An invalid action moves on too: the next observation says why and
``EpisodeRecord.invalid_counts`` counts it; nothing in the model's text can raise. After the block's last chunk
the controller boundary asks the model to rewrite its memory (the kept lines plus the block's think updates, each
with its chunk's range) within the token budget; the budget is enforced by dropping the oldest lines; the episode
then ends. ``self.record`` holds everything (``mmrl.stream.record``).
"""
from __future__ import annotations

import copy
from typing import Callable, List, Optional

from mmrl.data.schema import Media, Sample
from mmrl.rollout.agent_loop import Environment, Observation
from mmrl.stream.actions import RECALL, RESPONSE, Action, check_recall, fmt_time, parse_action, parse_memory
from mmrl.stream.block import StreamBlock, block_of, decode_chunks, join_chunks
from mmrl.stream.config import StreamConfig
from mmrl.stream.record import (CHOICE, AnswerEvent, Compaction, EpisodeRecord, MemoryLine, Recall, StreamQuestion,
                                SubTurn, render_memory)
from mmrl.tools.episode import EpisodeState, StreamMemory, ToolBudget, media_tokens
from mmrl.tools.memory import memory_recall
from mmrl.tools.registry import ToolError

CountTokens = Callable[[str], int]


def word_count(text: str) -> int:
    """Fallback token counter (whitespace words) when no tokenizer is given."""
    return len(text.split())


def fit_budget(lines: List[MemoryLine], budget: int, count: CountTokens) -> List[MemoryLine]:
    """``lines`` in time order with the oldest dropped until the rendered memory has at most ``budget`` tokens."""
    kept = sorted(lines, key=lambda m: (m.start, m.end))
    while kept and count(render_memory(kept)) > budget:
        kept.pop(0)
    return kept


def intro(cfg: StreamConfig) -> str:
    return (f"You watch a video stream in {cfg.chunk_seconds:g}-second chunks. After each chunk write "
            f"<think>a short note</think> then one <action>: silence | response(question id, answer) | "
            f"recall(start, end) to see earlier seconds again (then decide again).\n")


class StreamEnvironment(Environment):
    """One block of one stream. ``count_tokens`` measures the memory budget (the processor's tokenizer)."""

    def __init__(self, cfg: StreamConfig, count_tokens: CountTokens = word_count,
                 block: Optional[StreamBlock] = None, factor: int = 28):
        self.cfg, self.count = cfg, count_tokens
        self.factor = factor  # the model's resize factor: frames are decoded to multiples of it (32: Qwen3-VL)
        self.fixed_block = block
        self.record: Optional[EpisodeRecord] = None

    # ---- episode -------------------------------------------------------------------------------------------------
    def reset(self, sample: Optional[Sample], media: Optional[Media]) -> Observation:
        block = self.fixed_block or block_of(sample)
        self.block, self.sid = block, (sample.id if sample is not None else block.stream_id or "stream")
        cs = self.cfg.chunk_seconds
        chunks = decode_chunks(block.video, self.cfg, block.last_chunk, self.sid, self.factor)
        self.state = EpisodeState(sample=sample, media=None, budget=ToolBudget(max_calls=10 ** 6),
                                  memory=StreamMemory(chunks=chunks, current=block.first_chunk,
                                                      recalled=set(block.recalled)))
        self.k, self.sub, self.shown, self.error = block.first_chunk, 0, set(), ""
        self.thinks: List[MemoryLine] = []
        self.record = EpisodeRecord(sample_id=self.sid, chunk_s=cs, first_chunk=block.first_chunk,
                                    n_chunks=block.n_chunks, questions=copy.deepcopy(block.questions),
                                    memory_initial=list(block.memory_initial), facts=list(block.facts),
                                    answers_before=list(block.answers_before))
        lo = max(0, block.first_chunk - self.cfg.carry_chunks)
        video = join_chunks(chunks[lo:block.first_chunk + 1], self.sid)
        memory = render_memory(block.memory_initial) or "(empty)"
        prefix = (intro(self.cfg) + f"Memory:\n{memory}\nTime {fmt_time(self.now)} s. Chunks "
                  f"{fmt_time(lo * cs)}-{fmt_time(self.now)} s:")
        return self._show(Observation(prefix=prefix, media=video, text=self._news() + "Decide."))

    @property
    def now(self) -> float:
        return (self.k + 1) * self.cfg.chunk_seconds

    @property
    def chunk_start(self) -> float:
        return self.k * self.cfg.chunk_seconds

    def step(self, model_text: str) -> Optional[Observation]:
        self.record.forward_passes += 1
        if self.k > self.block.last_chunk:
            self._compact(model_text)
            return None
        action = parse_action(model_text, self.cfg.max_think_words)
        turn = SubTurn(time=self.now, chunk=self.k, chunk_start=self.chunk_start, sub=self.sub, text=model_text,
                       action=action, reason=action.reason, active=[q.qid for q in self._active()])
        self.record.subturns.append(turn)
        if action.think and action.reason not in ("no_think", "multiple_thinks"):
            self.thinks.append(MemoryLine(action.think, self.chunk_start, self.now))
        obs = None
        if turn.valid and action.kind == RESPONSE:
            self._respond(turn)
        elif turn.valid and action.kind == RECALL:
            obs = self._recall(turn)
        if obs is not None:
            self.sub += 1
            return self._show(obs)
        self.error = f"Your last action was invalid ({turn.reason}). " if turn.reason else ""
        return self._advance()

    # ---- actions -------------------------------------------------------------------------------------------------
    def _respond(self, turn: SubTurn) -> None:
        a = turn.action
        try:
            q = self.record.question(a.qid)
        except KeyError:
            turn.reason = "unknown_question"
            return
        if q.asked > self.now:
            turn.reason = "question_not_active"
            return
        self.record.answers.append(AnswerEvent(q.qid, a.answer, self.now, self.k))

    def _recall(self, turn: SubTurn) -> Optional[Observation]:
        a: Action = turn.action
        turn.reason = check_recall(a.start, a.end, self.chunk_start)
        if turn.reason is None and self.sub >= self.cfg.max_recalls_per_chunk:
            turn.reason = "recall_limit"
        if turn.reason is not None:
            return None
        # memory_recall takes [start, end) overlaps; a point recall asks for the chunk holding it
        end = a.end if a.end > a.start else a.start + 1e-6
        try:
            out = memory_recall(self.state, start=a.start, end=end)
        except ToolError:
            turn.reason = "recall_nothing_new"
            return None
        turn.recall = Recall(a.start, a.end, list(out.info["chunks"]), [tuple(x) for x in out.info["intervals"]])
        spans = ", ".join(f"{fmt_time(s)}-{fmt_time(e)} s" for s, e in turn.recall.intervals)
        return Observation(prefix=f"Recalled {spans}:", media=out.media,
                           text=f"Decide again at {fmt_time(self.now)} s.")

    def _advance(self) -> Observation:
        self.k, self.sub = self.k + 1, 0
        self.state.memory.current = self.k
        if self.k > self.block.last_chunk:
            pre = list(self.record.memory_initial) + self.thinks
            self.pre = pre
            return Observation(text=f"{self.error}Controller boundary at {fmt_time(self.chunk_start)} s. Memory "
                                    f"before compaction:\n{render_memory(pre) or '(empty)'}\nRewrite it as "
                                    f"<memory></memory> with one line per fact, [start-end] note, at most "
                                    f"{self.cfg.memory_budget} tokens.")
        chunk = self.state.memory.chunks[self.k][2]
        return self._show(Observation(prefix=f"{self.error}Time {fmt_time(self.now)} s:", media=chunk,
                                      text=self._news() + "Decide."))

    def _compact(self, text: str) -> None:
        lines, bad = parse_memory(text)
        reason = None
        if lines is None:
            reason, post = "no_memory", list(self.pre)
        else:
            post = [MemoryLine(note, s, e) for s, e, note in lines]
        kept = fit_budget(post, self.cfg.memory_budget, self.count)
        if len(kept) < len(post) and reason is None:
            reason = "memory_over_budget"
        self.record.compactions.append(Compaction(
            time=self.chunk_start, chunk=self.k, pre=self.pre, post=kept, text=text, reason=reason, bad_lines=bad,
            dropped=len(post) - len(kept), tokens_pre=self.count(render_memory(self.pre)),
            tokens_post=self.count(render_memory(kept)), budget=self.cfg.memory_budget))

    # ---- helpers -------------------------------------------------------------------------------------------------
    def _active(self) -> List[StreamQuestion]:
        """Questions asked by now and still open (a choice question closes with its first answer)."""
        answered = {a.qid for a in self.record.answers_before + self.record.answers}
        out = []
        for q in self.record.questions:
            if q.asked > self.now or (q.kind == CHOICE and q.qid in answered):
                continue
            if q.probes and max(p.time for p in q.probes) < self.chunk_start:
                continue
            out.append(q)
        return out

    def _news(self) -> str:
        """The open questions not shown yet in this episode (those that arrive now; at a block's start also those
        asked before it and still open)."""
        new = [q for q in self._active() if q.qid not in self.shown]
        self.shown.update(q.qid for q in new)
        return "".join(f"\nQuestion {q.qid}: {q.text}\n" for q in new)

    def _show(self, obs: Observation) -> Observation:
        if obs.media is not None:
            self.record.visual_tokens += media_tokens(obs.media, self.factor)
        return obs
