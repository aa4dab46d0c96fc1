"""The generation driver every benchmark shares: queries -> prompts -> batched generation -> resumable records.

``generate_records`` turns ``EvalQuery``s into response records: ``prepare(query)`` decodes the query's frames
(``mmrl.eval.frame_rules.prepare_frames``), ``build_prompt_inputs`` builds its inputs (with the prefill), the
rollout engine generates ``batch`` prompts per call, and every record is appended to ``predictions.jsonl`` and
flushed as it comes. A rerun skips ids already there. A query whose media cannot be read (or whose generation
fails) gets a record with ``response: None`` and ``error``: it scores 0 and is listed in the report, never
dropped. ``run.json`` pins the resolved protocol of an output folder so that a resume never mixes protocols,
models or frame budgets.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from mmrl.data.schema import Media
from mmrl.errors import ConfigError
from mmrl.eval.benchmark_def import EvalQuery, GenerationDef
from mmrl.eval.parsers import score_answer
from mmrl.eval.report import append_jsonl, responses_by_id
from mmrl.media.inputs import build_prompt_inputs
from mmrl.rollout.base import RolloutRequest, SamplingParams

PREDICTIONS = "predictions.jsonl"
RUN_FILE = "run.json"

Prepare = Callable[[EvalQuery], Tuple[Media, Dict[str, Any]]]


# --- output folder -----------------------------------------------------------------------------------------------
def repair_jsonl(path: Path) -> None:
    """Drop a torn last line (a killed write) so the next append starts on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    path.write_bytes(data[: data.rfind(b"\n") + 1])


def check_run(out_dir: Path, pinned: Mapping[str, Any]) -> None:
    """Write ``run.json`` on a fresh folder; on a resume, refuse settings that differ from the pinned ones."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pinned = json.loads(json.dumps(dict(pinned)))  # tuples -> lists, as they read back
    path = out_dir / RUN_FILE
    if path.exists() and (out_dir / PREDICTIONS).exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        diff = {k: (old.get(k), v) for k, v in pinned.items() if old.get(k) != v}
        if diff:
            what = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())
            raise ConfigError(f"{out_dir} holds a run with other settings ({what}); use another --out "
                              f"or delete {out_dir / PREDICTIONS}")
        return
    path.write_text(json.dumps(dict(pinned), indent=2), encoding="utf-8")


# --- the driver --------------------------------------------------------------------------------------------------
def _progress(enabled: bool):
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("errors {task.fields[errors]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=Console(stderr=True), disable=not enabled)


def _generate(engine, reqs: List[RolloutRequest], params: SamplingParams, stats: Dict[str, int]
              ) -> List[Tuple[Optional[str], Optional[str]]]:
    """``(text, error)`` per request; a failed batch is retried one prompt at a time to isolate the culprit."""
    stats["engine_calls"] += 1
    try:
        return [(t.text, None) for t in engine.generate(reqs, params)]
    except Exception as e:  # noqa: BLE001 - an OOM or a bad prompt must not lose the whole run
        if len(reqs) == 1:
            return [(None, f"generation failed ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})")]
        return [r for req in reqs for r in _generate(engine, [req], params, stats)]


def generate_records(queries: Sequence[EvalQuery], prepare: Prepare, processor, engine, params: SamplingParams,
                     out_dir: Path, batch: int = 8, retry_errors: bool = False, progress: bool = True,
                     label: str = "eval") -> Dict[str, Any]:
    """Generate every query not yet in ``<out_dir>/predictions.jsonl``; returns run statistics.

    Records: ``{id, task, response, gold, parser, score, error?, ...prepare info}``; ``score`` is the parser's
    verdict at write time (reports re-score from ``response``).
    """
    path = Path(out_dir) / PREDICTIONS
    repair_jsonl(path)
    done = responses_by_id(path)
    todo = [q for q in queries if q.id not in done or (retry_errors and done[q.id].get("error"))]
    stats = {"queries": len(queries), "resumed": len(queries) - len(todo), "generated": 0, "errors": 0,
             "engine_calls": 0}

    def write(q: EvalQuery, response: Optional[str], error: Optional[str], info: Mapping[str, Any]) -> None:
        rec = {"id": q.id, "task": q.task, "response": response, "gold": q.gold, "parser": q.parser,
               "score": score_query(q, response), **info}
        if error:
            rec["error"] = error
            stats["errors"] += 1
        else:
            stats["generated"] += 1
        append_jsonl(path, rec)

    with _progress(progress) as bar:
        task = bar.add_task(label, total=len(queries), completed=stats["resumed"], errors=0)
        for start in range(0, len(todo), max(1, batch)):
            chunk = todo[start:start + max(1, batch)]
            reqs, ready = [], []
            for q in chunk:
                try:
                    media, info = prepare(q)
                    inputs = build_prompt_inputs(processor, q.messages(), media, prefill=q.prefill, sample_id=q.id)
                except Exception as e:  # noqa: BLE001 - missing/unreadable media: an error record, scored 0
                    write(q, None, str(e) or type(e).__name__, {})
                    continue
                reqs.append(RolloutRequest(inputs=inputs, sample_id=q.id))
                ready.append((q, info))
            if reqs:
                for (q, info), (text, err) in zip(ready, _generate(engine, reqs, params, stats)):
                    write(q, text, err, info)
            bar.update(task, advance=len(chunk), errors=stats["errors"])
    return stats


def final_records(queries: Sequence[EvalQuery], out_dir: Path) -> List[Dict[str, Any]]:
    """One scored record per query, in query order, from the JSONL (last record per id wins)."""
    done = responses_by_id(Path(out_dir) / PREDICTIONS)
    out = []
    for q in queries:
        rec = dict(done.get(q.id) or {"id": q.id, "task": q.task, "response": None, "error": "no response"})
        rec["score"] = score_query(q, rec.get("response"))
        out.append(rec)
    return out


def sampling_params(gen: GenerationDef) -> SamplingParams:
    """The YAML's ``generation``: greedy unless ``do_sample`` (then ``temperature`` / ``top_p``)."""
    return SamplingParams(greedy=not gen.do_sample, temperature=gen.temperature, top_p=gen.top_p,
                          max_new_tokens=int(gen.max_new_tokens))


def score_query(q: EvalQuery, response: Any) -> int:
    """The query's parser on its post-processed response (``q.response``; ``meta['as_list']``: OVO list mode)."""
    return score_answer(q.parser, response, q.gold, post=q.response, as_list=bool(q.meta.get("as_list")))
