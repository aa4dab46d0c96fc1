"""Held-out perception accuracy of a checkpoint per attribute (the base's table, ``mmrl base build``).

Choice items: greedy decoding scored by ``mmrl.eval.synthetic.evaluate_samples`` (the parsed letter equals the
gold's, ``cannot be determined`` included); open captions: greedy decoding scored by the ``text_exact`` verifier
(normalised exact match). Each row also carries chance (the mean of 1 / candidates; 0 for a caption) and the
binomial standard error ``sqrt(p (1 - p) / n)``, so that a reader sees which attributes are above chance.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, List, Optional

from mmrl.data.annotations import load_samples
from mmrl.rewards.verifiers import verify
from mmrl.rollout.base import SamplingParams, build_engine
from mmrl.rollout.step_inputs import build_step_inputs


def _captions(engine, processor, samples, data_cfg, max_new_tokens: int, batch: int = 32) -> List[float]:
    out: List[float] = []
    params = SamplingParams(max_new_tokens=max_new_tokens, greedy=True)
    for s in range(0, len(samples), batch):
        chunk = samples[s : s + batch]
        si = build_step_inputs(chunk, processor, data_cfg, lambda role, n_views: 1, None, seed=0)
        by_id = {c.id: c for c in chunk}
        for t in engine.generate(si.requests, params):
            out.append(verify("text_exact", t.text, by_id[t.sample_id]))
        out.extend(0.0 for _ in si.skipped)
    return out


def evaluate_perception(model, processor, test_path: str, data_cfg, caption_tokens: int = 16) -> Dict[str, Dict]:
    """``{qtype: {"acc", "n", "chance", "se"}}`` over the split ``test_path``, plus ``"macro"`` (mean over types)."""
    from mmrl.data.synth_perception import chance

    from mmrl.eval.synthetic import evaluate_samples

    samples, skipped = load_samples(test_path, data_cfg.media_root, on_error="raise")
    raw = {it["id"]: it for it in json.loads(Path(test_path).read_text())}
    engine = build_engine("hf", model=model, processor=processor)
    choice = [s for s in samples if s.is_choice]
    text = [s for s in samples if not s.is_choice]
    rows: Dict[str, Dict] = {}
    if choice:
        res = evaluate_samples(model, processor, choice, data_cfg, max_new_tokens=4, engine=engine)
        for q, acc in res["per_qtype"].items():
            of_q = [s for s in choice if s.qtype == q]
            rows[q] = {"acc": acc, "n": len(of_q), "chance": sum(chance(raw[s.id]) for s in of_q) / len(of_q)}
    by_type: Dict[str, List] = {}
    for s in text:
        by_type.setdefault(s.qtype, []).append(s)
    model.eval()
    for q, ss in by_type.items():
        scores = _captions(engine, processor, ss, data_cfg, caption_tokens)
        rows[q] = {"acc": sum(scores) / len(scores), "n": len(scores), "chance": 0.0}
    for r in rows.values():
        r["se"] = math.sqrt(r["acc"] * (1 - r["acc"]) / r["n"]) if r["n"] else float("nan")
    out = dict(sorted(rows.items()))
    out["macro"] = {"acc": sum(r["acc"] for r in rows.values()) / len(rows), "n": sum(r["n"] for r in rows.values()),
                    "chance": sum(r["chance"] for r in rows.values()) / len(rows), "se": float("nan")}
    return out


def perception_table(rows: Dict[str, Dict], title: Optional[str] = None) -> str:
    """The per-attribute table (markdown): accuracy %, standard error, chance %, items."""
    lines = [f"**{title}**", ""] if title else []
    lines += ["| attribute | held-out accuracy % | s.e. | chance % | items |", "|---|---:|---:|---:|---:|"]
    for q, r in rows.items():
        se = "" if math.isnan(r["se"]) else f"{100 * r['se']:.1f}"
        name = "**macro**" if q == "macro" else q
        lines.append(f"| {name} | {100 * r['acc']:.1f} | {se} | {100 * r['chance']:.1f} | {r['n']} |")
    return "\n".join(lines)
