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
        fallback = viewset.fallback_warning(items)
        if fallback:
            print(f"mmrl: warning: {fallback}")
    preds = Path(out_dir) / "predictions.jsonl"
    # items rejected when the file was read count in n, are scored wrong and listed with their reason, exactly as
    # those that fail to decode (never left out: that would inflate the accuracy)
    res = evaluate_samples(None, processor, items, data_config(bdef), bdef.generation.max_new_tokens,
                           viewset=viewset, engine=engine, predictions_path=str(preds),
                           load_errors=notes["skipped_at_load"])
    if viewset is not None and viewset.has_abstain:
        res["abstain_option"] = viewset.abstain_text
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
    note = abstain_note(scores)
    return "\n".join(lines) + "\n" + (f"\n{note}\n" if note else "")


def abstain_note(scores: Dict[str, Any]) -> str:
    """Why accuracy under a view set with an abstain role differs from accuracy without it ('' otherwise)."""
    option = scores.get("abstain_option")
    if not option:
        return ""
    return (f"Every prompt, the original view's too, carries the view set's abstention option {option!r} as one more "
            "candidate (the same prompt on every view, so that the option does not tell the views apart): the "
            "accuracy counts a chosen abstention as wrong on the original clip and is not comparable with a run "
            "without --viewset.")


def line(scores: Dict[str, Any]) -> str:
    note = abstain_note(scores)
    return (f"accuracy {100 * scores['accuracy']:.2f} (n={scores['n']}, errors {scores['errors']})"
            + (f"; with the abstention option {scores['abstain_option']!r} on every prompt (see the table)" if note else ""))


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
