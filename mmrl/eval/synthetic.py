"""Held-out evaluation on a synthetic (or any MVBench-format) split: greedy decoding, accuracy per question type,
predictions JSONL; with a view set, the per-view metrics of ``mmrl.rollout.view_metrics`` too, each rate with the
number of responses behind it (``n/<metric>``). For the held-out contract metrics use ``views/bpo_eval.yaml``:
its null views are canvases no training stage shows (``mmrl.views`` ``canvas`` / ``gray`` values other than
training's), stability counts only views that change the pixels and sensitivity is scored against each view's
expected (mapped) answer."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional

from mmrl.data.annotations import load_samples
from mmrl.data.schema import ANSWER_ABSTAIN, LETTERS
from mmrl.rewards.parsing import parse_choice
from mmrl.rollout.base import SamplingParams, build_engine
from mmrl.rollout.step_inputs import build_step_inputs
from mmrl.rollout.view_metrics import view_metrics


def evaluate_samples(model, processor, samples, data_cfg, max_new_tokens: int = 8, viewset=None,
                     batch_prompts: int = 32, engine=None, predictions_path: Optional[str] = None,
                     load_errors=()) -> Dict:
    """Greedy accuracy over ``samples``. A sample that cannot be used, whether rejected when the annotation file
    was read (``load_errors``: ``(id, reason)`` pairs from ``load_samples``) or failing to decode here, counts in
    ``n``, is scored wrong, and is listed in the predictions with its reason (``errors`` counts them)."""
    engine = engine or build_engine("hf", model=model, processor=processor)
    per_type: Dict[str, List[float]] = defaultdict(list)
    rows, skipped = [], list(load_errors)
    # view metrics are ratios (and F1 is not even a ratio of sums): pool every trajectory of the split and
    # compute them once, never as a weighted mean of per-chunk values
    all_trajs, seen = [], SimpleNamespace(candidates={}, samples={}, views={}, skipped_views=[])
    params = SamplingParams(max_new_tokens=max_new_tokens, greedy=True)
    for s in range(0, len(samples), batch_prompts):
        chunk = samples[s : s + batch_prompts]
        si = build_step_inputs(chunk, processor, data_cfg, lambda role, n_views: 1, viewset, seed=0)
        skipped.extend(si.skipped)
        trajs = engine.generate(si.requests, params) if si.requests else []
        for t in trajs:
            cands = si.candidates[(t.sample_id, t.view)]
            pred = parse_choice(t.text, LETTERS[: len(cands)])
            sample = si.samples[t.sample_id]
            correct = pred is not None and pred == t.expected
            if t.expected == ANSWER_ABSTAIN:  # right when the abstention option is chosen, whatever its letter
                abst = viewset.abstain_text if viewset is not None else None
                correct = pred is not None and abst in cands and pred == LETTERS[cands.index(abst)]
            if t.role == "anchor":
                per_type[sample.qtype].append(float(correct))
            rows.append({"id": t.sample_id, "qtype": sample.qtype, "view": t.view, "role": t.role, "response": t.text,
                         "pred": pred, "expected": t.expected, "correct": bool(correct)})
        if viewset is not None:
            seen.skipped_views.extend(si.skipped_views)
        if viewset is not None and trajs:
            all_trajs.extend(trajs)
            seen.candidates.update(si.candidates)
            seen.samples.update(si.samples)
            seen.views.update(si.views)
    for sid, why in skipped:  # never silently dropped: listed and scored wrong
        rows.append({"id": sid, "error": why, "correct": False})
    n = sum(len(v) for v in per_type.values()) + len(skipped)
    correct = sum(sum(v) for v in per_type.values())
    result = {
        "accuracy": correct / n if n else 0.0,
        "per_qtype": {k: sum(v) / len(v) for k, v in sorted(per_type.items())},
        "macro_accuracy": (sum(sum(v) / len(v) for v in per_type.values()) / len(per_type)) if per_type else 0.0,
        "n": n, "errors": len(skipped),
    }
    if all_trajs:
        result["view_metrics"] = view_metrics(all_trajs, seen, viewset.abstain_text)
    if predictions_path:
        Path(predictions_path).parent.mkdir(parents=True, exist_ok=True)
        with open(predictions_path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return result


def evaluate_checkpoint(model_path: str, data_path: str, data_cfg, out_dir: Optional[str] = None, viewset=None,
                        limit: int = 0) -> Dict:
    from mmrl.models.loading import load_model, load_processor

    model, processor = load_model(model_path), load_processor(model_path)
    samples, skipped = load_samples(data_path, data_cfg.media_root, on_error=data_cfg.on_error)
    if limit:
        samples = samples[:limit]
    preds = str(Path(out_dir) / "predictions.jsonl") if out_dir else None
    res = evaluate_samples(model, processor, samples, data_cfg, viewset=viewset, predictions_path=preds,
                           load_errors=skipped)
    if out_dir:
        (Path(out_dir) / "summary.json").write_text(json.dumps(res, indent=2))
    return res
