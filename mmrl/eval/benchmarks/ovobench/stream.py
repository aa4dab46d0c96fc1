"""OVO-Bench run as a stream (``mmrl eval ovobench --streaming``), beside the offline protocol.

Streaming protocol: per video, ONE pass of the ``stream`` agent loop (``mmrl.stream``; settings in
``tools/streaming.yaml``): block after block of 1-second chunks, each block one multi-turn episode that starts from
the previous block's compacted memory, with every question shown when its time comes; greedy decoding. The agent's
answers (to stream-local question ids ``q0, q1, ...``) become responses by OVO query id
(``mmrl.stream.ovo.stream_responses``, per video: a local id maps back to its item; a multiple-choice item reads the
first answer to it, a forward probe the latest answer at or before its ``realtime``, none -> ``None``), assembled in the
official results layout and scored by the official scorer (``mmrl.eval.benchmarks.ovobench.score``), exactly as the offline
run's responses are.

Cost per query (an OVO query: a multiple-choice item or a forward probe), for both protocols:

- ``model_turns``: generate calls (offline: one per query; streaming: one per decision and compaction);
- ``visual_tokens_shown``: visual tokens of new media entering a context (offline: the prefix's frames, per query;
  streaming: the window, each chunk once, recalled frames);
- ``visual_tokens_prefilled``: visual tokens the vision tower and prefill process (offline = shown; streaming:
  every turn re-prefills its episode's context, as the multi-turn loop keeps no KV cache across turns).

Resumable: each finished video is one line of ``stream_records.jsonl``; a rerun skips the videos there.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from mmrl.data.schema import Trajectory
from mmrl.eval.benchmark_def import BenchmarkDef
from mmrl.eval.driver import check_run, repair_jsonl
from mmrl.eval.benchmarks.ovobench.protocol import assemble_results
from mmrl.eval.benchmarks.ovobench.score import score_results
from mmrl.eval.report import append_jsonl, read_jsonl  # noqa: F401  (read_jsonl: for callers reading the records)
from mmrl.media.decode import probe
from mmrl.rollout.base import SamplingParams
from mmrl.stream.block import block_sample
from mmrl.stream.config import StreamConfig
from mmrl.stream.loop import StreamLoop, record_of
from mmrl.stream.ovo import carry_over, group_by_video, stream_blocks, stream_responses
from mmrl.stream.record import AnswerEvent, EpisodeRecord

RECORDS = "stream_records.jsonl"
RESULTS = "results.json"


def prefilled_visual_tokens(t: Trajectory) -> int:
    """Visual tokens in the context of each model turn, summed over the turns (no KV cache across turns)."""
    seq = t.sequence
    ctx = int((seq.mm_token_type_ids[: seq.prompt_len] != 0).sum())
    total = 0
    for s in t.segments:
        if s.kind == "model":
            total += ctx
        elif s.mm_token_type_ids is not None:
            ctx += int((s.mm_token_type_ids != 0).sum())
    return total


def _video_result(video: str, records: List[EpisodeRecord], prefilled: int) -> Dict[str, Any]:
    return {"video": video, "blocks": len(records),
            "answers": [a.__dict__ for r in records for a in r.answers],
            "model_turns": sum(r.forward_passes for r in records),
            "visual_tokens_shown": sum(r.visual_tokens for r in records),
            "visual_tokens_prefilled": prefilled,
            "invalid": _sum_counts([r.invalid_counts() for r in records]),
            "decisions": sum(len(r.subturns) for r in records),
            "invalid_decisions": sum(not s.valid for r in records for s in r.subturns),
            "recalls": sum(1 for r in records for s in r.subturns if s.recall),
            "records": [r.to_dict() for r in records]}


def _sum_counts(counts: Sequence[Mapping[str, int]]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


def run_streams(items: Sequence[Mapping[str, Any]], video_root: str, cfg: StreamConfig, processor, engine,
                out_dir: Path, batch: int = 8) -> Dict[str, Dict[str, Any]]:
    """Run every video of ``items`` as one stream (videos in batches of ``batch``, block by block); returns the
    per-video results (``stream_records.jsonl``, resumed by video)."""
    path = Path(out_dir) / RECORDS
    repair_jsonl(path)
    done = {r["video"]: r for r in read_jsonl(path)} if path.exists() else {}
    loop = StreamLoop(processor, cfg, with_teacher=False)
    params = SamplingParams(greedy=True, max_new_tokens=cfg.max_new_tokens)
    videos = [(v, its) for v, its in group_by_video(items).items() if v not in done]
    for start in range(0, len(videos), max(1, batch)):
        group = videos[start:start + max(1, batch)]
        plans = []
        for v, its in group:
            p = os.path.join(video_root, v)
            plans.append(stream_blocks(p, its, cfg, probe(p, v).duration))
        recs: List[List[EpisodeRecord]] = [[] for _ in group]
        recalled: List[List[int]] = [[] for _ in group]
        prefilled = [0] * len(group)
        for b in range(max(len(p) for p in plans)):
            todo = [i for i, p in enumerate(plans) if b < len(p)]
            samples = []
            for i in todo:
                blk = plans[i][b] if b == 0 else carry_over(plans[i][b], recs[i][-1], recalled[i])
                samples.append(block_sample(blk, f"{group[i][0]}@{blk.first_chunk}"))
            for i, t in zip(todo, loop.run_samples(engine, samples, params)):
                rec = record_of(t)
                recs[i].append(rec)
                recalled[i] += [c for s in rec.subturns if s.recall for c in s.recall.chunks]
                prefilled[i] += prefilled_visual_tokens(t)
        for i, (v, _) in enumerate(group):
            done[v] = _video_result(v, recs[i], prefilled[i])
            append_jsonl(path, done[v])
    return done


def stream_cost(results: Mapping[str, Mapping[str, Any]], n_queries: int) -> Dict[str, float]:
    keys = ("model_turns", "visual_tokens_shown", "visual_tokens_prefilled")
    return {k: sum(r[k] for r in results.values()) / max(1, n_queries) for k in keys}


def offline_cost(records: Sequence[Mapping[str, Any]]) -> Dict[str, float]:
    """Per query of an offline run (``predictions.jsonl``): one generate call; ``ceil(T/2) * (H/28) * (W/28)``
    visual tokens for T frames of H x W (Qwen2.5-VL: temporal patch 2, 28-pixel merged patches)."""
    tokens = []
    for r in records:
        if r.get("frames") and r.get("frame_hw"):
            h, w = r["frame_hw"]
            tokens.append(math.ceil(len(r["frames"]) / 2) * (h // 28) * (w // 28))
        else:
            tokens.append(0)
    n = max(1, len(records))
    return {"model_turns": float(sum(1 for r in records if r.get("frames"))) / n,
            "visual_tokens_shown": sum(tokens) / n, "visual_tokens_prefilled": sum(tokens) / n}


def score_streams(items: Sequence[Mapping[str, Any]], results: Mapping[str, Mapping[str, Any]],
                  bdef: BenchmarkDef, out_dir: Path) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The official layout from the streams' answers (``results.json``), scored by the official scorer."""
    responses: Dict[str, Any] = {}
    for v, its in group_by_video(items).items():
        answers = [AnswerEvent(**a) for a in results[v]["answers"]]
        responses.update(stream_responses(its, answers))
    layout = assemble_results(items, responses, bdef)
    (Path(out_dir) / RESULTS).write_text(json.dumps(layout, indent=1, ensure_ascii=False), encoding="utf-8")
    return score_results(layout, bdef), responses


def streaming_eval(items: Sequence[Mapping[str, Any]], video_root: str, bdef: BenchmarkDef, cfg: StreamConfig,
                   processor, engine, out_dir: Path, batch: int = 8, pinned: Mapping[str, Any] = ()) -> Dict[str, Any]:
    """Run, score and summarise the streaming protocol into ``out_dir``."""
    out_dir = Path(out_dir)
    check_run(out_dir, {"protocol": "ovobench streaming", "stream": dict(cfg.__dict__), **dict(pinned)})
    results = run_streams(items, video_root, cfg, processor, engine, out_dir, batch)
    scores, responses = score_streams(items, results, bdef, out_dir)
    n_q = len(responses)
    decisions = sum(r["decisions"] for r in results.values())
    invalid = _sum_counts([r["invalid"] for r in results.values()])
    summary = {"protocol": "streaming", "scores": scores, "queries": n_q, "videos": len(results),
               "cost": stream_cost(results, n_q), "decisions": decisions,
               "recalls": sum(r["recalls"] for r in results.values()), "invalid": invalid,
               "invalid_frac": sum(r["invalid_decisions"] for r in results.values()) / max(1, decisions),
               "unanswered": sum(1 for v in responses.values() if v is None)}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    return summary


def side_by_side(offline: Mapping[str, Any], streaming: Mapping[str, Any]) -> str:
    """Markdown: per task and mode, official total and weighted overall, then the cost per query, one column per
    protocol (both scored by the official OVO-Bench scorer)."""
    so, ss = offline["scores"], streaming["scores"]
    lines = ["| | offline (one query per prefix) | streaming (one pass) |", "|---|---|---|"]
    for t in so["tasks"]:
        a, b = so["tasks"][t], ss["tasks"].get(t)
        lines.append(f"| {t} ({a['n']} {a['unit']}) | {a['acc']:.2f} | {b['acc']:.2f} |" if b else
                     f"| {t} | {a['acc']:.2f} | - |")
    for m, mv in so["modes"].items():
        other = ss["modes"].get(m)
        lines.append(f"| **{mv['abbr']}** | {mv['acc']:.2f} | {other['acc']:.2f} |" if other else
                     f"| **{mv['abbr']}** | {mv['acc']:.2f} | - |")

    def fmt(x):
        return "-" if x is None else f"{x:.2f}"

    lines.append(f"| total (official) | {fmt(so['total'])} | {fmt(ss['total'])} |")
    lines.append(f"| weighted overall | {so['weighted_overall']:.2f} | {ss['weighted_overall']:.2f} |")
    for k, label in (("model_turns", "model turns / query"), ("visual_tokens_shown", "visual tokens shown / query"),
                     ("visual_tokens_prefilled", "visual tokens prefilled / query")):
        lines.append(f"| {label} | {offline['cost'][k]:.1f} | {streaming['cost'][k]:.1f} |")
    return "\n".join(lines) + "\n"


def run_side_by_side(bdef: BenchmarkDef, hooks, inputs, settings, processor, engine,
                     stream_config: str) -> Dict[str, Any]:
    """``mmrl eval ovobench --streaming``: the offline protocol into ``<out>/offline`` (the generic runner) and the
    streaming protocol into ``<out>/streaming``, both scored by the official scorer; ``<out>/side_by_side.md``."""
    import dataclasses

    from mmrl.errors import ConfigError
    from mmrl.eval.report import read_jsonl as _read
    from mmrl.eval.runner import run_benchmark
    from mmrl.stream.config import load_stream_config

    if bdef.chunking.chunked:
        raise ConfigError("--streaming reads the source videos: chunking.chunked must be false")
    cfg = load_stream_config(stream_config)
    out = Path(settings.out_dir)
    offline_summary, _ = run_benchmark(bdef, hooks, inputs, dataclasses.replace(settings, out_dir=str(out / "offline")),
                                       processor, engine)
    items, notes = hooks.load(bdef, inputs, settings.tasks, settings.limit)
    offline = {"scores": offline_summary["scores"],
               "cost": offline_cost(_read(out / "offline" / "predictions.jsonl"))}
    streaming = streaming_eval(items, notes["videos"], bdef, cfg, processor, engine, out / "streaming",
                               settings.batch, {"model": settings.model_name, "tasks": settings.tasks,
                                                "limit": settings.limit})
    table = side_by_side(offline, streaming)
    head = (f"OVO-Bench, offline vs streaming ({streaming['videos']} videos, {streaming['queries']} queries; "
            f"model {settings.model_name}; stream config {stream_config}); official scorer for both\n\n")
    (out / "side_by_side.md").write_text(head + table, encoding="utf-8")
    return {"offline": offline, "streaming": streaming, "table": head + table}
