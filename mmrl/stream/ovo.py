"""OVO-Bench annotations as streams: the questions an agent gets while watching, its blocks, and the responses
it leaves for the official results layout.

Per video, every OVO item becomes a ``StreamQuestion`` (times from the official fields only, so real
``ovo_bench_new.json`` works too):

- multiple choice (BT/RT): asked at ``realtime``, answerable from it (``alpha = realtime``); gold = the letter;
- CRR: asked at ``ask_time``; probe ``type`` 1 -> "Yes" answerable from ``clue_time``, type 0 -> "No" from 0;
- REC: asked at 0 (it counts the whole video); probe ``count`` c -> "c" answerable from the c-th ``end_times``;
- SSR: one question per distinct step, asked at the item's first probe; type 1 -> "Yes" from the step's start,
  type 0 -> "No" (from the step's end when the probe comes after it, else from 0).

Question ids are local to a stream (``stream_questions``): ``q0, q1, ...`` in the order the questions arrive
(asked time, then annotation order), the same in every block of the stream, so the ids the agent sees and writes in
training are the ids it sees on held-out streams. Each question keeps its OVO handle (``source``: ``"<item id>"``,
SSR ``"<item id>:<step>"``); only ``stream_responses`` maps a local id back to it. The streaming response to a query
(``stream_responses``): a multiple-choice item reads the agent's first answer to its question; a forward probe reads
the agent's latest answer given at or before the probe's ``realtime``; no answer is ``None`` (scored 0 by the
official scorer, as a missing offline response is).
"""
from __future__ import annotations

import math
import os
from collections import OrderedDict
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from mmrl.data.schema import LETTERS, Sample
from mmrl.stream.block import StreamBlock, block_sample
from mmrl.stream.config import StreamConfig
from mmrl.stream.env import CountTokens, word_count
from mmrl.stream.record import FORWARD, AnswerEvent, EpisodeRecord, MemoryLine, Probe, StreamQuestion, answer_at

FORWARD_TASKS = ("REC", "SSR", "CRR")
BACKWARD_TASKS = ("EPM", "ASI", "HLD")


def _mode(task: str) -> str:
    return "forward" if task in FORWARD_TASKS else "backward" if task in BACKWARD_TASKS else "realtime"


def source_of(item: Mapping[str, Any], probe: Optional[int] = None) -> str:
    """The OVO handle of an item's stream question: ``"<id>"`` (SSR: ``"<id>:<step n>"`` of the probe's step)."""
    if item["task"] == "SSR" and probe is not None:
        steps = list(OrderedDict.fromkeys(p["step"] for p in item["test_info"]))
        return f"{item['id']}:{steps.index(item['test_info'][probe]['step'])}"
    return str(item["id"])


def questions_of(item: Mapping[str, Any], evidence: Optional[Sequence] = None) -> List[StreamQuestion]:
    """The stream questions of one OVO item (one, or one per SSR step), ``qid`` = ``source`` = the OVO handle
    (``stream_questions`` gives them their stream-local ids)."""
    task, mode = item["task"], _mode(item["task"])
    ev = [tuple(float(x) for x in e) for e in (evidence or [])]
    if task not in FORWARD_TASKS:
        opts = "; ".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(item["options"]))
        t = float(item["realtime"])
        return [StreamQuestion(source_of(item), task, mode, f"{item['question']} Options: {opts}. Answer with the letter.",
                               asked=t, alpha=t, gold=[LETTERS[item["gt"]]], item_id=item["id"], evidence=ev)]
    probes = item["test_info"]
    if task == "CRR":
        ps = [Probe(float(p["realtime"]), "Yes" if p["type"] == 1 else "No",
                    float(item["clue_time"]) if p["type"] == 1 else 0.0, dict(p)) for p in probes]
        text = f"{item['question']} Say No until you can tell, then Yes."
        return [StreamQuestion(source_of(item), task, mode, text, asked=float(item["ask_time"]),
                               alpha=float(item["clue_time"]), kind=FORWARD, probes=ps, item_id=item["id"],
                               evidence=[(float(item["clue_time"]), float(item["clue_time"]))])]
    if task == "REC":
        ends = sorted(float(e) for e in item["end_times"])
        ps = [Probe(float(p["realtime"]), str(int(p["count"])),
                    ends[int(p["count"]) - 1] if 0 < int(p["count"]) <= len(ends) else 0.0, dict(p)) for p in probes]
        text = f"How many times did they {item['activity']}? Give the running count whenever it changes."
        spans = list(zip([float(s) for s in item["start_times"]], [float(e) for e in item["end_times"]]))
        return [StreamQuestion(source_of(item), task, mode, text, asked=0.0, alpha=ps[0].alpha if ps else 0.0,
                               kind=FORWARD, probes=ps, item_id=item["id"], evidence=spans)]
    # SSR: one question per step
    first = min(float(p["realtime"]) for p in probes)
    steps = list(OrderedDict.fromkeys(p["step"] for p in probes))
    out = []
    for n, step in enumerate(steps):
        k = list(item["all_steps"]).index(step) if step in item.get("all_steps", []) else None
        s0 = float(item["start_time"][k]) if k is not None else 0.0
        s1 = float(item["end_time"][k]) if k is not None else math.inf
        ps = [Probe(float(p["realtime"]), "Yes" if p["type"] == 1 else "No",
                    s0 if p["type"] == 1 else (s1 if float(p["realtime"]) >= s1 else 0.0), dict(p))
              for p in probes if p["step"] == step]
        out.append(StreamQuestion(f"{item['id']}:{n}", task, mode,
                                  f"Is this step being performed now: {step}? Say Yes when it starts and No when it "
                                  f"stops.", asked=first, alpha=s0, kind=FORWARD, probes=ps, item_id=item["id"]))
    return out


def stream_questions(items: Sequence[Mapping[str, Any]], evidence: Optional[Mapping[str, Any]] = None
                     ) -> List[StreamQuestion]:
    """The questions of ONE stream (``items``: its OVO items) with local ids ``q0, q1, ...`` in arrival order
    (asked time, ties in annotation order); ``source`` keeps each one's OVO handle. ``evidence``: item id -> the
    oracle's evidence intervals. ``ValueError`` when ``items`` span more than one video."""
    videos = {it["video"] for it in items}
    if len(videos) > 1:
        raise ValueError(f"stream_questions takes one stream's items, got videos {sorted(videos)}")
    qs = [q for it in items for q in questions_of(it, (evidence or {}).get(str(it["id"])))]
    order = sorted(range(len(qs)), key=lambda i: (qs[i].asked, i))
    out = []
    for n, i in enumerate(order):
        qs[i].source, qs[i].qid = qs[i].qid, f"q{n}"
        out.append(qs[i])
    return out


def group_by_video(items: Sequence[Mapping[str, Any]]) -> "OrderedDict[str, List[Mapping[str, Any]]]":
    out: "OrderedDict[str, List[Mapping[str, Any]]]" = OrderedDict()
    for it in items:
        out.setdefault(it["video"], []).append(it)
    return out


def last_time(items: Sequence[Mapping[str, Any]]) -> float:
    """The latest question or probe time of a video's items (the stream must run at least until then)."""
    times = [float(it["realtime"]) for it in items if "realtime" in it]
    times += [float(p["realtime"]) for it in items for p in it.get("test_info", [])]
    return max(times)


def stream_blocks(video: str, items: Sequence[Mapping[str, Any]], cfg: StreamConfig, duration: float,
                  oracle: Optional[Mapping[str, Any]] = None) -> List[StreamBlock]:
    """The blocks of one stream (``block_chunks`` each; the last may be shorter), covering every question time and
    at most ``duration`` seconds; each carries all the video's questions (the environment shows them when asked).
    ``oracle`` (``mmrl.data.synth_stream``) adds chunk notes, facts and evidence for the teacher."""
    oracle = oracle or {}
    evidence = oracle.get("evidence", {})
    qs = stream_questions(items, evidence)
    n = min(int(math.floor(duration / cfg.chunk_seconds + 1e-9)),
            int(math.ceil(last_time(items) / cfg.chunk_seconds - 1e-9)))
    notes = {int(k): v for k, v in oracle.get("chunk_notes", {}).items()}
    facts = [MemoryLine(f[2], float(f[0]), float(f[1])) for f in oracle.get("facts", [])]
    return [StreamBlock(video=video, first_chunk=s, n_chunks=min(cfg.block_chunks, n - s), questions=qs,
                        facts=facts, chunk_notes=notes, stream_id=os.path.basename(video)) for s in range(0, n, cfg.block_chunks)]


def carry_over(block: StreamBlock, prev: EpisodeRecord, recalled: Sequence[int]) -> StreamBlock:
    """``block`` continuing the stream after ``prev`` (the previous block's record): its memory after compaction,
    every answer so far, the chunks recalled so far."""
    block.memory_initial = list(prev.memory_final)
    block.answers_before = list(prev.answers_before) + list(prev.answers)
    block.recalled = sorted(set(recalled))
    return block


def teacher_stream(blocks: Sequence[StreamBlock], cfg: StreamConfig, count: CountTokens = word_count
                   ) -> Tuple[List[StreamBlock], List[EpisodeRecord]]:
    """The oracle over a whole stream, block after block (each block starting from the teacher's own memory,
    answers and recalls): the blocks as a training set sees them, and the teacher's record of each."""
    from mmrl.stream.teacher import teacher_episode

    out_blocks, records, recalled = [], [], []
    prev = None
    for b in blocks:
        if prev is not None:
            b = carry_over(b, prev, recalled)
        rec = teacher_episode(None, cfg, count, block=b)
        recalled += [c for s in rec.subturns if s.recall for c in s.recall.chunks]
        out_blocks.append(b)
        records.append(rec)
        prev = rec
    return out_blocks, records


def block_samples(items: Sequence[Mapping[str, Any]], video_root: str, cfg: StreamConfig,
                  oracles: Optional[Mapping[str, Any]] = None, count: CountTokens = word_count) -> List[Sample]:
    """Training samples: every block of every stream, with the teacher's state carried in (memory, answers,
    recalls), ids ``<video>@<first chunk>``."""
    from mmrl.media.decode import probe

    out = []
    for video, its in group_by_video(items).items():
        path = os.path.join(video_root, video)
        duration = probe(path, video).duration
        blocks = stream_blocks(path, its, cfg, duration, (oracles or {}).get(video))
        for b in teacher_stream(blocks, cfg, count)[0]:
            out.append(block_sample(b, f"{os.path.splitext(video)[0]}@{b.first_chunk}"))
    return out


def stream_responses(items: Sequence[Mapping[str, Any]], answers: Sequence[AnswerEvent]) -> Dict[str, Optional[str]]:
    """Responses by OVO query id (``"<id>"`` or ``"<id>_<probe>"``) from ONE stream's answers (see the module doc):
    each answer's local id maps to its OVO item through ``stream_questions(items)`` (``items``: the stream's items,
    as its blocks were built from them)."""
    local = {q.source: q.qid for q in stream_questions(items)}
    rec = EpisodeRecord(sample_id="", chunk_s=1.0, first_chunk=0, n_chunks=0, answers=list(answers))
    out: Dict[str, Optional[str]] = {}
    for it in items:
        if it["task"] in FORWARD_TASKS:
            for j, p in enumerate(it["test_info"]):
                got = answer_at(rec, local[source_of(it, j)], float(p["realtime"]))
                out[f"{it['id']}_{j}"] = got.answer if got else None
        else:
            got = rec.answers_for(local[source_of(it)])
            out[str(it["id"])] = got[0].answer if got else None
    return out

