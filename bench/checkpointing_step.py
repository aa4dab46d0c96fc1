"""Time and memory of one scoring step (forward + backward) with and without gradient checkpointing.

    OMP_NUM_THREADS=1 .venv/bin/python bench/checkpointing_step.py [--model tiny] [--prompts 4] [--n 8]
                                                                   [--length 24] [--frames 4] [--size 56] [--reps 3]

``--prompts`` random videos x ``--n`` responses of ``--length`` tokens, one micro-batch; three runs: no checkpointing
(the cached shared-prompt layouts), checkpointing (``onepass``, mmrl.models.scoring) and checkpointing with the
``full`` layout (one forward per response: what mmrl did under checkpointing before issue 26). Printed: median seconds of ``--reps`` steps, the bytes
autograd saves for backward (``mmrl.train.gpu_checks.saved_bytes``), the process's peak RSS on CPU (or the step's
peak CUDA allocation on a GPU), and the largest log-prob / relative gradient gap between the two.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def child(a) -> dict:
    from mmrl.models.loading import load_model, load_processor, resolve_device
    from mmrl.train.gpu_checks import one_step, video_items

    proc = load_processor(a.model)
    model = load_model(a.model, device=resolve_device("auto")).train()
    if a.ckpt:
        model.gradient_checkpointing_enable()
    items = video_items(proc, a.prompts, a.n, a.length, a.frames, a.size)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    runs = [one_step(model, items, proc.tokenizer.pad_token_id, micro_batch=len(items), strategy=a.strategy)
            for _ in range(a.reps)]
    return {"seconds": statistics.median(r["seconds"] for r in runs), "saved_MB": runs[0]["saved_bytes"] / 2**20,
            "peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_growth_MB": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024,
            "peak_cuda_MB": None if runs[0]["peak_bytes"] is None else runs[0]["peak_bytes"] / 2**20,
            "lps": [x.tolist() for x in runs[0]["lps"]],
            "grads": {n: float(g.abs().max()) for n, g in runs[0]["grads"].items()}}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny")
    for k, v in (("prompts", 4), ("n", 8), ("length", 24), ("frames", 4), ("size", 56), ("reps", 3)):
        p.add_argument(f"--{k}", type=int, default=v)
    p.add_argument("--ckpt", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--strategy", default="auto", help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(child(a)))
        return
    res = {}
    modes = {"off": (False, "auto"), "on": (True, "auto"), "on, full layout (before)": (True, "full")}
    for mode, (ckpt, strategy) in modes.items():  # each in a fresh process: peak RSS is per process
        cmd = [sys.executable, __file__, "--child", "--strategy", strategy] + (["--ckpt"] if ckpt else []) + [
            x for k in ("model", "prompts", "n", "length", "frames", "size", "reps") for x in (f"--{k}", str(getattr(a, k)))]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        res[mode] = json.loads(out)
    lp_gap = max(abs(x - y) for m in ("on", "on, full layout (before)")
                 for a_, b_ in zip(res["off"]["lps"], res[m]["lps"]) for x, y in zip(a_, b_))
    print(f"{a.prompts} prompts ({a.frames} frames {a.size}x{a.size}) x {a.n} responses of {a.length} tokens, "
          f"model {a.model}, torch threads {torch.get_num_threads()}")
    print("| gradient checkpointing | step s (median) | saved for backward MB | peak RSS MB | peak CUDA MB |")
    print("|---|---|---|---|---|")
    for mode, r in res.items():
        cuda = "-" if r["peak_cuda_MB"] is None else f"{r['peak_cuda_MB']:.1f}"
        print(f"| {mode} | {r['seconds']:.3f} | {r['saved_MB']:.1f} | {r['peak_rss_MB']:.0f} | {cuda} |")
    print(f"max |log-prob gap| vs no checkpointing {lp_gap:.2e}")


if __name__ == "__main__":
    main()
