"""OVO-Bench offline protocol: queries from ``ovo_bench_new.json`` and results in the official layout.

Sources: JoeLeelyf/OVO-Bench ``inference.py`` (task -> mode split, ``--video_dir`` join), ``utils/OVOBench.py``
(``OVOBenchOffline.eval``: one query per multiple-choice item, one per forward ``test_info`` probe, results layout),
``constant.py`` (templates, in ``eval/ovobench.yaml``), ``utils/chunk_videos.py`` (prefix ``[0, ceil(t)]``,
chunks ``{id}.mp4`` / ``{id}_{i}.mp4``). Offline: every query is independent and sees only its prefix.
A driver does: ``build_queries`` -> generate -> ``assemble_results`` -> ``score.score_results``;
query ids (``"<id>"`` or ``"<id>_<probe>"``) are stable, so responses can be appended and resumed by id.
"""
from __future__ import annotations

import copy
import json
import math
import os
from string import Formatter
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set

from mmrl.data.schema import LETTERS, VideoRef
from mmrl.errors import DataError
from mmrl.eval.benchmark_def import BenchmarkDef, ChunkDef, EvalQuery, TaskDef, fill, format_options, place_system

FORWARD = "forward"


def query_id(item_id: Any, probe: Optional[int] = None) -> str:
    """``"<id>"`` for a multiple-choice item, ``"<id>_<probe>"`` for a forward probe (the chunk file stems)."""
    return str(item_id) if probe is None else f"{item_id}_{probe}"


def prefix_end(realtime: float, chunking: ChunkDef) -> float:
    """End of the visible prefix: ``ceil(realtime)`` (``chunk_videos.py``) or ``realtime`` (``end: exact``). The
    video's own end caps it where the frames are chosen (``mmrl.media.sampling.prefix_last``)."""
    return float(math.ceil(realtime)) if chunking.end == "ceil" else float(realtime)


def _fields(task: TaskDef) -> tuple:
    """Item and probe fields the task's template args and gold read (e.g. ``question``, ``probe[step]``)."""
    item, probe = set(), set()
    for arg in task.template_args:
        for _, name, _, _ in Formatter().parse(arg):
            if not name:
                continue
            base = name.split("[")[0].split(".")[0]
            if base == "probe":
                probe.add(name[len("probe["):].split("]")[0])
            elif base != "options":
                item.add(base)
    if task.gold.startswith("probe."):
        probe.add(task.gold.split(".", 1)[1])
    return item, probe


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate_item(item: Any, index: int, bdef: BenchmarkDef, path: str = "<annotations>") -> TaskDef:
    """Check one annotation against its task's needs; returns the task. ``DataError`` names file and index."""
    def bad(msg: str) -> DataError:
        return DataError(f"item {index}: {msg}", path=path)

    if not isinstance(item, dict):
        raise bad(f"must be an object, got {type(item).__name__}")
    for key in ("id", "task", "video"):
        if key not in item:
            raise bad(f"missing '{key}'")
    try:
        task = bdef.task(item["task"])
    except KeyError as e:
        raise bad(e.args[0]) from None
    need_item, need_probe = _fields(task)
    for key in sorted(need_item):
        if not isinstance(item.get(key), str):
            raise bad(f"{task.name} item needs a string '{key}'")
    if task.mode == FORWARD:
        probes = item.get("test_info")
        if not isinstance(probes, list) or not probes:
            raise bad(f"{task.name} item needs a non-empty 'test_info' list")
        for j, p in enumerate(probes):
            if not isinstance(p, dict) or not _num(p.get("realtime")):
                raise bad(f"test_info[{j}] needs a numeric 'realtime'")
            for key in sorted(need_probe):
                if key not in p:
                    raise bad(f"test_info[{j}] needs '{key}'")
    else:
        if not _num(item.get("realtime")):
            raise bad("needs a numeric 'realtime'")
        opts = item.get("options")
        if not isinstance(opts, list) or len(opts) < 2 or not all(isinstance(o, str) for o in opts):
            raise bad("'options' must be a list of at least 2 strings")
        if task.gold == "gt_letter" and not (isinstance(item.get("gt"), int) and 0 <= item["gt"] < len(opts)):
            raise bad("'gt' must be an option index")
    return task


def load_annotations(path: str, bdef: BenchmarkDef) -> List[Dict[str, Any]]:
    """Read and validate ``ovo_bench_new.json`` (a list of items)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise DataError("annotation file not found", path=path) from None
    except json.JSONDecodeError as e:
        raise DataError(f"not valid JSON: {e}", path=path) from None
    if not isinstance(data, list):
        raise DataError(f"must be a list of items, got {type(data).__name__}", path=path)
    for i, item in enumerate(data):
        validate_item(item, i, bdef, path)
    return data


def build_prompt(item: Mapping[str, Any], task: TaskDef, bdef: BenchmarkDef, probe: Optional[int] = None) -> str:
    """The official prompt: ``templates[task.template].format(*args)``, each arg filled from the item.

    Multiple choice: ``BR_PROMPT_TEMPLATE.format(question, "A. o0; B. o1;")``; REC: "How many times did they
    {activity}?"; SSR: the probe's step; CRR: the item's question.
    """
    fields = dict(item)
    fields["options"] = format_options(item["options"], bdef.prompt) if "options" in item else ""
    fields["probe"] = item["test_info"][probe] if probe is not None else {}
    args = [fill(a, **fields) for a in task.template_args]
    return fill(bdef.prompt.templates[task.template], args)


def gold_of(item: Mapping[str, Any], task: TaskDef, probe: Optional[int] = None) -> Any:
    """``chr(65 + gt)`` for multiple choice; the probe's ``count`` (REC) or ``type`` (SSR/CRR)."""
    if task.gold == "gt_letter":
        return LETTERS[item["gt"]]
    if task.gold.startswith("probe."):
        return item["test_info"][probe][task.gold.split(".", 1)[1]]
    return item.get("answer")


def as_list(bdef: BenchmarkDef, task: TaskDef) -> bool:
    """List mode (``parser_mode: list``): the official Qwen2-VL wrapper returns ``batch_decode``'s list, so
    ``gt in response`` is an exact element match. REC keeps the string (the official REC regex raises on a list)."""
    return bdef.parser_mode == "list" and task.gold != "probe.count"


def build_queries(annotations: Sequence[Mapping[str, Any]], bdef: BenchmarkDef, video_root: str = "",
                  chunk_dir: Optional[str] = None, tasks: Optional[Iterable[str]] = None) -> List[EvalQuery]:
    """All queries, in annotation order (forward items expand to their probes in order).

    The video is ``<video_root>/<item video>`` with ``meta['end']`` = the prefix end (the frame rule keeps the
    frames before it, capped at the video), or, with ``chunk_dir``, the pre-chunked file
    ``<chunk_dir>/<chunk_name>`` read whole (``meta['end']`` None).
    """
    wanted: Optional[Set[str]] = set(tasks) if tasks else None
    queries: List[EvalQuery] = []
    for item in annotations:
        task = bdef.task(item["task"])
        if wanted is not None and task.name not in wanted:
            continue
        probes = range(len(item["test_info"])) if task.mode == FORWARD else [None]
        for j in probes:
            qid = query_id(item["id"], j)
            realtime = item["test_info"][j]["realtime"] if j is not None else item["realtime"]
            end = prefix_end(realtime, bdef.chunking)
            if chunk_dir is not None:
                video = VideoRef(path=os.path.join(chunk_dir, bdef.chunking.chunk_name.format(qid=qid)))
            else:
                video = VideoRef(path=os.path.join(video_root, item["video"]), start=0.0, end=end)
            parts = place_system(bdef.prompt, build_prompt(item, task, bdef, j))
            meta = {"item_id": item["id"], "probe": j, "mode": task.mode, "realtime": realtime,
                    "end": None if chunk_dir is not None else end, "video_name": item["video"],
                    "as_list": as_list(bdef, task)}
            queries.append(EvalQuery(id=qid, task=task.name, video=video, user=parts["user"], system=parts["system"],
                                     prefill=bdef.prompt.prefill, gold=gold_of(item, task, j),
                                     parser=bdef.parser_for(task.name), response=bdef.response, meta=meta))
    return queries


def _as_saved(response: Any, bdef: BenchmarkDef, task: TaskDef) -> Any:
    return [response] if isinstance(response, str) and as_list(bdef, task) else response


def assemble_results(annotations: Sequence[Mapping[str, Any]], responses: Mapping[str, Optional[str]],
                     bdef: BenchmarkDef, tasks: Optional[Iterable[str]] = None) -> Dict[str, List[Dict[str, Any]]]:
    """The official results layout from responses by query id (missing -> ``None``, which scores 0).

    backward/realtime: ``{id, video, task, question, response, ground_truth}``; forward: the annotation with
    ``test_info[i]["response"]`` filled in (as ``OVOBenchOffline.eval`` saves them); in list mode a response is
    saved as the one-element list the Qwen2-VL wrapper returns.
    """
    wanted = set(tasks) if tasks else None
    out: Dict[str, List[Dict[str, Any]]] = {"backward": [], "realtime": [], "forward": []}
    for item in annotations:
        task = bdef.task(item["task"])
        if wanted is not None and task.name not in wanted:
            continue
        if task.mode == FORWARD:
            rec = copy.deepcopy(dict(item))
            for j, probe in enumerate(rec["test_info"]):
                probe["response"] = _as_saved(responses.get(query_id(item["id"], j)), bdef, task)
            out[FORWARD].append(rec)
        else:
            out[task.mode].append({"id": item["id"], "video": item["video"], "task": task.name,
                                   "question": item["question"],
                                   "response": _as_saved(responses.get(query_id(item["id"])), bdef, task),
                                   "ground_truth": gold_of(item, task)})
    return out


def pending(queries: Iterable[EvalQuery], done: Iterable[str]) -> List[EvalQuery]:
    """Queries whose id is not in ``done`` (to resume a run)."""
    seen = set(done)
    return [q for q in queries if q.id not in seen]


def count_queries(queries: Iterable[EvalQuery]) -> Dict[str, int]:
    """Number of queries per task."""
    out: Dict[str, int] = {}
    for q in queries:
        out[q.task] = out.get(q.task, 0) + 1
    return out
