"""What ``scripts/gpu_smoke.sh`` runs in Python (issue 26 item 10): build the reduced Qwen2.5-VL-7B, run the checks
of ``mmrl.train.gpu_checks`` on one device, print one table.

    python -m mmrl.train.gpu_smoke build --out runs/gpu_smoke/model
    python -m mmrl.train.gpu_smoke run --model runs/gpu_smoke/model --out runs/gpu_smoke/checks.json [--no-vllm]
    python -m mmrl.train.gpu_smoke table runs/gpu_smoke/checks.json

``run`` writes ``{check: {metric: value, ..., ok}}``; without ``--no-vllm`` it starts one colocated vLLM engine for
the cache-reset and positions checks. On CPU (``--no-vllm``, a small ``--model``) every other check runs as is.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Dict, List

import torch


def run_checks(model_dir: str, vllm: bool = True, tol: float = 0.05) -> Dict[str, Dict[str, object]]:
    from mmrl.config import LoraConfig
    from mmrl.models.loading import load_model, load_processor, resolve_device
    from mmrl.models.scoring import response_logprobs
    from mmrl.train import gpu_checks as gc

    device = resolve_device("auto")
    proc = load_processor(model_dir)
    pad = proc.tokenizer.pad_token_id
    size = 224 if device.startswith("cuda") else 56
    out: Dict[str, Dict[str, object]] = {}

    def timed(name, fn):
        t0 = time.perf_counter()
        try:
            out[name] = fn()
        except Exception as e:  # one failed check must not hide the others' numbers
            out[name] = {"error": f"{type(e).__name__}: {e}"[:200], "ok": False}
        out[name]["seconds"] = round(time.perf_counter() - t0, 1)
        print(f"[smoke] {name}: {json.dumps(out[name], default=str)}", flush=True)

    timed("precision", lambda: gc.precision_check(
        lambda: load_model(model_dir, "bfloat16", freeze_vision=True, device=device), device=device))

    def ckpt():
        model = load_model(model_dir, "float32", device=device)
        return gc.checkpointing_check(model, gc.video_items(proc, 4, 8, 24, frames=4, size=size), pad)

    timed("checkpointing", ckpt)

    def lora():
        lcfg = LoraConfig(enabled=True, r=64, alpha=128, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                           "gate_proj", "up_proj", "down_proj"])
        model = load_model(model_dir, "bfloat16", lora=lcfg, device=device).eval()
        items = gc.video_items(proc, 1, 2, 8, frames=4, size=size)

        def probe():
            with torch.no_grad():
                return torch.cat(response_logprobs(model, items, pad_id=pad))

        return gc.lora_sync_check(model, syncs=50, probe=probe)

    timed("lora_sync", lora)
    if not vllm:
        return out
    from mmrl.rollout.base import build_engine

    model = load_model(model_dir, "bfloat16", device=device).eval()
    req = gc.long_clip_request(proc)
    engine = build_engine("vllm", model=model, processor=proc, dtype="bfloat16", gpu_memory_utilization=0.3,
                          max_model_len=req.inputs.num_tokens + 64)
    timed("cache_reset", lambda: gc.cache_reset_check(engine, model, req, pad, tol))
    timed("positions", lambda: gc.positions_check(engine, model, req, pad, tol))
    return out


def table(results: Dict[str, Dict[str, object]]) -> str:
    """One markdown table: check, ok, its numbers."""
    rows = ["| check | ok | numbers |", "|---|---|---|"]
    for name, res in results.items():
        nums = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in res.items() if k != "ok")
        rows.append(f"| {name} | {'PASS' if res.get('ok') else 'FAIL'} | {nums} |")
    return "\n".join(rows)


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", required=True)
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--no-vllm", action="store_true")
    r.add_argument("--tol", type=float, default=0.05, help="max |vLLM - scorer| log-prob gap (bf16)")
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    a = p.parse_args(argv)
    if a.cmd == "build":
        from mmrl.train.gpu_checks import reduced_qwen2_5_vl_7b

        print(reduced_qwen2_5_vl_7b(a.out))
        return 0
    if a.cmd == "run":
        res = run_checks(a.model, vllm=not a.no_vllm, tol=a.tol)
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1, default=str)
        return 0 if all(v.get("ok") for v in res.values()) else 1
    merged: Dict[str, Dict[str, object]] = {}
    for path in a.files:
        with open(path) as f:
            merged.update(json.load(f))
    print(table(merged))
    return 0 if all(v.get("ok") for v in merged.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
