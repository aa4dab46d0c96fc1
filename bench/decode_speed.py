"""The HF engine's decode against the eager decode it replaced, side by side in one process, by response length.

    OMP_NUM_THREADS=1 .venv/bin/python bench/decode_speed.py [--lengths 64 256 512] [--reps 3] [--models tiny wide]

``bench/vs_trl.py``'s generation: 16 prompts of its image world x 8 samples, temperature 1, one ``engine.generate``
(prefill once per prompt, then the decode). Arms, alternated within each repetition under the same seed:

- ``eager``: ``HFEngine(fast_decode=False)``, the decode as it was (``torch.multinomial`` per step);
- ``fast``: ``HFEngine()``, the same decode with ``mmrl.rollout.sampling.multinomial_rows`` (``torch.multinomial``'s
  draw, bit for bit, without its serial per-element exponential).

Models: ``tiny`` (the embedded tiny Qwen2.5-VL: hidden 128, 2 layers, the benchmark's) and ``wide`` (hidden 512,
8 heads / 2 KV heads, MLP 1408, 4 layers; built once into ``--cache``). Printed per model and length: CPU seconds
of each arm (median over repetitions), the speed-up eager / fast per repetition (min / median / max), whether every
token is identical and the largest log-prob difference. CPU seconds of this process: wall time on a shared box
scatters with the load.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

WIDE = dict(text_hidden=512, text_heads=8, text_kv_heads=2, text_intermediate=1408, text_layers=4)


def model_path(name: str, cache: Path) -> str:
    from mmrl.models.tiny import TinySpec, ensure_tiny_model, make_tiny_model

    if name == "tiny":
        return str(ensure_tiny_model())
    path = cache / "wide-qwen2_5_vl"
    if not (path / "mmrl_tiny_spec.json").exists():
        make_tiny_model(path, TinySpec(**WIDE))
    return str(path)


def run_model(name: str, path: str, world: Path, lengths, reps: int, prompts: int, n: int, seed: int) -> list:
    import torch

    from floor import step_prompts
    from mmrl.models.loading import load_model, load_processor
    from mmrl.rollout.base import RolloutRequest, SamplingParams, build_engine

    proc, model = load_processor(path), load_model(path)
    inputs = step_prompts({"model": path, "world": str(world), "prompts_per_step": prompts, "steps": 1}, proc)[0]
    reqs = [RolloutRequest(inputs=p, n=n, sample_id=str(i), group_id=i) for i, p in enumerate(inputs)]
    engines = {"eager": build_engine("hf", model=model, processor=proc, max_batch_sequences=prompts * n,
                                     fast_decode=False),
               "fast": build_engine("hf", model=model, processor=proc, max_batch_sequences=prompts * n)}
    engines["fast"].generate(reqs[:1], SamplingParams(max_new_tokens=2))  # warm both paths once
    engines["eager"].generate(reqs[:1], SamplingParams(max_new_tokens=2))
    rows = []
    for T in lengths:
        params = SamplingParams(temperature=1.0, max_new_tokens=T)
        cpu = {"eager": [], "fast": []}
        same, diff, tokens = True, 0.0, 0
        for rep in range(reps):
            out = {}
            for arm in (("eager", "fast") if rep % 2 == 0 else ("fast", "eager")):
                torch.manual_seed(seed + rep)
                c = time.process_time()
                out[arm] = engines[arm].generate(reqs, params)
                cpu[arm].append(time.process_time() - c)
            for a, b in zip(out["eager"], out["fast"]):
                same &= torch.equal(a.response_ids, b.response_ids)
                if a.logprobs.shape == b.logprobs.shape:
                    diff = max(diff, float((a.logprobs - b.logprobs).abs().max()))
            tokens = sum(int(t.response_ids.numel()) for t in out["fast"])
        ratios = [e / f for e, f in zip(cpu["eager"], cpu["fast"])]
        rows.append((name, T, statistics.median(cpu["eager"]), statistics.median(cpu["fast"]), ratios, same, diff,
                     tokens))
        print(f"[decode_speed] {name} {T}: eager {statistics.median(cpu['eager']):.3f} s, fast "
              f"{statistics.median(cpu['fast']):.3f} s, x{statistics.median(ratios):.2f}", flush=True)
    return rows


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 512])
    ap.add_argument("--models", nargs="+", default=["tiny", "wide"], choices=["tiny", "wide"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=str(REPO / "runs" / "decode_speed"))
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from mmrl.data.synth_image import make_image_world

    cache = Path(a.cache)
    world = cache / "world_image"
    if not (world / "train.json").exists():
        make_image_world(str(world), 64, 8, seed=a.seed)
    rows = []
    for name in a.models:
        rows += run_model(name, model_path(name, cache), world, a.lengths, a.reps, a.prompts, a.n, a.seed)
    lines = [f"Decode, eager vs fast: {a.prompts} prompts x {a.n} samples, temperature 1, 1 thread, CPU seconds of one "
             f"engine.generate (median of {a.reps}; arms alternated, same seed per repetition).", "",
             "| model | new tokens | tokens generated | eager CPU s | fast CPU s | speed-up (min / median / max) | "
             "same tokens | max abs log-prob diff |", "|---|---|---|---|---|---|---|---|"]
    for name, T, e, f, r, same, diff, tokens in rows:
        lines.append(f"| {name} | {T} | {tokens} | {e:.3f} | {f:.3f} | {min(r):.2f} / {statistics.median(r):.2f} / "
                     f"{max(r):.2f} | {'yes' if same else 'NO'} | {diff:.1e} |")
    table = "\n".join(lines)
    print("\n" + table)
    return table


if __name__ == "__main__":
    main()
