"""MVBench protocol: prompts, queries and the aggregate (original and lmms-eval variants).

Sources: OpenGVLab/Ask-Anything ``video_chat2/mvbench.ipynb`` (``MVBench_dataset.get_index``, ``qa_template``,
``infer_mvbench``, the final ``acc_dict`` loop); VLMEvalKit ``vlmeval/dataset/mvbench.py`` (system role and the
``Best option:(`` assistant segment); lmms-eval ``lmms_eval/tasks/mvbench/utils.py`` (``mvbench_doc_to_text``,
``mvbench_aggregate_results``). The hooks (``mmrl/eval/benchmarks/mvbench/hooks.py``) do: ``build_queries`` -> the
runner generates (frames by the YAML's ``sampling.rule``) -> ``score_records`` -> ``mmrl.eval.report``.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from mmrl.data.schema import Sample, VideoRef
from mmrl.eval.benchmark_def import BenchmarkDef, EvalQuery, PromptDef, TaskDef, fill, format_options, place_system
from mmrl.eval.parsers import score_answer


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
    """``{"system", "user", "prefill"}`` for one item (``system_placement`` applied by ``place_system``).

    Original: user = ``Question: q\\nOptions:\\n(A) c0\\n(B) c1`` + ``\\nOnly give the best option.``, the system text
    both as the system turn and prefixed to the question (the notebook's ``system_llm=True``); prefill =
    ``Best option:(``. lmms-eval: user = ``Question:q\\nOption:\\n(A) c0\\n(B) c1\\nOnly give the best option.\\n``;
    the wrapper's system turn ``You are a helpful assistant.``; no prefill.
    """
    parts = place_system(prompt, question_block(question, candidates, prompt) + prompt.post_prompt)
    return {**parts, "prefill": prompt.prefill}


def item_bound(sample: Sample, task: TaskDef, use_bound: bool) -> Optional[Tuple[float, float]]:
    """``(start, end)`` if the task is bound, the protocol honours bounds and the item has them."""
    if not (task.bound and use_bound):
        return None
    if sample.video is None or sample.video.start is None or sample.video.end is None:
        return None
    return (sample.video.start, sample.video.end)


def build_queries(items: Iterable[Any], bdef: BenchmarkDef, tasks: Optional[Mapping[str, TaskDef]] = None
                  ) -> List[EvalQuery]:
    """One ``EvalQuery`` per ``MVBenchItem`` (see ``mmrl.eval.benchmarks.mvbench.data``), id ``"<task>/<index>"``.

    ``tasks`` (name -> the ``TaskDef`` the items were read with) defaults to the definition's own; ``meta``
    carries what the frame rule needs: ``bound`` and ``frame_fps`` (a frame folder's rate).
    """
    queries = []
    for item in items:
        s: Sample = item.sample
        task = (tasks or {}).get(item.task) or bdef.task(item.task)
        parser = bdef.parser_for(item.task)
        parts = build_prompt(s.question, s.candidates, bdef.prompt)
        bound = item_bound(s, task, bdef.sampling.use_bound)
        frame_fps = s.video.frame_fps if item.reader == "frame" else None
        meta = {"reader": item.reader, "bound": bound, "frame_fps": frame_fps, "index": item.index,
                "source": item.source}
        queries.append(EvalQuery(id=s.id, task=item.task, video=VideoRef(path=s.video.path), user=parts["user"],
                                 system=parts["system"], prefill=parts["prefill"], gold=gold_for(s, parser),
                                 parser=parser, response=bdef.response, meta=meta))
    return queries


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
                    "score": score_answer(q.parser, resp, q.gold, post=q.response)})
    return out


def random_chance(samples: Iterable[Sample]) -> float:
    """Expected accuracy (percent) of a uniform guess: mean of 1/len(candidates)."""
    probs = [1.0 / len(s.candidates) for s in samples]
    return 100.0 * sum(probs) / len(probs) if probs else 0.0


__all__ = ["gold_string", "gold_for", "question_block", "build_prompt", "item_bound", "build_queries",
           "score_records", "score_responses", "random_chance"]
