"""Emotion benchmark hooks (``eval/emotion.yaml``; issue 17): ``mmrl eval emotion --model CKPT --data PATH``.

``--data`` is a mood-world annotation file, an Emotion6 folder or an EmoSet folder (``data.test_json`` names the
EmoSet split file); ``mmrl.eval.benchmarks.emotion.evaluate`` generates greedy four-step responses with the training prompt
(``prompt.post_prompt`` is the data config's ``prompt.instruction``, ``prompt.system`` its system turn) and scores
them: top-1, KL to the annotator distribution, top-k overlap (k = the K the instruction asks for), candidate
diversity in VAD (the shipped lexicon), box IoU with the evidence box, well-formed rate, malformed reasons.
It drives the engine itself (``evaluate``); not resumable (small by design).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from mmrl.errors import ConfigError
from mmrl.eval.benchmark_def import BenchmarkDef
from mmrl.eval.hooks import BenchmarkHooks, EvalInputs, register_benchmark
from mmrl.eval.report import read_jsonl

FIELDS = ("data.on_error", "data.test_json", "pixels.min_pixels", "pixels.max_pixels", "generation.max_new_tokens",
          "prompt.system", "prompt.post_prompt")
METRICS = ("top1", "kl_to_annotators", "topk_overlap", "candidate_diversity", "box_iou", "well_formed")


def data_config(bdef: BenchmarkDef):
    from mmrl.config import DataConfig, PromptConfig

    kw: Dict[str, Any] = {"on_error": bdef.data.on_error,
                          "prompt": PromptConfig(system=bdef.prompt.system or None, instruction=bdef.prompt.post_prompt)}
    return DataConfig(**kw, **bdef.pixels.overrides())


def load(bdef: BenchmarkDef, inputs: EvalInputs, tasks: Sequence[str], limit: int):
    from mmrl.eval.benchmarks.emotion.evaluate import load_emotion_samples

    if tasks:
        raise ConfigError("mmrl eval emotion has no tasks")
    split = os.path.splitext(bdef.data.test_json)[0]
    samples, skipped = load_emotion_samples(inputs.data, split, on_error=bdef.data.on_error)
    return (samples[:limit] if limit else samples), {"skipped_at_load": skipped}


def evaluate(items: List[Any], bdef: BenchmarkDef, inputs: EvalInputs, processor, engine, out_dir: Path,
             notes: Dict[str, Any]):
    from mmrl.eval.benchmarks.emotion.evaluate import evaluate_emotion, k_of_instruction
    from mmrl.rewards.dspo_rewards import get_lexicon

    preds = Path(out_dir) / "predictions.jsonl"
    res = evaluate_emotion(items, processor, data_config(bdef), engine, get_lexicon(""),
                           bdef.generation.max_new_tokens, k_of_instruction(bdef.prompt.post_prompt),
                           predictions_path=str(preds), load_errors=notes["skipped_at_load"])
    notes["_result"] = res
    return read_jsonl(preds), {"samples": len(items), "errors": res["errors"]}


def score(records, items, bdef: BenchmarkDef, out_dir: Optional[Path], notes: Dict[str, Any]) -> Dict[str, Any]:
    return notes["_result"]


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def table(scores: Dict[str, Any]) -> str:
    count = {"kl_to_annotators": "n_dist", "topk_overlap": "n_dist", "box_iou": "n_box"}
    lines = ["| metric | value | samples |", "|---|---|---|"]
    lines += [f"| {m} | {_fmt(scores[m])} | {scores[count.get(m, 'n')]} |" for m in METRICS]
    bad = ", ".join(f"{k} {v}" for k, v in scores["malformed"].items()) or "none"
    lines.append(f"| malformed (by reason) | {bad} | {scores['n']} |")
    return "\n".join(lines) + "\n"


def line(scores: Dict[str, Any]) -> str:
    return (f"top1 {_fmt(scores['top1'])} well-formed {_fmt(scores['well_formed'])} (n={scores['n']}, "
            f"errors {scores['errors']})")


def describe(bdef: BenchmarkDef) -> Dict[str, str]:
    from mmrl.eval.benchmarks.emotion.evaluate import k_of_instruction

    return {"prompt": "the training prompt (mmrl.media.prompts.build_messages) with prompt.post_prompt as the "
                      "instruction", "parser": f"mmrl.rewards.dspo_format.parse_dspo (k = "
                                            f"{k_of_instruction(bdef.prompt.post_prompt)})",
            "generation.do_sample": "false"}


HOOKS = register_benchmark(BenchmarkHooks(
    name="emotion", fields=FIELDS, load=load, evaluate=evaluate, score=score, table=table, line=line,
    inputs=("data",), describe=describe))
