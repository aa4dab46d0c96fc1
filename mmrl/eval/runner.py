"""The one generic benchmark runner: load items, build requests, generate, parse, score, aggregate, resume, report.

``run_benchmark`` drives any benchmark through its hooks (``mmrl.eval.hooks``): ``load`` -> ``queries`` (the
runner decodes each query's frames with the YAML's ``sampling.rule`` and generates through
``mmrl.eval.driver``, resumable by query id) or ``evaluate`` -> ``score`` -> the report. ``run.json`` pins the
resolved protocol (``mmrl.eval.protocol.describe``: every value, defaults included), the model and the inputs,
so a resume never mixes settings; ``summary.json`` records the same resolved protocol and the overrides given.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Tuple

from mmrl.eval.benchmark_def import BenchmarkDef
from mmrl.eval.driver import check_run, final_records, generate_records, sampling_params
from mmrl.eval.frame_rules import prepare_frames
from mmrl.eval.hooks import BenchmarkHooks, EvalInputs
from mmrl.eval.protocol import describe
from mmrl.eval.report import build_summary, write_report
from mmrl.media.inputs import resize_factor


@dataclass
class EvalSettings:
    """How to run (not what: that is the resolved protocol)."""

    out_dir: str
    batch: int = 8
    limit: int = 0  # items per task (0 = all)
    tasks: List[str] = field(default_factory=list)
    retry_errors: bool = False
    progress: bool = True
    model_name: str = ""
    overrides: Dict[str, Any] = field(default_factory=dict)  # recorded in the report


def _inputs(hooks: BenchmarkHooks, inputs: EvalInputs) -> Dict[str, Any]:
    return {k: (os.path.abspath(v) if isinstance(v, str) else v) for k, v in dataclasses.asdict(inputs).items()
            if k in hooks.inputs and v is not None}


def _parser(parsers: Dict[str, str]) -> Any:
    """One parser name, or task -> parser when tasks differ."""
    return next(iter(parsers.values())) if len(set(parsers.values())) == 1 else parsers


def run_benchmark(bdef: BenchmarkDef, hooks: BenchmarkHooks, inputs: EvalInputs, settings: EvalSettings,
                  processor, engine) -> Tuple[Dict[str, Any], str]:
    """Evaluate; write ``predictions.jsonl``, ``summary.json`` and ``summary.md``; returns (summary, table)."""
    items, notes = hooks.load(bdef, inputs, settings.tasks, settings.limit)
    resolved = describe(bdef, hooks)
    out = Path(settings.out_dir)
    check_run(out, {"protocol": resolved, "model": settings.model_name, "inputs": _inputs(hooks, inputs),
                    "tasks": settings.tasks, "limit": settings.limit})
    if hooks.queries is not None:
        queries = hooks.queries(items, bdef, inputs, notes)
        cache: Dict[str, Any] = {}  # forward probes share their source video
        if bdef.generation.do_sample:
            import torch

            torch.manual_seed(bdef.generation.seed)
        factor = resize_factor(processor)  # sides multiples of the model's patch x merge size (32: Qwen3-VL)
        stats = generate_records(queries, lambda q: prepare_frames(q, bdef, cache, factor), processor, engine,
                                 sampling_params(bdef.generation), out, settings.batch, settings.retry_errors,
                                 settings.progress, label=bdef.name)
        records = final_records(queries, out)
        parsers = {q.task: q.parser for q in queries}
    else:
        records, stats = hooks.evaluate(items, bdef, inputs, processor, engine, out, notes)
        parsers = {t: bdef.parser_for(t) for t in bdef.task_names()}
    scores = hooks.score(records, items, bdef, out, notes)
    meta = {"model": settings.model_name, "inputs": _inputs(hooks, inputs), "protocol": resolved,
            "overrides": dict(settings.overrides), "batch": settings.batch, "limit": settings.limit,
            "run": stats, **{k: v for k, v in notes.items() if not k.startswith("_")}}
    summary = build_summary(bdef.name, bdef.protocol, _parser(parsers) if parsers else bdef.parser, scores,
                            records=records, meta=meta)
    table = hooks.table(scores)
    write_report(out, summary, table)
    return summary, table
