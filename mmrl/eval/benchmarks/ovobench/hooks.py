"""OVO-Bench hooks (``eval/ovobench.yaml``: the offline protocol with the official Qwen2-VL wrapper's settings).

Every query sees only its prefix ``[0, ceil(realtime))``: multiple-choice items once, forward REC/SSR/CRR items
once per ``test_info`` probe on that probe's own prefix. By default the prefix is cut from the source video
``<video_root>/<item video>`` (the frame rule never decodes a frame past it); with ``chunking.chunked`` the
released chunks ``{id}.mp4`` / ``{id}_{i}.mp4`` are read whole. Responses are assembled in the official
results layout (``results.json``) and scored by ``mmrl.eval.benchmarks.ovobench.score``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from mmrl.errors import ConfigError, DataError
from mmrl.eval.benchmark_def import BenchmarkDef
from mmrl.eval.hooks import BenchmarkHooks, EvalInputs, register_benchmark
from mmrl.eval.benchmarks.ovobench.protocol import assemble_results, build_queries, count_queries, load_annotations
from mmrl.eval.benchmarks.ovobench.score import format_table, score_result_files, score_results, summary_line
from mmrl.eval.parsers import postprocess

RESULTS = "results.json"
FIELDS = ("data.annotations", "data.video_dir", "data.chunk_dir", "chunking", "tasks.mode", "tasks.template",
          "tasks.template_args", "tasks.gold", "tasks.parser", "tasks.weight_unit", "prompt.system",
          "prompt.system_placement", "prompt.option_format", "prompt.option_joiner", "prompt.options_suffix",
          "prompt.prefill", "prompt.templates", "response", "sampling", "pixels", "generation", "parser",
          "parser_mode")


def paths(bdef: BenchmarkDef, inputs: EvalInputs) -> Tuple[str, str]:
    """``(annotation file, video folder)``: ``--anno`` / ``--video-root``, else under ``--data-root``."""
    root = Path(inputs.data_root) if inputs.data_root else None
    folder = bdef.data.chunk_dir if bdef.chunking.chunked else bdef.data.video_dir
    key = "data.chunk_dir" if bdef.chunking.chunked else "data.video_dir"
    anno = inputs.anno or (str(root / bdef.data.annotations) if root and bdef.data.annotations else None)
    videos = inputs.video_root or (str(root / folder) if root and folder else None)
    if anno is None:
        raise ConfigError("mmrl eval ovobench: give --anno, or --data-root with data.annotations")
    if videos is None:
        raise ConfigError(f"mmrl eval ovobench: give --video-root, or --data-root with {key}")
    for p, flag in ((anno, "--anno"), (videos, "--video-root")):
        if not Path(p).exists():
            raise ConfigError(f"{flag} {p}: not found")
    return anno, videos


def select(annotations: Sequence[Mapping[str, Any]], tasks: Sequence[str], limit: int) -> List[Mapping[str, Any]]:
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


def load(bdef: BenchmarkDef, inputs: EvalInputs, tasks: Sequence[str], limit: int):
    unknown = [t for t in tasks if t.upper() not in bdef.task_names()]
    if unknown:
        raise ConfigError(f"unknown OVO-Bench task(s) {', '.join(unknown)}; known: {', '.join(bdef.task_names())}")
    anno, videos = paths(bdef, inputs)
    items = select(load_annotations(anno, bdef), tasks, limit)
    if not items:
        raise DataError("no OVO-Bench items selected (check --tasks)", path=anno)
    return items, {"annotations": anno, "videos": videos}


def queries(items, bdef: BenchmarkDef, inputs: EvalInputs, notes: Dict[str, Any]):
    chunked = bdef.chunking.chunked
    qs = build_queries(items, bdef, video_root=notes["videos"], chunk_dir=notes["videos"] if chunked else None)
    notes["queries_per_task"] = count_queries(qs)
    return qs


def score(records: List[Dict[str, Any]], items, bdef: BenchmarkDef, out_dir: Optional[Path],
          notes: Dict[str, Any]) -> Dict[str, Any]:
    """Post-process (the YAML's ``response``), assemble the official results layout (``results.json``), then
    score it as ``score.py`` does."""
    post = bdef.response
    responses = {r["id"]: postprocess(r.get("response"), post.strip, post.first_line_only, post.prefix)
                 for r in records}
    results = assemble_results(items, responses, bdef)
    if out_dir is not None:
        (Path(out_dir) / RESULTS).write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    return score_results(results, bdef)


def score_only(files: Sequence[str], bdef: BenchmarkDef) -> Dict[str, Any]:
    """Score result files in the official layout (``--score-only``)."""
    if not files:
        raise ConfigError("--score-only needs result files (official layout {backward, realtime, forward})")
    return score_result_files(list(files), bdef)


HOOKS = register_benchmark(BenchmarkHooks(
    name="ovobench", fields=FIELDS, load=load, queries=queries, score=score, table=format_table, line=summary_line,
    inputs=("data_root", "anno", "video_root"), score_only=score_only))
