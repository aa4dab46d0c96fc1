"""Synthetic benchmark hooks (``eval/synthetic.yaml``): a held-out split of the synthetic world (or any
MVBench-format annotation file), optionally under a counterfactual view set.

The metrics are ``mmrl.eval.synthetic.evaluate_samples`` (accuracy per question type; with ``--viewset`` the
per-view metrics of ``mmrl.rollout.view_metrics``); these hooks only map the YAML onto its ``DataConfig``
(``sampling.max_frames`` -> ``nframes``, ``pixels`` -> ``min/max_pixels``, ``data.on_error``) and generation
budget. The prompt is the training prompt (``mmrl.media.prompts``), so the YAML has no ``prompt`` section.
It drives the engine itself (``evaluate``): view expansion happens per sample. Not resumable: small by design.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from mmrl.errors import ConfigError
from mmrl.eval.benchmark_def import BenchmarkDef
from mmrl.eval.hooks import BenchmarkHooks, EvalInputs, register_benchmark
from mmrl.eval.report import read_jsonl

FIELDS = ("data.on_error", "sampling.max_frames", "pixels.min_pixels", "pixels.max_pixels",
          "generation.max_new_tokens")


def data_config(bdef: BenchmarkDef):
    from mmrl.config import DataConfig

    kw: Dict[str, Any] = {"nframes": bdef.sampling.max_frames, "on_error": bdef.data.on_error}
    return DataConfig(**kw, **bdef.pixels.overrides())


def load(bdef: BenchmarkDef, inputs: EvalInputs, tasks: Sequence[str], limit: int):
    from mmrl.data.annotations import load_samples

    if tasks:
        raise ConfigError("mmrl eval synthetic has no tasks (accuracy is reported per question type)")
    samples, skipped = load_samples(inputs.data, None, on_error=bdef.data.on_error)
    return (samples[:limit] if limit else samples), {"skipped_at_load": skipped}


def evaluate(items: List[Any], bdef: BenchmarkDef, inputs: EvalInputs, processor, engine, out_dir: Path,
             notes: Dict[str, Any]):
    from mmrl.eval.synthetic import evaluate_samples

    viewset = None
    if inputs.viewset:
        from mmrl.views import ViewSet

        viewset = ViewSet.load(inputs.viewset)
    preds = Path(out_dir) / "predictions.jsonl"
    # items rejected when the file was read count in n, are scored wrong and listed with their reason, exactly as
    # those that fail to decode (never left out: that would inflate the accuracy)
    res = evaluate_samples(None, processor, items, data_config(bdef), bdef.generation.max_new_tokens,
                           viewset=viewset, engine=engine, predictions_path=str(preds),
                           load_errors=notes["skipped_at_load"])
    notes["_result"] = res
    return read_jsonl(preds), {"samples": len(items), "errors": res["errors"]}


def score(records, items, bdef: BenchmarkDef, out_dir: Optional[Path], notes: Dict[str, Any]) -> Dict[str, Any]:
    return notes["_result"]


def table(scores: Dict[str, Any]) -> str:
    lines = ["| question type | acc (%) |", "|---|---|"]
    lines += [f"| {q} | {100 * a:.2f} |" for q, a in scores["per_qtype"].items()]
    lines += [f"| **accuracy** (n={scores['n']}, errors {scores['errors']}) | {100 * scores['accuracy']:.2f} |",
              f"| macro accuracy | {100 * scores['macro_accuracy']:.2f} |"]
    for k, v in (scores.get("view_metrics") or {}).items():
        lines.append(f"| view: {k} | {v if not isinstance(v, float) else round(v, 4)} |")
    return "\n".join(lines) + "\n"


def line(scores: Dict[str, Any]) -> str:
    return f"accuracy {100 * scores['accuracy']:.2f} (n={scores['n']}, errors {scores['errors']})"


def describe(bdef: BenchmarkDef) -> Dict[str, str]:
    """What the YAML does not hold: these come from the training path."""
    return {"sampling.rule": "training loader (mmrl.media.decode.decode_video: qwen-vl-utils smart_nframes with "
                             "nframes = sampling.max_frames, linspace over the clip)",
            "prompt": "the training prompt (mmrl.media.prompts.build_messages)",
            "parser": "mmrl.rewards.parsing.parse_choice (a letter among the candidates)",
            "generation.do_sample": "false"}


HOOKS = register_benchmark(BenchmarkHooks(
    name="synthetic", fields=FIELDS, load=load, evaluate=evaluate, score=score, table=table, line=line,
    inputs=("data", "viewset"), describe=describe))
