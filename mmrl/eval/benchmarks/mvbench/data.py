"""Read MVBench annotations into ``MVBenchItem``s (task, ``Sample``, reader type).

Two layouts (specs/benchmarks.md section 1):
- ``official`` (HF OpenGVLab/MVBench main; Ask-Anything ``video_chat2/mvbench.ipynb`` ``MVBench_dataset``):
  ``<root>/<json_dir>/<task>.json`` is a list of ``{video, question, candidates, answer[, start, end]}``; the video
  is ``<video_root>/<task prefix>/<video>`` (a JPEG folder ``%05d.jpg`` from 1 for the ``frame`` reader).
- ``hf_video`` (HF ``video`` revision; VLMEvalKit ``MVBench_MP4``): ``<root>/test.json`` =
  ``{"meta": {task: [items]}, "root": {task: prefix}}``; every video is an MP4.
A malformed file or item raises ``DataError`` naming the file and the item index.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from mmrl.data.schema import Sample, VideoRef
from mmrl.errors import DataError
from mmrl.eval.benchmark_def import BenchmarkDef, TaskDef


@dataclass
class MVBenchItem:
    task: str
    sample: Sample  # id "<task>/<index>"; video.start/end = the item's bound (if any)
    reader: str  # video | frame | gif
    index: int  # position in its annotation list
    source: str  # the annotation file it came from


def task_key(name: str) -> str:
    """Normalise a task name: "Fine-grained Action" / "fine_grained_action" -> "fine_grained_action"."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise DataError("annotation file not found", path=str(path)) from None
    except json.JSONDecodeError as e:
        raise DataError(f"not valid JSON: {e}", path=str(path)) from None


def parse_item(raw: Any, index: int, task: TaskDef, path: str, video_path: str, reader: str,
               frame_fps: Optional[float], need_bound: bool) -> MVBenchItem:
    """Validate one annotation and build its item; ``DataError`` names the file and the item index."""
    def bad(msg: str) -> DataError:
        return DataError(f"item {index} ({task.name}): {msg}", path=path)

    if not isinstance(raw, dict):
        raise bad(f"must be an object, got {type(raw).__name__}")
    for key in ("video", "question", "answer"):
        if not isinstance(raw.get(key), str):
            raise bad(f"'{key}' must be a string")
    cands = raw.get("candidates")
    if not isinstance(cands, list) or len(cands) < 2 or not all(isinstance(c, str) for c in cands):
        raise bad("'candidates' must be a list of at least 2 strings")
    if raw["answer"] not in cands:
        raise bad(f"answer {raw['answer']!r} is not one of the candidates")
    start = end = None
    if need_bound:
        start, end = raw.get("start"), raw.get("end")
        for key, val in (("start", start), ("end", end)):
            if not isinstance(val, (int, float)) or isinstance(val, bool):
                raise bad(f"bound task needs a numeric '{key}'")
        start, end = float(start), float(end)
    sample = Sample(id=f"{task.name}/{index}", question=raw["question"], candidates=list(cands),
                    answer=raw["answer"], qtype=task.name,
                    video=VideoRef(path=os.path.join(video_path, raw["video"]), start=start, end=end,
                                   frame_fps=frame_fps),
                    meta={"task": task.name, "index": index, "reader": reader, "source": path,
                          "video_name": raw["video"]})
    return MVBenchItem(task=task.name, sample=sample, reader=reader, index=index, source=path)


def load_official(root: str, bdef: BenchmarkDef, tasks: Optional[Sequence[str]] = None,
                  video_root: Optional[str] = None, task_defs: Optional[Sequence[TaskDef]] = None
                  ) -> List[MVBenchItem]:
    """``<root>/<json_dir>/<task>.json`` + ``<video_root or root/video_dir>/<prefix>/<video>``.

    ``task_defs`` replaces the definition's tasks (lmms-eval: a ``_segment`` task read from its source videos).
    """
    json_dir = Path(root) / bdef.data.json_dir
    vroot = video_root or os.path.join(root, bdef.data.video_dir)
    items: List[MVBenchItem] = []
    for t in task_defs if task_defs is not None else _selected(bdef, tasks):
        path = json_dir / (t.json or f"{t.name}.json")
        data = _read_json(path)
        if not isinstance(data, list):
            raise DataError(f"must be a list of items, got {type(data).__name__}", path=str(path))
        need_bound = t.bound and bdef.sampling.use_bound
        vdir = os.path.join(vroot, t.prefix or "")
        for i, raw in enumerate(data):
            items.append(parse_item(raw, i, t, str(path), vdir, t.reader, t.frame_fps if t.reader == "frame" else None, need_bound))
    return items


def load_hf_video(root: str, bdef: BenchmarkDef, tasks: Optional[Sequence[str]] = None,
                  video_root: Optional[str] = None) -> List[MVBenchItem]:
    """``<root>/test.json`` with ``meta`` (task -> items) and ``root`` (task -> video prefix); MP4 everywhere."""
    path = Path(root) / bdef.data.test_json
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("meta"), dict):
        raise DataError("must be an object with a 'meta' mapping (task -> items)", path=str(path))
    prefixes = data.get("root") or {}
    if not isinstance(prefixes, dict):
        raise DataError("'root' must map task -> video prefix", path=str(path))
    by_key = {task_key(t.name): t for t in bdef.tasks}
    wanted = {task_key(n) for n in tasks} if tasks else None
    vroot = video_root or os.path.join(root, bdef.data.video_dir)
    items: List[MVBenchItem] = []
    for name, raw_items in data["meta"].items():
        t = by_key.get(task_key(name))
        if t is None:
            raise DataError(f"unknown task '{name}' in 'meta' (known: {', '.join(sorted(by_key))})", path=str(path))
        if wanted is not None and task_key(name) not in wanted:
            continue
        if not isinstance(raw_items, list):
            raise DataError(f"'meta.{name}' must be a list of items", path=str(path))
        prefix = prefixes.get(name, t.prefix or "")
        for i, raw in enumerate(raw_items):  # pre-cut clips: a bound is never applied to them
            items.append(parse_item(raw, i, t, f"{path}#meta.{name}", os.path.join(vroot, prefix), "video", None,
                                    False))
    return items


def _selected(bdef: BenchmarkDef, tasks: Optional[Sequence[str]]) -> List[TaskDef]:
    if not tasks:
        return list(bdef.tasks)
    return [bdef.task(n) for n in tasks]


def task_counts(items: Sequence[MVBenchItem]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for it in items:
        out[it.task] = out.get(it.task, 0) + 1
    return out

