"""Weight transfer to a rollout server per sync: the collective (gloo transfer group, ``rollout.weight_transfer:
collective``) against the HTTP safetensors blob (``http``), on vLLM's CPU build (one real server on loopback).

Per model and update: the bytes one sync sends in the engine's dtype (full: the language model, the vision tower
frozen as ``model.freeze_vision`` has it, never sent; LoRA r=8 on q/k/v/o: those layers' merged ``W + BA*alpha/r``)
and the wall seconds of a sync to one server (the trainer sends, the server receives and reloads in place, the
caches reset), median of ``--repeats``; the collective's one-off group set-up apart. Models: the tiny Qwen2.5-VL
(fp32) and ``real3b`` of ``bench/vllm_rollout.py`` (Qwen2.5-VL-3B's widths, heads, KV heads, vocabulary 151,936 and
vision shape at text and vision depth 2, random init), served and sent in bf16. One trainer copy at a time (freed
before the next arm); the RSS of this process and of the server's process tree, sampled after each sync.

    flock /tmp/mmrl-heavy.lock env PYTHONPATH=. OMP_NUM_THREADS=1 /work/main/.venv-vllm/bin/python \
        bench/weight_transfer.py --out bench/results/weight_transfer.json
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

SECRET = "bench-weight-transfer"


def sync_sizes():
    """Bytes one sync sends at the published shapes (meta-device models, nothing allocated), bf16: full fine-tuning
    sends the language model (vision frozen); LoRA on q/k/v/o sends those layers' merged ``W + BA*alpha/r``."""
    from _real_checkpoint import QWEN2_5_VL_3B, QWEN2_5_VL_7B

    from mmrl.models.chat_template import chat_template_for
    from mmrl.models.loading import model_class_for
    from mmrl.models.qwen_tokenizer import build_qwen_tokenizer
    from mmrl.models.tiny import build_config

    rows = []
    tok = build_qwen_tokenizer(chat_template_for("qwen2_5_vl"))
    for name, spec in (("Qwen2.5-VL-3B", QWEN2_5_VL_3B), ("Qwen2.5-VL-7B", QWEN2_5_VL_7B)):
        with torch.device("meta"):
            model = model_class_for(spec.family)(build_config(tok, spec))
        params = dict(model.named_parameters())  # tied weights once, as rollout_weights sends them
        lm = sum(p.numel() for n, p in params.items() if "visual" not in n)
        lora = sum(p.numel() for n, p in params.items()
                   if "visual" not in n and any(f".{m}." in n for m in ("q_proj", "k_proj", "v_proj", "o_proj")))
        for kind, count in (("full (vision frozen)", lm), ("LoRA q/k/v/o merged", lora)):
            rows.append({"model": name, "update": kind, "params": count, "bf16_GB": count * 2 / 1e9})
    return rows


def checkpoints(cache: Path):
    from vllm_rollout import model_path  # the real-width, reduced-depth builder of the rollout bench

    yield "tiny Qwen2.5-VL", model_path("tiny", cache), "float32"
    yield "Qwen2.5-VL-3B width, depth 2", model_path("real3b", cache), "bfloat16"


def trainer_model(path: str, dtype: str, update: str):
    """The trainer's copy: vision frozen (full) or LoRA on q/k/v/o (vision frozen with it)."""
    from mmrl.config import LoraConfig
    from mmrl.models.loading import load_model

    lora = LoraConfig(enabled=True) if update == "lora" else None
    return load_model(path, dtype, freeze_vision=True, lora=lora, device="cpu")


def rss_mb(pid: int, tree: bool = False) -> float:
    """Resident MB of process ``pid`` now, with all its descendants if ``tree`` (the server, vLLM's EngineCore and
    worker; pages shared between them count once per process)."""
    import psutil

    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *(root.children(recursive=True) if tree else [])]) / 2**20


def measure(name: str, path: str, dtype: str, repeats: int, log_dir: Path):
    from mmrl.rollout.server_process import start_servers
    from mmrl.rollout.transfer_group import nbytes
    from mmrl.rollout.vllm_client import ServerClient
    from mmrl.rollout.weight_sync import SyncWeights

    (server,) = start_servers(path, log_dir, 1, SECRET, dtype=dtype, max_model_len=1024)
    rows, server_peak = [], rss_mb(server.proc.pid, tree=True)
    try:
        clients = {t: ServerClient([server.url], timeout=600, secret=SECRET, transfer=t) for t in ("collective", "http")}
        t0 = time.perf_counter()
        clients["collective"].join()
        setup = {"collective": time.perf_counter() - t0, "http": 0.0}
        for update in ("full", "lora"):
            model = trainer_model(path, dtype, update)
            weights = SyncWeights(model, only_changed=True, dtype=getattr(torch, dtype))  # what VLLMEngine sends
            size = sum(nbytes(m) for m in weights.manifests)
            for transfer in ("collective", "http"):
                client = clients[transfer]
                times, trainer_peak = [], 0.0
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    client.load_weights(weights)
                    client.reset_caches()
                    times.append(time.perf_counter() - t0)
                    server_peak = max(server_peak, rss_mb(server.proc.pid, tree=True))
                    trainer_peak = max(trainer_peak, rss_mb(os.getpid()))
                rows.append({"model": name, "dtype": dtype, "update": update, "transfer": transfer,
                             "tensors": len(weights), "bytes": size, "seconds": statistics.median(times),
                             "all_seconds": times, "setup_seconds": setup[transfer],
                             "trainer_rss_mb": trainer_peak})
                print(json.dumps(rows[-1]), flush=True)
            del model, weights
            gc.collect()
    finally:
        server.stop()
    for r in rows:
        r["server_peak_rss_mb"] = server_peak
    return rows


def table(rows) -> str:
    out = ["| model | dtype | update | transfer | MB per sync | s per sync (median) | MB/s | group set-up s |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['dtype']} | {r['update']} | {r['transfer']} | {r['bytes'] / 1e6:.1f} | "
                   f"{r['seconds']:.3f} | {r['bytes'] / 1e6 / r['seconds']:.0f} | {r['setup_seconds']:.2f} |")
    for m in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == m]
        out.append(f"\nRSS sampled after each sync, {m}: trainer process up to {max(r['trainer_rss_mb'] for r in mine):.0f} "
                   f"MB, server process tree up to {mine[0]['server_peak_rss_mb']:.0f} MB")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tiny-only", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "mmrl_bench_vllm"))
    p.add_argument("--sizes", action="store_true", help="only the bytes per sync at the published 3B/7B shapes")
    a = p.parse_args(argv)
    if a.sizes:
        for r in sync_sizes():
            print(f"| {r['model']} | {r['update']} | {r['params'] / 1e9:.3f} B | {r['bf16_GB']:.2f} GB |")
        return 0
    rows = []
    cache = Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as logs:
        for name, path, dtype in checkpoints(cache):
            rows += measure(name, path, dtype, a.repeats, Path(logs))
            if a.tiny_only:
                break
    print(table(rows))
    if a.out:
        Path(a.out).write_text(json.dumps({"command": " ".join(["bench/weight_transfer.py", *(argv or sys.argv[1:])]),
                                           "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
