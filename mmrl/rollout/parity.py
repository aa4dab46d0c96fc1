"""Sampler / trainer parity: an engine's sampling log-probs against the trainer's teacher-forced scorer.

PPO-style ratios assume the rollout engine samples from the policy the trainer scores. Any difference (image-token
counts, M-RoPE positions, precision, a stale cache after a weight sync) shows up here first:

    report = logprob_parity(engine, model, requests, params, pad_id)   # same tokens, two computations
    assert report.max_abs <= 1e-5   # the HF engine on CPU; vLLM in bf16 needs a looser bound

``python -m mmrl.rollout.parity --engine vllm --model tiny --data world/train.json`` runs it from the shell
(``scripts/gpu_smoke.sh``) and prints the report as JSON, with the engine's generation throughput.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import List

import torch

from mmrl.rollout.base import RolloutRequest, SamplingParams
from mmrl.models.scoring import response_logprobs


@dataclass
class ParityReport:
    sequences: int
    tokens: int
    max_abs: float  # max |engine log-prob - scorer log-prob| over all response tokens
    mean_abs: float
    worst: str  # "sample/view/pack@token" of the max
    tokens_per_s: float  # engine generation throughput on these requests
    generate_seconds: float = 0.0  # the engine's generation (the device synchronised)
    score_seconds: float = 0.0  # the scorer's teacher-forced pass over the same tokens

    def ok(self, tol: float) -> bool:
        return self.tokens > 0 and self.max_abs <= tol


@torch.no_grad()
def logprob_parity(engine, model, requests: List[RolloutRequest], params: SamplingParams, pad_id: int,
                   micro_batch: int = 16) -> ParityReport:
    """Generate with ``engine``, re-score the same tokens with ``response_logprobs(model)``, compare per token."""
    sync = torch.cuda.synchronize if next(model.parameters()).is_cuda else (lambda: None)
    t0 = time.perf_counter()
    trajs = engine.generate(requests, params)
    sync()
    dt = time.perf_counter() - t0
    items = [(requests[t.inputs_key].inputs, t.response_ids) for t in trajs]
    was_training = model.training
    model.eval()
    try:
        t1 = time.perf_counter()
        scored = response_logprobs(model, items, 1.0 if params.greedy else params.temperature, micro_batch, pad_id)
        sync()
        score_s = time.perf_counter() - t1
    finally:
        model.train(was_training)
    worst, max_abs, total, n_tok = "-", 0.0, 0.0, 0
    for t, s in zip(trajs, scored):
        d = (t.logprobs.float().cpu() - s.float().cpu()).abs()
        if d.numel() == 0:
            continue
        i = int(d.argmax())
        if float(d[i]) >= max_abs:
            max_abs, worst = float(d[i]), f"{t.sample_id}/{t.view}/{t.pack_id}@{i}"
        total += float(d.sum())
        n_tok += int(d.numel())
    return ParityReport(sequences=len(trajs), tokens=n_tok, max_abs=max_abs, mean_abs=total / max(n_tok, 1),
                        worst=worst, tokens_per_s=n_tok / max(dt, 1e-9), generate_seconds=dt, score_seconds=score_s)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="engine sampling log-probs vs the trainer's scorer")
    p.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    p.add_argument("--model", default="tiny")
    p.add_argument("--data", required=True, help="annotation file (e.g. a synthetic world's train.json)")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--nframes", type=int, default=4)
    p.add_argument("--max-pixels", type=int, default=3136)
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--out", default=None, help="also write the report as JSON here")
    a = p.parse_args(argv)
    from mmrl.config import DataConfig
    from mmrl.data.annotations import load_samples
    from mmrl.models.loading import load_model, load_processor, resolve_device
    from mmrl.rollout.base import build_engine
    from mmrl.rollout.step_inputs import build_step_inputs

    model = load_model(a.model, a.dtype, device=resolve_device("auto"))
    processor = load_processor(a.model)
    extra = {"dtype": a.dtype} if a.engine == "vllm" else {}
    engine = build_engine(a.engine, model=model, processor=processor, **extra)
    samples, _ = load_samples(a.data, None, on_error="skip")
    si = build_step_inputs(samples[: a.prompts], processor, DataConfig(nframes=a.nframes, max_pixels=a.max_pixels),
                           lambda role, n_views: a.n)
    for i, r in enumerate(si.requests):
        r.meta["seed"] = i
    params = SamplingParams(temperature=a.temperature, max_new_tokens=a.max_new_tokens)
    report = logprob_parity(engine, model, si.requests, params, processor.tokenizer.pad_token_id)
    res = {"engine": a.engine, "dtype": a.dtype, "tol": a.tol, "ok": report.ok(a.tol), **asdict(report)}
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
