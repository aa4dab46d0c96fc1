"""``mmrl eval mvbench|ovobench``: the shared, resumable generation driver and the command-line glue.

``generate_records`` turns ``EvalQuery``s into response records: ``prepare(query)`` decodes the query's frames,
``build_prompt_inputs`` builds its inputs (with the prefill), the rollout engine generates ``batch`` prompts per
call (greedy), and every record is appended to ``predictions.jsonl`` and flushed as it comes. A rerun skips ids
already there. A query whose media cannot be read (or whose generation fails) gets a record with
``response: None`` and ``error``: it scores 0 and is listed in the report, never dropped. ``run.json`` pins the
settings of an output folder so that a resume never mixes protocols, models or frame budgets.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from mmrl.data.schema import Media
from mmrl.errors import ConfigError
from mmrl.eval.benchmark_def import EvalQuery
from mmrl.eval.parsers import score_answer
from mmrl.eval.report import append_jsonl, responses_by_id
from mmrl.media.inputs import build_prompt_inputs
from mmrl.rollout.base import RolloutRequest, SamplingParams, build_engine

PREDICTIONS = "predictions.jsonl"
RUN_FILE = "run.json"
DEFAULT_MAX_PIXELS = 112 * 112  # small: a CPU default; real runs pass --max-pixels (scripts/eval_*.sh)

Prepare = Callable[[EvalQuery], Tuple[Media, Dict[str, Any]]]


@dataclass
class EvalSettings:
    """Run settings shared by both benchmarks (the CLI fills them from its arguments)."""

    out_dir: str
    batch: int = 8
    max_pixels: int = DEFAULT_MAX_PIXELS
    nframes: int = 4  # OVO: frame cap per query (uniform over the prefix)
    num_segments: Optional[int] = None  # MVBench: get_index segments (default: the benchmark YAML's 16)
    max_new_tokens: Optional[int] = None  # default: the benchmark YAML
    limit: int = 0  # items per task (0 = all)
    tasks: List[str] = field(default_factory=list)
    retry_errors: bool = False
    progress: bool = True
    model_name: str = ""


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
               "score": score_answer(q.parser, response, q.gold), **info}
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
        rec["score"] = score_answer(q.parser, rec.get("response"), q.gold)
        out.append(rec)
    return out


def sampling_params(max_new_tokens: int) -> SamplingParams:
    return SamplingParams(greedy=True, max_new_tokens=int(max_new_tokens))


# --- command line ------------------------------------------------------------------------------------------------
def load_for_eval(model_path: str, device: Optional[str] = None, dtype: Optional[str] = None):
    """Model, processor and an HF rollout engine; on a GPU by default when one is present (bfloat16)."""
    import torch

    from mmrl.models.loading import load_model, load_processor

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    model = load_model(model_path, dtype=dtype, device=device)
    processor = load_processor(model_path)
    return model, processor, build_engine("hf", model=model, processor=processor)


def settings_from_args(args, bench: str) -> EvalSettings:
    tasks = [t for t in (getattr(args, "tasks", None) or "").split(",") if t]
    return EvalSettings(out_dir=args.out or f"runs/eval_{bench}", batch=args.batch,
                        max_pixels=getattr(args, "max_pixels", None) or DEFAULT_MAX_PIXELS, nframes=args.nframes,
                        num_segments=getattr(args, "num_segments", None),
                        max_new_tokens=getattr(args, "max_new_tokens", None), limit=args.limit or 0, tasks=tasks,
                        retry_errors=bool(getattr(args, "retry_errors", False)),
                        progress=not getattr(args, "no_progress", False), model_name=args.model or "")


def score_only(paths: Sequence[str], out: Optional[str] = None) -> Dict[str, Any]:
    """Score OVO-Bench result files (official layout); print the table and the one-line summary."""
    from mmrl.eval.ovobench_score import format_table, score_result_files, summary_line
    from mmrl.eval.report import build_summary, write_report

    if not paths:
        raise ConfigError("--score-only needs result files (official layout {backward, realtime, forward})")
    scores = score_result_files(list(paths))
    print(format_table(scores), end="")
    print(summary_line(scores))
    if out:
        summary = build_summary("ovobench", scores["protocol"], scores["parsers"], scores,
                                meta={"score_only": True, "files": scores["files"]})
        print(json.dumps(write_report(out, summary)))
    return scores


def _exists(path: str, flag: str) -> None:
    """Fail before loading a model when a data path is wrong."""
    if not Path(path).exists():
        raise ConfigError(f"{flag} {path}: not found")


def run_benchmark_cli(args) -> Dict[str, Any]:
    """Entry point of ``mmrl eval mvbench|ovobench`` (see ``mmrl/cli.py`` for the arguments)."""
    if args.bench == "ovobench" and args.score_only is not None:
        return score_only(args.score_only, args.out)
    if not args.model:
        raise ConfigError(f"mmrl eval {args.bench}: --model is required (a checkpoint folder or 'tiny')")
    if args.bench == "mvbench":
        from mmrl.eval.mvbench_runner import protocol_name, run_mvbench

        if not args.data_root:
            raise ConfigError("mmrl eval mvbench: --data-root is required (json/ + video folders, or test.json)")
        _exists(args.data_root, "--data-root")
        proto = protocol_name(args.protocol)
        settings = settings_from_args(args, "mvbench" if proto == "original" else "mvbench_lmms")
        model, processor, engine = load_for_eval(args.model, getattr(args, "device", None),
                                                 getattr(args, "dtype", None))
        summary = run_mvbench(args.data_root, settings, processor, engine, protocol=proto,
                              layout=getattr(args, "layout", None), video_root=args.video_root)
    elif args.bench == "ovobench":
        from mmrl.eval.ovobench_runner import run_ovobench

        if not args.anno or not args.video_root:
            raise ConfigError("mmrl eval ovobench: --anno and --video-root are required (or --score-only FILES)")
        _exists(args.anno, "--anno")
        _exists(args.video_root, "--video-root")
        settings = settings_from_args(args, "ovobench")
        model, processor, engine = load_for_eval(args.model, getattr(args, "device", None),
                                                 getattr(args, "dtype", None))
        summary = run_ovobench(args.anno, args.video_root, settings, processor, engine,
                               chunked=bool(getattr(args, "chunked", False)))
    else:
        raise ConfigError(f"unknown benchmark '{args.bench}' (mvbench | ovobench)")
    return summary


def print_report(summary: Mapping[str, Any], paths: Mapping[str, str]) -> None:
    """The markdown report on stdout, then where the files are."""
    from mmrl.eval.report import markdown

    print(markdown(summary), end="")
    print(f"\nreport: {paths['md']}  summary: {paths['json']}")
    sys.stdout.flush()


__all__ = ["EvalSettings", "generate_records", "final_records", "check_run", "repair_jsonl", "load_for_eval",
           "run_benchmark_cli", "score_only", "sampling_params", "print_report"]
