"""Rollout generation with vLLM's CPU build against the HF engine (fused decode and eager), side by side, by
response length, with peak memory; and one RL step of each engine.

    OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python bench/vllm_rollout.py \\
        [--lengths 64 256 512] [--models tiny real3b] [--prompts 8] [--n 8] [--reps 3]

Each (model, engine) runs in its own process (peak RSS is that process's ``ru_maxrss``; vLLM keeps its engine in
the process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``). Per length: 8 prompts of a synthetic image world x 8 samples,
temperature 1, one ``engine.generate``, ``--reps`` times; the figure is generated tokens per CPU second of the
process (median; CPU seconds, not wall: the shared box's load scatters wall time) and its ratio to the HF engine's
fused decode. Models: ``tiny`` (the embedded tiny Qwen2.5-VL) and ``real3b`` (Qwen2.5-VL-3B's widths, heads, KV heads,
vocabulary 151,936 and vision shape, at text and vision depth 2, random init). ``--rl-step``: one GRPO step of
``configs/demo.yaml`` (tiny) with the HF engine and with vLLM through ``mmrl train``, the second step's rollout / scoring / update seconds.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]
ARMS = ("hf-eager", "hf-fused", "vllm")


def model_path(name: str, cache: Path) -> str:
    from mmrl.models.tiny import ensure_tiny_model, make_tiny_model

    if name == "tiny":
        return str(ensure_tiny_model())
    from mmrl.train.device_check import QWEN2_5_VL_3B

    path = cache / "real3b-depth2"
    if not (path / "mmrl_tiny_spec.json").exists():
        make_tiny_model(path, dataclasses.replace(QWEN2_5_VL_3B, text_layers=2, vision_layers=2, tokenizer="qwen",
                                                  fullatt_block_indexes=[1], max_pixels=None))
    return str(path)


def one_arm(arm: str, path: str, world: str, lengths, prompts: int, n: int, reps: int) -> dict:
    """In this process: build the engine, warm it, then time ``generate`` at each length."""
    from floor import step_prompts
    from mmrl.models.loading import load_model, load_processor
    from mmrl.rollout.base import RolloutRequest, SamplingParams, build_engine

    proc, model = load_processor(path), load_model(path, "float32")
    inputs = step_prompts({"model": path, "world": world, "prompts_per_step": prompts, "steps": 1}, proc)[0]
    reqs = [RolloutRequest(inputs=p, n=n, sample_id=str(i), group_id=i, meta={"seed": i}) for i, p in enumerate(inputs)]
    if arm == "vllm":
        eng = build_engine("vllm", model=model, processor=proc, dtype="float32", max_model_len=2048)
    else:
        eng = build_engine("hf", model=model, processor=proc, max_batch_sequences=prompts * n,
                           fast_decode=arm == "hf-fused")
    eng.generate(reqs[:1], SamplingParams(max_new_tokens=2))
    out = {}
    for T in lengths:
        rates = []
        for _ in range(reps):
            c0 = time.process_time()
            trajs = eng.generate(reqs, SamplingParams(temperature=1.0, max_new_tokens=T))
            rates.append(sum(t.response_ids.numel() for t in trajs) / (time.process_time() - c0))
        out[str(T)] = statistics.median(rates)
    return {"tokens_per_cpu_s": out, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def rl_step(arm: str, world: str, out: str) -> dict:
    cmd = [sys.executable, "-m", "mmrl", "train", "--config", str(REPO / "configs/demo.yaml"),
           f"data.train={world}/train.json", f"data.test={world}/test.json", "train.eval_every=0", "train.steps=2",
           f"train.out_dir={out}", f"rollout.engine={'vllm' if arm == 'vllm' else 'hf'}"]
    subprocess.run(cmd, check=True, capture_output=True)
    row = [json.loads(x) for x in Path(out, "metrics.jsonl").read_text().splitlines()][-1]
    return {k: row.get(k, float("nan")) for k in ("time/rollout", "time/scoring", "time/update")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 512])
    p.add_argument("--models", nargs="+", default=["tiny", "real3b"])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--rl-step", action="store_true")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "mmrl_bench_vllm"))
    p.add_argument("--_arm", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    cache = Path(a.cache)
    world = cache / "image_world"
    if a._arm:
        arm, path, kind = a._arm
        res = rl_step(arm, str(world), str(cache / f"rl_{arm}")) if kind == "rl" else \
            one_arm(arm, path, str(world), a.lengths, a.prompts, a.n, a.reps)
        print("RESULT " + json.dumps(res))
        return 0
    cache.mkdir(parents=True, exist_ok=True)
    if not (world / "train.json").exists():
        from mmrl.data.synth_image import make_image_world

        make_image_world(str(world), 32, 8, seed=0)
    print(f"# {' '.join(sys.argv)}\n# tokens per CPU second (median of {a.reps}); ratio to hf-fused; peak RSS MB")
    for name in a.models:
        path = model_path(name, cache)
        res = {}
        for arm in ARMS:
            proc = subprocess.run([sys.executable, __file__, "--_arm", arm, path, "gen", "--cache", str(cache),
                                   "--prompts", str(a.prompts), "--n", str(a.n), "--reps", str(a.reps),
                                   "--lengths", *map(str, a.lengths)], capture_output=True, text=True)
            line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            res[arm] = json.loads(line[-1][7:]) if line else None
            if not line:
                print(f"{name} {arm}: failed: {proc.stderr.strip().splitlines()[-1:]}")
        print(f"\n| {name} | " + " | ".join(f"{T} tokens" for T in a.lengths) + " | peak RSS MB |")
        print("|---|" + "---|" * (len(a.lengths) + 1))
        base = res.get("hf-fused")
        for arm in ARMS:
            r = res[arm]
            if r is None:
                continue
            rate = r["tokens_per_cpu_s"]
            cells = [f"{rate[str(T)]:.0f}" + (f" ({rate[str(T)] / base['tokens_per_cpu_s'][str(T)]:.2f}x)" if base else "")
                     for T in a.lengths]
            print(f"| {arm} | " + " | ".join(cells) + f" | {r['peak_rss_mb']:.0f} |")
    if a.rl_step:
        print("\n| one GRPO step (demo, tiny) | rollout s | scoring s | update s |\n|---|---|---|---|")
        for arm in ("hf-fused", "vllm"):  # the trainer's HF engine decodes fused
            proc = subprocess.run([sys.executable, __file__, "--_arm", arm, "-", "rl", "--cache", str(cache)],
                                  capture_output=True, text=True)
            line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if not line:
                print(f"| {arm} | failed: {proc.stderr.strip().splitlines()[-1:]} | | |")
                continue
            r = json.loads(line[-1][7:])
            print(f"| {arm} | {r['time/rollout']:.2f} | {r['time/scoring']:.2f} | {r['time/update']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
