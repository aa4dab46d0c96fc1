"""MVBench hooks (``eval/mvbench.yaml``: the original notebook; ``eval/mvbench_lmms.yaml``: lmms-eval).

Layouts (``data.layout``; ``auto`` detects): ``official`` = ``json/<task>.json`` + video folders (HF main branch),
``hf_video`` = ``test.json`` + MP4s (HF ``video`` revision, what lmms-eval downloads; bound tasks are pre-cut
``_segment`` clips, so no bound is applied). lmms-eval under the ``official`` layout: a task with a
``source_prefix`` reads its ``_segment`` clips when ``<video_root>/<prefix>`` exists, else the source video with
each item's start/end applied (qwen-vl-utils ``video_start``/``video_end``; TVQA frames at ``frame_fps`` 3), so
the frames are those of the segment clip; when neither is possible the layout is refused (``ConfigError``).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from mmrl.errors import ConfigError, DataError
from mmrl.eval.benchmark_def import BenchmarkDef, TaskDef
from mmrl.eval.hooks import BenchmarkHooks, EvalInputs, register_benchmark
from mmrl.eval.benchmarks.mvbench.data import MVBenchItem, load_hf_video, load_official, task_key
from mmrl.eval.benchmarks.mvbench.protocol import build_queries, random_chance, score_records

FIELDS = ("data.layout", "data.json_dir", "data.test_json", "data.video_dir", "tasks.json", "tasks.prefix", "tasks.source_prefix", "tasks.reader", "tasks.bound",
          "tasks.frame_fps", "prompt.system", "prompt.system_placement", "prompt.user_template",
          "prompt.option_format", "prompt.rstrip", "prompt.post_prompt", "prompt.prefill", "response", "sampling",
          "pixels", "generation", "parser", "aggregate")


def detect_layout(root: str, bdef: BenchmarkDef) -> str:
    """``data.layout`` unless ``auto``: then ``official`` if ``<root>/json/`` exists, ``hf_video`` if ``test.json``."""
    if bdef.data.layout != "auto":
        return bdef.data.layout
    if (Path(root) / bdef.data.json_dir).is_dir():
        return "official"
    if (Path(root) / bdef.data.test_json).is_file():
        return "hf_video"
    raise DataError("no MVBench annotations: expected json/<task>.json (official) or test.json (hf_video)", path=root)


def present_tasks(root: str, bdef: BenchmarkDef, layout: str, tasks: Sequence[str]) -> Tuple[List[str], List[str]]:
    """``(tasks to run, tasks without annotations)``: without ``--tasks`` the official layout runs the tasks whose
    ``json/<task>.json`` exists and reports the others as missing (an explicit task must exist)."""
    by_key = {task_key(t.name): t.name for t in bdef.tasks}
    unknown = [t for t in tasks if task_key(t) not in by_key]
    if unknown:
        raise ConfigError(f"unknown MVBench task(s) {', '.join(unknown)}; known: {', '.join(by_key.values())}")
    if tasks or layout != "official":
        return [by_key[task_key(t)] for t in tasks], []
    json_dir = Path(root) / bdef.data.json_dir
    have = [t.name for t in bdef.tasks if (json_dir / (t.json or f"{t.name}.json")).is_file()]
    return have, [t.name for t in bdef.tasks if t.name not in have]


def segment_tasks(bdef: BenchmarkDef, names: Sequence[str], video_root: str) -> Tuple[List[TaskDef], Dict[str, str]]:
    """Task definitions to read the official layout with, and where each ``source_prefix`` task's frames come from.

    A task with ``source_prefix`` reads ``<video_root>/<prefix>`` (lmms-eval's folder: pre-cut ``_segment`` clips,
    read whole) when that folder exists; else ``<video_root>/<source_prefix>`` with the item's bound applied (a
    bound task) or whole (the same clip in the main branch's container). A bound task that can do neither is
    refused: its frames could not be lmms-eval's.
    """
    out, how = [], {}
    for name in names:
        t = bdef.task(name)
        if t.source_prefix is None:
            out.append(t)
        elif (Path(video_root) / (t.prefix or "")).is_dir():
            out.append(dataclasses.replace(t, reader="video", frame_fps=None, bound=False))
            how[name] = f"{t.prefix} (clips read whole)"
        elif t.bound and not bdef.sampling.use_bound:
            raise ConfigError(f"{bdef.path}: task '{name}': no segment clips at {Path(video_root) / t.prefix} and "
                              f"sampling.use_bound is false: the official layout cannot give lmms-eval's frames")
        else:
            out.append(dataclasses.replace(t, prefix=t.source_prefix))
            how[name] = f"{t.source_prefix} + item start/end" if t.bound else f"{t.source_prefix} (whole)"
    return out, how


def _with_mp4(items: List[MVBenchItem], how: Dict[str, str]) -> None:
    """Segment clips are MP4s: a frame-folder name (TVQA) gets ``.mp4``."""
    for it in items:
        if how.get(it.task, "").endswith("(clips read whole)") and not Path(it.sample.video.path).suffix:
            it.sample.video.path += ".mp4"


def select(items: List[MVBenchItem], limit: int) -> List[MVBenchItem]:
    """At most ``limit`` items per task (0 = all)."""
    seen: Dict[str, int] = {}
    out = []
    for it in items:
        seen[it.task] = seen.get(it.task, 0) + 1
        if not limit or seen[it.task] <= limit:
            out.append(it)
    return out


def load(bdef: BenchmarkDef, inputs: EvalInputs, tasks: Sequence[str], limit: int) -> Tuple[List[Any], Dict[str, Any]]:
    root = inputs.data_root
    layout = detect_layout(root, bdef)
    names, missing = present_tasks(root, bdef, layout, tasks)
    vroot = inputs.video_root or str(Path(root) / bdef.data.video_dir)
    notes: Dict[str, Any] = {"layout": layout}
    if layout == "official":
        task_defs, how = segment_tasks(bdef, names or bdef.task_names(), vroot)
        items = load_official(root, bdef, video_root=vroot, task_defs=task_defs)
        _with_mp4(items, how)
        if how:
            notes["bound_tasks"] = how
        notes["_task_defs"] = {t.name: t for t in task_defs}
    else:
        items = load_hf_video(root, bdef, tasks=names, video_root=vroot)
        notes["bound_tasks"] = "pre-cut clips of test.json (no bound applied)"
    items = select(items, limit)
    if not items:
        raise DataError("no MVBench items selected (check --tasks)", path=root)
    if missing:
        notes["missing_tasks"] = missing
        print(f"warning: {len(missing)} MVBench task(s) have no annotations and were not run: {', '.join(missing)}",
              file=sys.stderr)
    notes["random_chance"] = random_chance([it.sample for it in items])
    return items, notes


def queries(items: List[MVBenchItem], bdef: BenchmarkDef, inputs: EvalInputs, notes: Dict[str, Any]):
    return build_queries(items, bdef, notes.get("_task_defs"))


def score(records: List[Dict[str, Any]], items: List[Any], bdef: BenchmarkDef, out_dir: Optional[Path],
          notes: Dict[str, Any]) -> Dict:
    return score_records(records, bdef.aggregate)


def table(scores: Dict[str, Any]) -> str:
    """Per-task accuracy, then ``Avg`` with its denominator named."""
    lines = ["| task | acc (%) | correct | n |", "|---|---|---|---|"]
    for t, v in scores["tasks"].items():
        lines.append(f"| {t} | {v['acc']:.2f} | {v['correct']} | {v['n']} |")
    label = "total correct / total" if scores["aggregate"] == "micro" else "total correct / non-empty predictions"
    lines.append(f"| **Avg** ({label}) | {scores['avg']:.2f} | | {scores['n']} |")
    return "\n".join(lines) + "\n"


def line(scores: Dict[str, Any]) -> str:
    return ", ".join(f"{t} {v['acc']:.2f}" for t, v in scores["tasks"].items()) + f"; Avg {scores['avg']:.2f}"


HOOKS = register_benchmark(BenchmarkHooks(
    name="mvbench", fields=FIELDS, load=load, queries=queries, score=score, table=table, line=line,
    inputs=("data_root", "video_root"), aggregates=("micro", "lmms_answered")))
