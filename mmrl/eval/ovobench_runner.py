"""Run OVO-Bench (offline protocol) end to end: annotations -> prefix queries -> generation -> official scoring.

Every query sees only its prefix ``[0, ceil(realtime)]`` (``ovobench_protocol.prefix_end``): backward and
real-time items once, forward REC/SSR/CRR items once per ``test_info`` probe on that probe's own prefix. By
default the prefix is cut on the fly from the source video ``<video_root>/<item video>``: only frames with a
timestamp <= the prefix end are decoded, at most ``nframes`` of them, uniformly (the official wrappers use up
to 64). With ``chunked=True`` the video root holds the released pre-chunked files ``{id}.mp4`` /
``{id}_{i}.mp4`` and each is sampled whole. Responses are assembled in the official results layout
(``results.json``) and scored by ``ovobench_score``; the report prints the official total and the weighted
overall, each labelled.
"""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from mmrl.data.schema import Media
from mmrl.errors import ConfigError, DataError
from mmrl.eval.benchmark_def import EvalQuery, load_benchmark
from mmrl.eval.cli_bench import (EvalSettings, check_run, final_records, generate_records, print_report,
                                 sampling_params)
from mmrl.eval.frames import VideoInfo, decode_indices, prefix_indices, probe
from mmrl.eval.ovobench_protocol import assemble_results, build_queries, count_queries, load_annotations
from mmrl.eval.ovobench_score import score_results, summary_line
from mmrl.eval.report import build_summary, write_report

RESULTS = "results.json"


def select(annotations: Sequence[Mapping[str, Any]], tasks: List[str], limit: int) -> List[Mapping[str, Any]]:
    """Items of the chosen tasks (all when empty; names case-insensitive), at most ``limit`` per task."""
    wanted = {t.upper() for t in tasks}
    out, seen = [], {}
    for it in annotations:
        if wanted and str(it["task"]).upper() not in wanted:
            continue
        seen[it["task"]] = seen.get(it["task"], 0) + 1
        if not limit or seen[it["task"]] <= limit:
            out.append(it)
    return out


def make_prepare(nframes: int, max_pixels: int, chunked: bool):
    """``prepare(query) -> (Media, info)``: up to ``nframes`` uniform frames of the query's prefix."""
    cache: Dict[str, VideoInfo] = {}  # forward probes share their source video

    def prepare(q: EvalQuery) -> Tuple[Media, Dict[str, Any]]:
        path = q.video.path
        if path not in cache:
            cache[path] = probe(path, q.id)
        info = cache[path]
        end = None if chunked else q.video.end
        try:
            idx = prefix_indices(info, end, nframes)
        except DataError as e:
            raise DataError(str(e), sample_id=q.id) from None
        media = decode_indices(info, idx, q.id, max_pixels)
        shown = None if end is None else min(end, info.duration)  # capped at the duration, as the chunks are
        return media, {"frames": idx, "prefix_end": shown, "last_frame_t": round(media.timestamps[-1], 4),
                       "video_duration": round(info.duration, 4)}
    return prepare


def run_ovobench(anno: str, video_root: str, settings: EvalSettings, processor, engine,
                 chunked: bool = False) -> Dict[str, Any]:
    """Evaluate; write ``predictions.jsonl``, ``results.json`` (official layout), ``summary.json``/``.md``."""
    bdef = copy.deepcopy(load_benchmark("ovobench"))
    bdef.sampling.max_frames = settings.nframes
    bdef.sampling.max_pixels = settings.max_pixels
    unknown = [t for t in settings.tasks if t.upper() not in bdef.task_names()]
    if unknown:
        raise ConfigError(f"unknown OVO-Bench task(s) {', '.join(unknown)}; known: {', '.join(bdef.task_names())}")
    annotations = select(load_annotations(anno, bdef), settings.tasks, settings.limit)
    if not annotations:
        raise DataError("no OVO-Bench items selected (check --tasks)", path=anno)
    queries = build_queries(annotations, bdef, video_root=video_root, chunk_dir=video_root if chunked else None)
    max_new = settings.max_new_tokens or bdef.generation.max_new_tokens
    out = Path(settings.out_dir)
    check_run(out, {"benchmark": bdef.name, "protocol": bdef.protocol, "model": settings.model_name,
                    "chunked": chunked, "nframes": settings.nframes, "max_pixels": settings.max_pixels,
                    "max_new_tokens": max_new})
    stats = generate_records(queries, make_prepare(settings.nframes, settings.max_pixels, chunked), processor,
                             engine, sampling_params(max_new), out, settings.batch, settings.retry_errors,
                             settings.progress, label=bdef.name)
    records = final_records(queries, out)
    results = assemble_results(annotations, {r["id"]: r.get("response") for r in records}, bdef)
    (out / RESULTS).write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    scores = score_results(results, bdef)
    meta = {"model": settings.model_name, "annotations": os.path.abspath(anno),
            "video_root": os.path.abspath(video_root), "chunked": chunked,
            "frames": ("uniform over the pre-chunked file" if chunked else
                       "uniform over frames with timestamp <= ceil(realtime), cut from the source video"),
            "nframes": settings.nframes, "max_pixels": settings.max_pixels, "max_new_tokens": max_new,
            "batch": settings.batch, "definition": bdef.path, "queries_per_task": count_queries(queries),
            "results": str(out / RESULTS), "run": stats}
    summary = build_summary(bdef.name, bdef.protocol, scores["parsers"], scores, records=records, meta=meta)
    paths = write_report(out, summary)
    print_report(summary, paths)
    print(summary_line(scores))
    return summary
