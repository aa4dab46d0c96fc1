"""Peak memory and CPU time of the scorer's LM head (``mmrl.models.prefill.head_logprobs``), one-shot vs chunked.

    OMP_NUM_THREADS=1 .venv/bin/python bench/head_memory.py [--settings 8192:651:128 32768:651:128 ...]
                                                             [--chunk 4096]

A setting ``T:V:H`` is ``T`` response tokens (``T / 512`` responses of 512 tokens, as a 64 x 512 micro-batch is
8 x 4096) through an ``nn.Linear(H, V)`` head at temperature 0.7: one forward and backward of ``head_logprobs``
(gradients to the hidden states and the head's weight), with ``train.logprob_chunk_tokens`` = 0 (the ``[T, V]``
logits at once) and = ``--chunk`` (``--chunk`` tokens at a time, recomputed in backward). Each (setting, mode)
runs in a fresh subprocess (1 thread), after a 2-token warm-up pass of the chunked head (the one-time setup of
``torch.utils.checkpoint``'s first call: ~2 CPU s and ~150 MB, in both modes); printed: the child's peak RSS
(``ru_maxrss``), its growth over the RSS once the inputs were built (what the head's pass itself holds; glibc keeps
freed small blocks, so small settings read noisy), and the CPU seconds (user + sys) of the pass, one-shot
and chunked side by side with chunked / one-shot ratios. The defaults take ~2 CPU minutes and < 5 GB.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARK = "HEAD_MEMORY "
DEFAULT = ["8192:651:128", "32768:651:128", "8192:32000:128", "8192:32000:512"]


def one(T: int, V: int, H: int, chunk: int) -> dict:
    """Inside a fresh subprocess: one forward + backward of ``head_logprobs`` over ``T`` tokens."""
    import torch

    sys.path.insert(0, str(REPO))
    from mmrl.models.prefill import head_logprobs

    torch.set_num_threads(1)
    torch.manual_seed(0)
    R = min(T, 512)
    N = -(-T // R)
    rlen = torch.tensor([R] * (N - 1) + [T - (N - 1) * R])
    head = torch.nn.Linear(H, V, bias=False)
    hidden = torch.randn(N, R, H).requires_grad_(True)
    resp = [torch.randint(0, V, (int(n),)) for n in rlen]
    warm = torch.zeros(1, 2, H, requires_grad=True)  # lazy one-time setup (the checkpoint's first call), both modes
    torch.cat(head_logprobs(head, warm, [resp[0][:2]], torch.tensor([2]), 0.7, 0, chunk_tokens=1)).sum().backward()
    head.weight.grad = None
    pre = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c = time.process_time()
    lps = head_logprobs(head, hidden, resp, rlen, 0.7, 0, chunk_tokens=chunk)
    torch.cat(lps).sum().backward()
    cpu = time.process_time() - c
    return {"pre_kb": pre, "cpu_s": cpu, "check": float(hidden.grad.abs().sum() + head.weight.grad.abs().sum())}


def measure(T: int, V: int, H: int, chunk: int) -> dict:
    """``one`` in a fresh subprocess (1 thread); its result and peak RSS."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--_one", f"{T}:{V}:{H}:{chunk}"], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, text=True)
    if out.returncode:
        raise SystemExit(f"head_memory: setting {T}:{V}:{H} with chunk {chunk} failed (exit {out.returncode})")
    return json.loads([ln for ln in out.stdout.splitlines() if ln.startswith(MARK)][-1][len(MARK):])


def parse(setting: str) -> tuple:
    try:
        T, V, H = (int(x) for x in setting.split(":"))
    except ValueError:
        raise SystemExit(f"head_memory: --settings wants T:V:H integers, got {setting!r}")
    if min(T, V, H) < 1:
        raise SystemExit(f"head_memory: --settings wants positive T:V:H, got {setting!r}")
    return T, V, H


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", nargs="+", default=DEFAULT, help="T:V:H (tokens, vocabulary, hidden)")
    ap.add_argument("--chunk", type=int, default=4096, help="tokens per chunk of the chunked head (>= 1)")
    ap.add_argument("--_one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.chunk < 1:
        raise SystemExit(f"head_memory: --chunk must be >= 1, got {a.chunk}")
    if a._one:
        T, V, H, chunk = (int(x) for x in a._one.split(":"))
        res = one(T, V, H, chunk)
        print(MARK + json.dumps({**res, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}), flush=True)
        return ""
    settings = [parse(s) for s in a.settings]
    lines = [f"LM head forward + backward (`head_logprobs`), one-shot vs {a.chunk}-token chunks, 1 thread, fresh "
             "process each; MB = peak RSS (growth over the inputs); CPU s of the pass.", "",
             "| tokens | vocabulary | hidden | one-shot MB | chunked MB | growth one-shot / chunked MB | "
             "growth ratio | one-shot CPU s | chunked CPU s | CPU ratio |", "|---|---|---|---|---|---|---|---|---|---|"]
    for T, V, H in settings:
        full, part = measure(T, V, H, 0), measure(T, V, H, a.chunk)
        if abs(full["check"] - part["check"]) > 1e-3 * max(abs(full["check"]), 1.0):
            raise SystemExit(f"head_memory: {T}:{V}:{H}: chunked gradients differ ({part['check']} vs {full['check']})")
        gf, gp = growth(full), growth(part)
        lines.append(f"| {T} | {V} | {H} | {full['peak_kb'] / 1024:.0f} | {part['peak_kb'] / 1024:.0f} | "
                     f"{gf:.0f} / {gp:.0f} | {gp / max(gf, 1e-9):.2f} | {full['cpu_s']:.3f} | {part['cpu_s']:.3f} | "
                     f"{part['cpu_s'] / max(full['cpu_s'], 1e-9):.2f} |")
        print(f"[head_memory] {T}:{V}:{H} done", flush=True)
    table = "\n".join(lines)
    print("\n" + table)
    return table


def growth(res: dict) -> float:
    return max(res["peak_kb"] - res["pre_kb"], 0) / 1024


if __name__ == "__main__":
    main()
