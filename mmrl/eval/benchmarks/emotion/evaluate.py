"""Evaluate a checkpoint on an emotion test set (issue 17): greedy four-step responses, parsed, scored by
``mmrl.eval.benchmarks.emotion.metrics`` (top-1, KL to the annotators, top-k overlap, candidate diversity, box IoU, well-formed rate).

``load_emotion_samples(path)`` reads the three layouts: an mmrl annotation file (the mood world's ``test.json``,
``mmrl data synth --kind mood``), an Emotion6 folder (``ground_truth.txt``) or an EmoSet folder (``<split>.json``)
(``mmrl.data.emotion_sets``). The prompt is the training prompt (``mmrl.media.prompts`` with the data config's
``prompt.instruction``, the four-step instruction of ``dspo_prompt``), so a DSPO checkpoint is asked what it was
trained on. A sample that cannot be used (rejected at load with ``on_error: skip``, or failing to decode) counts in
``n`` as a malformed response and is listed in the predictions with its reason.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from mmrl.errors import ConfigError

_K = re.compile(r"List (\d+) candidate")


def k_of_instruction(instruction: str) -> Optional[int]:
    """K of a ``dspo_prompt`` instruction ("List K candidate emotions"); None when it names none (any K >= 1)."""
    m = _K.search(instruction)
    return int(m.group(1)) if m else None


def load_emotion_samples(path: str, split: str = "test", on_error: str = "raise") -> Tuple[list, list]:
    """``(samples, skipped)`` of an annotation file, an Emotion6 folder or an EmoSet folder (``<split>.json``)."""
    from mmrl.data.annotations import load_samples
    from mmrl.data.emotion_sets import load_emoset, load_emotion6

    if os.path.isfile(path):
        return load_samples(path, None, on_error=on_error)
    if os.path.isfile(os.path.join(path, "ground_truth.txt")):
        return load_emotion6(path, on_error=on_error)
    if os.path.isfile(os.path.join(path, f"{split}.json")):
        return load_emoset(path, split, on_error=on_error)
    raise ConfigError(f"{path}: not an annotation file, an Emotion6 folder (ground_truth.txt) or an EmoSet folder "
                      f"({split}.json)")


def generate(samples, processor, data_cfg, engine, max_new_tokens: int, batch_prompts: int = 16) -> Tuple[list, list]:
    """Greedy responses: ``(rows, skipped)``, a row ``{id, response, truncated}`` per usable sample."""
    from mmrl.rollout.base import SamplingParams
    from mmrl.rollout.step_inputs import build_step_inputs

    params = SamplingParams(max_new_tokens=max_new_tokens, greedy=True)
    rows, skipped = [], []
    for s in range(0, len(samples), batch_prompts):
        si = build_step_inputs(samples[s: s + batch_prompts], processor, data_cfg, lambda role, n_views: 1, None, seed=0)
        skipped.extend(si.skipped)
        for t in (engine.generate(si.requests, params) if si.requests else []):
            rows.append({"id": t.sample_id, "response": t.text, "truncated": bool(t.truncated)})
    return rows, skipped


def score(samples, rows: List[Dict[str, Any]], lexicon, k: Optional[int]) -> Dict[str, Any]:
    """``emotion_metrics`` over every sample (one without a row scores as malformed) plus the malformed reasons."""
    from mmrl.eval.benchmarks.emotion.metrics import emotion_metrics
    from mmrl.rewards.dspo_format import DSPOParse, count_reasons, parse_dspo
    from mmrl.rewards.dspo_rewards import evidence_box

    by_id = {r["id"]: r for r in rows}
    parses = [parse_dspo(by_id[s.id]["response"], k=k, truncated=by_id[s.id]["truncated"]) if s.id in by_id
              else DSPOParse(False, "error") for s in samples]
    out = emotion_metrics(parses, [str(s.answer) for s in samples], [s.meta.get("emotion_dist") for s in samples],
                          [evidence_box(s, None) if s.evidence.boxes else None for s in samples], lexicon, k=k)
    out["malformed"] = dict(sorted(count_reasons(parses).items()))
    return out


def evaluate_emotion(samples, processor, data_cfg, engine, lexicon, max_new_tokens: int, k: Optional[int],
                     predictions_path: Optional[str] = None, load_errors=(), batch_prompts: int = 16) -> Dict[str, Any]:
    """Generate, score, and write the predictions JSONL (``{id, response, truncated}`` or ``{id, error}``)."""
    rows, skipped = generate(samples, processor, data_cfg, engine, max_new_tokens, batch_prompts)
    errors = list(load_errors) + list(skipped)
    known = {s.id for s in samples}
    from mmrl.data.schema import Sample

    missing = [Sample(id=sid, question="", candidates=[], answer="") for sid, _ in load_errors if sid not in known]
    result = score(list(samples) + missing, rows, lexicon, k)
    result["errors"] = len(errors)
    if predictions_path:
        Path(predictions_path).parent.mkdir(parents=True, exist_ok=True)
        with open(predictions_path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
            for sid, why in errors:
                f.write(json.dumps({"id": sid, "error": why}) + "\n")
    return result
