"""Held-out evaluation of tool episodes: greedy multi-turn rollouts with a tool suite (``rollout.tools``) on each
test sample, scored on the episode's final answer.

Per split: ``accuracy`` (the last model turn's letter, ``mmrl.rewards.parsing.parse_choice``), ``call_validity``
(valid calls / calls; ``tool_format``), ``calls_per_episode``, ``seek_iou`` (mean over episodes of the IoU of
the seeked intervals with the evidence; ``seek_iou``), ``seek_hit`` (share of episodes with IoU > 0),
``model_tokens_per_episode`` (tokens the model wrote) and ``tokens_per_episode`` (the whole sequence: prompt,
model turns and tool responses). Samples that cannot be decoded count in ``n`` and are scored wrong.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

from mmrl.data.schema import LETTERS
from mmrl.rewards.base import RewardContext
from mmrl.rewards.parsing import parse_choice
from mmrl.rewards.tool_use import seek_iou, tool_format
from mmrl.rollout.base import SamplingParams, build_engine
from mmrl.rollout.step_inputs import build_step_inputs


def episode_row(traj, sample, candidates) -> Dict:
    """One prediction row of a finished tool episode (also what ``mmrl.tools.trajectory_log`` keeps)."""
    ctx = [RewardContext(sample=sample, trajectory=traj, candidates=candidates, expected=traj.expected)]
    pred = parse_choice(traj.text, LETTERS[: len(candidates)])
    calls = [t for t in traj.turns if "tool" in t]
    return {"id": sample.id, "response": traj.text, "pred": pred, "expected": traj.expected,
            "correct": bool(pred is not None and pred == traj.expected), "calls": len(calls),
            "valid_calls": sum(bool(c["valid"]) for c in calls), "seek_iou": seek_iou(ctx)[0],
            "tool_format": tool_format(ctx)[0], "model_tokens": int(traj.loss_mask.sum()),
            "tokens": int(traj.prompt_ids.numel() + traj.response_ids.numel())}


def summarize(rows: List[Dict], errors: int = 0) -> Dict[str, float]:
    ok = [r for r in rows if "error" not in r]
    n, m = len(ok) + errors, max(len(ok), 1)
    calls = sum(r["calls"] for r in ok)
    return {"accuracy": sum(r["correct"] for r in ok) / n if n else 0.0, "n": n, "errors": errors,
            "call_validity": sum(r["valid_calls"] for r in ok) / calls if calls else 0.0,
            "calls_per_episode": calls / m, "seek_iou": sum(r["seek_iou"] for r in ok) / m,
            "seek_hit": sum(r["seek_iou"] > 0 for r in ok) / m,
            "model_tokens_per_episode": sum(r["model_tokens"] for r in ok) / m,
            "tokens_per_episode": sum(r["tokens"] for r in ok) / m}


def evaluate_tool_episodes(model, processor, samples, data_cfg, suite_path: str, max_new_tokens: int,
                           engine=None, batch_prompts: int = 16, predictions_path: Optional[str] = None,
                           load_errors=()) -> Dict:
    """Greedy tool episodes over ``samples``; the summary above (and ``per_qtype`` accuracy)."""
    from mmrl.rollout.agent_loop_tools import tool_loop
    from mmrl.tools.suite import load_suite

    engine = engine or build_engine("hf", model=model, processor=processor)
    loop = tool_loop(processor, load_suite(suite_path))
    params = SamplingParams(max_new_tokens=max_new_tokens, greedy=True)
    rows, skipped = [], list(load_errors)
    for s in range(0, len(samples), batch_prompts):
        si = build_step_inputs(samples[s : s + batch_prompts], processor, data_cfg, lambda role, n_views: 1, None, seed=0)
        skipped.extend(si.skipped)
        for t in loop.run(engine, si.requests, params) if si.requests else []:
            row = episode_row(t, si.samples[t.sample_id], si.candidates[(t.sample_id, t.view)])
            rows.append({**row, "qtype": si.samples[t.sample_id].qtype})
    out = summarize(rows, len(skipped))
    types = sorted({r["qtype"] for r in rows})
    out["per_qtype"] = {q: sum(r["correct"] for r in rows if r["qtype"] == q) / sum(r["qtype"] == q for r in rows)
                        for q in types}
    if predictions_path:
        Path(predictions_path).parent.mkdir(parents=True, exist_ok=True)
        with open(predictions_path, "w") as f:
            for r in rows + [{"id": sid, "error": why, "correct": False} for sid, why in skipped]:
                f.write(json.dumps(r) + "\n")
    return out
