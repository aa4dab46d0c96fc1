"""Run MVBench end to end: annotations -> queries -> exact frames -> batched greedy generation -> report.

Protocols (``eval/mvbench.yaml``, ``eval/mvbench_lmms.yaml``; specs/benchmarks.md section 1):
- ``original`` (Ask-Anything notebook): ``get_index`` segment midpoints (16) within the item's bound, system
  prompt, ``Best option:(`` prefill, greedy, ``check_ans``; per-task accuracy and ``Avg`` = correct / total.
- ``lmms-eval``: the whole video sampled uniformly (``linspace``, as qwen-vl-utils does for lmms-eval's Qwen
  wrapper), its prompt, no prefill, the lenient ``mcq_acc`` parser, accuracy over non-empty predictions.
Layouts: ``official`` (``json/<task>.json`` + video folders, JPEG frame folders for ``episodic_reasoning``) or
``hf_video`` (``test.json``; pre-cut MP4 segments, so bounds are not applied). Auto-detected when not given.
"""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from mmrl.data.schema import Media
from mmrl.errors import ConfigError, DataError
from mmrl.eval.benchmark_def import BenchmarkDef, EvalQuery, load_benchmark
from mmrl.eval.cli_bench import (EvalSettings, check_run, final_records, generate_records, print_report,
                                 sampling_params)
from mmrl.eval.frames import VideoInfo, decode_indices, probe, uniform_indices
from mmrl.eval.mvbench_data import MVBenchItem, load_mvbench, task_key
from mmrl.eval.mvbench_protocol import build_queries, query_frame_indices, random_chance, score_records
from mmrl.eval.report import build_summary, write_report

PROTOCOLS = {"original": "mvbench", "lmms-eval": "mvbench_lmms"}
_ALIASES = {"original": "original", "ask-anything": "original", "lmms-eval": "lmms-eval", "lmms": "lmms-eval",
            "lmms_eval": "lmms-eval"}
FRAME_RULES = {"original": "get_index segment midpoints within the bound (Ask-Anything notebook)",
               "lmms-eval": "uniform linspace over the whole video (qwen-vl-utils, as lmms-eval's Qwen wrapper)"}


def protocol_name(name: str) -> str:
    """``original`` | ``lmms-eval`` (aliases: ``lmms``, ``lmms_eval``, ``ask-anything``)."""
    try:
        return _ALIASES[name.lower()]
    except KeyError:
        raise ConfigError(f"unknown MVBench protocol '{name}' (original | lmms-eval)") from None


def detect_layout(root: str, bdef: BenchmarkDef) -> str:
    """``official`` if ``<root>/json/`` exists, ``hf_video`` if ``<root>/test.json`` does."""
    if (Path(root) / bdef.data.get("json_dir", "json")).is_dir():
        return "official"
    if (Path(root) / bdef.data.get("test_json", "test.json")).is_file():
        return "hf_video"
    raise DataError("no MVBench annotations: expected json/<task>.json (official) or test.json (hf_video)", path=root)


def definitions(protocol: str, layout: str, num_segments: Optional[int]) -> Tuple[BenchmarkDef, BenchmarkDef]:
    """``(data_def, query_def)``: the definition that reads the layout and the one that builds prompts.

    The official layout is read with ``mvbench.yaml`` (its json names, folders and readers) under either
    protocol; ``hf_video`` clips are pre-cut segments, so bounds are switched off there.
    """
    qdef = copy.deepcopy(load_benchmark(PROTOCOLS[protocol]))
    if num_segments:
        qdef.sampling.num_segments = int(num_segments)
    if layout == "hf_video":
        qdef.sampling.use_bound = False
        return qdef, qdef
    return load_benchmark("mvbench"), qdef


def present_tasks(root: str, ddef: BenchmarkDef, layout: str, tasks: List[str]) -> Tuple[List[str], List[str]]:
    """``(tasks to run, tasks without annotations)``: without ``--tasks``, the official layout runs the tasks
    whose ``json/<task>.json`` exists and reports the others as missing (an explicit task must exist)."""
    by_key = {task_key(t.name): t.name for t in ddef.tasks}
    unknown = [t for t in tasks if task_key(t) not in by_key]
    if unknown:
        raise ConfigError(f"unknown MVBench task(s) {', '.join(unknown)}; known: {', '.join(by_key.values())}")
    if tasks or layout != "official":
        return [by_key[task_key(t)] for t in tasks], []
    json_dir = Path(root) / ddef.data.get("json_dir", "json")
    have = [t.name for t in ddef.tasks if (json_dir / (t.json or f"{t.name}.json")).is_file()]
    return have, [t.name for t in ddef.tasks if t.name not in have]


def select(items: List[MVBenchItem], tasks: List[str], limit: int) -> List[MVBenchItem]:
    """Items of the chosen tasks (all when empty), at most ``limit`` per task (0 = all)."""
    wanted = {task_key(t) for t in tasks}
    out, seen = [], {}
    for it in items:
        if wanted and task_key(it.task) not in wanted:
            continue
        seen[it.task] = seen.get(it.task, 0) + 1
        if not limit or seen[it.task] <= limit:
            out.append(it)
    return out


def frame_indices(q: EvalQuery, info: VideoInfo, protocol: str) -> List[int]:
    """The frames a query sees: ``get_index`` (original) or uniform over the whole video (lmms-eval)."""
    if protocol == "original":
        return query_frame_indices(q, info.num_frames, info.fps)
    first = info.first_idx
    return uniform_indices(first, first + info.num_frames - 1, q.meta["num_segments"] or 16)


def make_prepare(protocol: str, max_pixels: int):
    """``prepare(query) -> (Media, info)`` decoding exactly the protocol's frames."""
    def prepare(q: EvalQuery) -> Tuple[Media, Dict[str, Any]]:
        if q.meta["reader"] == "gif":
            raise DataError("gif reader is not supported (MVBench ships no gif task)", sample_id=q.id)
        info = probe(q.video.path, q.id, frame_fps=q.meta.get("frame_fps"))
        idx = frame_indices(q, info, protocol)
        media = decode_indices(info, idx, q.id, max_pixels)
        return media, {"frames": idx, "video_frames": info.num_frames, "video_fps": round(info.fps, 4)}
    return prepare


def run_mvbench(data_root: str, settings: EvalSettings, processor, engine, protocol: str = "original",
                layout: Optional[str] = None, video_root: Optional[str] = None) -> Dict[str, Any]:
    """Evaluate, write ``predictions.jsonl``, ``summary.json`` and ``summary.md`` in ``settings.out_dir``."""
    protocol = protocol_name(protocol)
    layout = layout or detect_layout(data_root, load_benchmark("mvbench"))
    ddef, qdef = definitions(protocol, layout, settings.num_segments)
    tasks, missing = present_tasks(data_root, ddef, layout, settings.tasks)
    items = select(load_mvbench(data_root, ddef, tasks=tasks, video_root=video_root, layout=layout), tasks,
                   settings.limit)
    if not items:
        raise DataError("no MVBench items selected (check --tasks)", path=data_root)
    queries = build_queries(items, qdef)
    max_new = settings.max_new_tokens or qdef.generation.max_new_tokens
    out = Path(settings.out_dir)
    check_run(out, {"benchmark": qdef.name, "protocol": qdef.protocol, "model": settings.model_name,
                    "layout": layout, "num_segments": qdef.sampling.num_segments,
                    "max_pixels": settings.max_pixels, "max_new_tokens": max_new})
    stats = generate_records(queries, make_prepare(protocol, settings.max_pixels), processor, engine,
                             sampling_params(max_new), out, settings.batch, settings.retry_errors,
                             settings.progress, label=qdef.name)
    records = final_records(queries, out)
    scores = score_records(records, qdef.aggregate)
    parsers = sorted({q.parser for q in queries})
    meta = {"model": settings.model_name, "data_root": os.path.abspath(data_root), "layout": layout,
            "protocol_key": protocol, "frames": FRAME_RULES[protocol], "num_segments": qdef.sampling.num_segments,
            "use_bound": qdef.sampling.use_bound, "max_pixels": settings.max_pixels, "max_new_tokens": max_new,
            "batch": settings.batch, "prefill": qdef.prompt.prefill, "definition": qdef.path,
            "random_chance": random_chance([it.sample for it in items]), "run": stats}
    if missing:
        meta["missing_tasks"] = missing
        print(f"warning: {len(missing)} MVBench task(s) have no annotations and were not run: {', '.join(missing)}",
              file=sys.stderr)
    if protocol == "lmms-eval" and layout == "official":
        meta["note"] = ("bound tasks use the full source videos here; lmms-eval reads the pre-cut *_segment "
                        "videos of the HF video branch")
    summary = build_summary(qdef.name, qdef.protocol, parsers[0] if len(parsers) == 1 else
                            {t: qdef.parser_for(t) for t in scores["tasks"]}, scores, records=records, meta=meta)
    paths = write_report(out, summary)
    print_report(summary, paths)
    return summary
