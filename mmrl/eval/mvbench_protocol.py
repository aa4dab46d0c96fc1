"""MVBench protocol: frame indices, prompts, queries and the aggregate (original and lmms-eval variants).

Sources: OpenGVLab/Ask-Anything ``video_chat2/mvbench.ipynb`` (``MVBench_dataset.get_index``, ``qa_template``,
``infer_mvbench``, the final ``acc_dict`` loop); VLMEvalKit ``vlmeval/dataset/mvbench.py`` (system role and the
``Best option:(`` assistant segment); lmms-eval ``lmms_eval/tasks/mvbench/utils.py`` (``mvbench_doc_to_text``,
``mvbench_aggregate_results``). A driver does: ``build_queries`` -> generate (``query.messages()`` +
``query.prefill``; frames from ``query_frame_indices``) -> ``score_records`` -> ``mmrl.eval.report``.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from mmrl.data.schema import Sample, VideoRef
from mmrl.eval.benchmark_def import BenchmarkDef, EvalQuery, PromptDef, fill, format_options
from mmrl.eval.parsers import score_answer


def get_index(num_frames: int, fps: float, bound: Optional[Tuple[float, float]], first_idx: int = 0,
              num_segments: int = 16) -> List[int]:
    """Segment-midpoint frame indices of the notebook's ``get_index``.

    ``num_frames`` is how many frames there are (``len(vr)`` for a video, the number of files for a frame folder).
    The last index is ``max_frame = num_frames - 1 + first_idx``: ``len(vr) - 1`` for videos (``first_idx=0``) and
    the file count for JPEG folders numbered from 1 (``first_idx=1``). With a bound ``(start, end)`` in seconds,
    ``start_idx = max(first_idx, round(start*fps))`` and ``end_idx = min(round(end*fps), max_frame)``; without,
    the whole range. Then ``seg = (end_idx - start_idx) / N`` and ``idx_i = int(start_idx + seg/2 + round(seg*i))``
    (``round`` is half-to-even, as Python's ``round`` and ``np.round``).
    """
    max_frame = num_frames - 1 + first_idx
    start, end = bound if bound else (-100000, 100000)
    start_idx = max(first_idx, round(start * fps))
    end_idx = min(round(end * fps), max_frame)
    seg_size = float(end_idx - start_idx) / num_segments
    return [int(start_idx + (seg_size / 2) + round(seg_size * i)) for i in range(num_segments)]


def frame_files(folder: str, indices: Iterable[int]) -> List[str]:
    """Paths of a frame folder's JPEGs for ``indices`` (``%05d.jpg``, numbered from 1)."""
    return [os.path.join(folder, f"{i:05d}.jpg") for i in indices]


def gold_string(sample: Sample) -> str:
    """The notebook's gold ``"(A) answer text"`` (letter = index of the answer in the candidates)."""
    return f"({sample.answer_letter}) {sample.answer}"


def gold_for(sample: Sample, parser: str) -> str:
    """The gold in the form the parser expects: ``"(A) text"`` for ``mvbench_check_ans``, else the letter."""
    return gold_string(sample) if parser == "mvbench_check_ans" else sample.answer_letter


def question_block(question: str, candidates: Sequence[str], prompt: PromptDef) -> str:
    """The filled user template, right-stripped if the prompt says so (before the post prompt)."""
    text = fill(prompt.user_template, question=question, options=format_options(list(candidates), prompt))
    return text.rstrip() if prompt.rstrip else text


def build_prompt(question: str, candidates: Sequence[str], prompt: PromptDef) -> Dict[str, str]:
    """``{"system", "user", "prefill"}`` for one item.

    Original: system = the MVBench system prompt; user = ``Question: q\\nOptions:\\n(A) c0\\n(B) c1`` +
    ``\\nOnly give the best option.``; prefill = ``Best option:(``. lmms-eval: user = ``Question:q\\nOption:\\n(A)
    c0\\n(B) c1\\nOnly give the best option.\\n``; no system, no prefill.
    """
    user = question_block(question, candidates, prompt) + prompt.post_prompt
    system = prompt.system if prompt.system_placement == "system" else ""
    if prompt.system_placement == "user":
        user = prompt.system + user
    return {"system": system, "user": user, "prefill": prompt.prefill}


def item_bound(sample: Sample, bdef: BenchmarkDef, task: str) -> Optional[Tuple[float, float]]:
    """``(start, end)`` if the task is bound, the definition honours bounds and the item has them."""
    if not (bdef.task(task).bound and bdef.sampling.use_bound):
        return None
    if sample.video is None or sample.video.start is None or sample.video.end is None:
        return None
    return (sample.video.start, sample.video.end)


def build_queries(items: Iterable[Any], bdef: BenchmarkDef) -> List[EvalQuery]:
    """One ``EvalQuery`` per ``MVBenchItem`` (see ``mmrl.eval.mvbench_data``), id ``"<task>/<index>"``.

    ``meta`` carries what frame selection needs: ``reader``, ``bound``, ``first_idx``, ``frame_fps``,
    ``num_segments`` (``query_frame_indices`` uses them).
    """
    queries = []
    for item in items:
        s: Sample = item.sample
        parser = bdef.parser_for(item.task)
        parts = build_prompt(s.question, s.candidates, bdef.prompt)
        bound = item_bound(s, bdef, item.task)
        first_idx = 1 if item.reader == "frame" else 0
        frame_fps = s.video.frame_fps if item.reader == "frame" else None
        video = VideoRef(path=s.video.path, nframes=bdef.sampling.num_segments,
                         max_pixels=bdef.sampling.max_pixels, frame_fps=frame_fps,
                         start=bound[0] if bound else None, end=bound[1] if bound else None)
        meta = {"reader": item.reader, "bound": bound, "first_idx": first_idx, "frame_fps": frame_fps,
                "num_segments": bdef.sampling.num_segments, "index": item.index, "source": item.source,
                "return_prefix": bdef.prompt.return_prefix, "first_line_only": bdef.prompt.first_line_only}
        queries.append(EvalQuery(id=s.id, task=item.task, video=video, user=parts["user"], system=parts["system"],
                                 prefill=parts["prefill"], gold=gold_for(s, parser), parser=parser, meta=meta))
    return queries


def query_frame_indices(query: EvalQuery, num_frames: int, fps: Optional[float] = None) -> List[int]:
    """Frame indices for a query once the driver knows the frame count (and fps of a video file).

    Frame folders use their own rate (``meta['frame_fps']``, 3 for MVBench) and indices from 1.
    """
    m = query.meta
    rate = m["frame_fps"] if m["reader"] == "frame" else fps
    if rate is None and m["bound"] is not None:
        raise ValueError(f"query '{query.id}': a bound item needs the video's fps")
    return get_index(num_frames, rate or 1.0, m["bound"], m["first_idx"], m["num_segments"])


def score_records(records: List[Dict[str, Any]], aggregate: str = "micro") -> Dict[str, Any]:
    """Per-task and overall accuracy (percent) of scored records ``{"task", "response", "score", ...}``.

    ``micro``: the notebook's ``acc_dict`` (task accuracy = correct / total; ``Avg`` = total correct / total).
    ``lmms_answered``: lmms-eval ``mvbench_aggregate_results`` (correct / non-empty predictions, per task; a
    ``None`` response counts as empty); its ``Avg`` is computed the same way but lmms-eval reports no group mean.
    A record with an ``error`` (unreadable media, failed generation) always counts, scored 0: never dropped.
    """
    if aggregate not in ("micro", "lmms_answered"):
        raise ValueError(f"unknown MVBench aggregate '{aggregate}' (micro | lmms_answered)")
    per: Dict[str, List[int]] = {}  # task -> [correct, total, answered]
    for r in records:
        c = per.setdefault(r["task"], [0, 0, 0])
        answered = bool(r.get("error")) or r.get("response") not in (None, "")
        c[1] += 1
        c[2] += int(answered)
        if (aggregate == "micro" or answered) and not r.get("error"):
            c[0] += int(r["score"])
    denom = 1 if aggregate == "micro" else 2
    tasks = {t: {"acc": 100.0 * c[0] / c[denom] if c[denom] else 0.0, "correct": c[0], "n": c[1],
                 "answered": c[2]} for t, c in per.items()}
    correct = sum(c[0] for c in per.values())
    total = sum(c[denom] for c in per.values())
    return {"tasks": tasks, "avg": 100.0 * correct / total if total else 0.0, "aggregate": aggregate,
            "n": sum(c[1] for c in per.values())}


def score_responses(queries: List[EvalQuery], responses: Dict[str, Optional[str]]) -> List[Dict[str, Any]]:
    """Records ``{id, task, response, gold, parser, score}``; a missing response is ``None`` (scores 0)."""
    out = []
    for q in queries:
        resp = responses.get(q.id)
        out.append({"id": q.id, "task": q.task, "response": resp, "gold": q.gold, "parser": q.parser,
                    "score": score_answer(q.parser, resp, q.gold)})
    return out


def random_chance(samples: Iterable[Sample]) -> float:
    """Expected accuracy (percent) of a uniform guess: mean of 1/len(candidates)."""
    probs = [1.0 / len(s.candidates) for s in samples]
    return 100.0 * sum(probs) / len(probs) if probs else 0.0


__all__ = ["get_index", "frame_files", "gold_string", "gold_for", "question_block", "build_prompt", "build_queries",
           "query_frame_indices", "score_records", "score_responses", "random_chance"]
