"""Weight transfer to a rollout server per sync: the collective (gloo transfer group, ``rollout.weight_transfer:
collective``) against the HTTP safetensors blob (``http``), on vLLM's CPU build (one real server on loopback).

Per model: the bytes one sync sends (the language model's weights in the engine's dtype: the vision tower is frozen,
as ``model.freeze_vision`` has it by default, and never travels) and the wall seconds of ``sync_weights`` to one
server (the trainer sends, the server receives and reloads in place, the caches reset), median of ``--repeats``;
the collective's one-off group set-up apart. Models: the tiny Qwen2.5-VL (fp32) and Qwen2.5-VL-3B's real width at
text and vision depth 2 (``bench/_real_checkpoint.py``, bf16).

    PYTHONPATH=. OMP_NUM_THREADS=1 /work/main/.venv-vllm/bin/python bench/weight_transfer.py --out bench/results/weight_transfer.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
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


def checkpoints(root: Path):
    from _real_checkpoint import QWEN2_5_VL_3B, write_real_checkpoint

    from mmrl.models.tiny import ensure_tiny_model

    yield "tiny Qwen2.5-VL", str(ensure_tiny_model()), "float32"
    spec = dataclasses.replace(QWEN2_5_VL_3B, text_layers=2, vision_layers=2, fullatt_block_indexes=[1])
    path = root / "real_width_d2"
    write_real_checkpoint(str(path), spec)
    yield "Qwen2.5-VL-3B width, depth 2", str(path), "bfloat16"


def measure(name: str, path: str, dtype: str, repeats: int, log_dir: Path):
    from mmrl.models.loading import load_model
    from mmrl.rollout.server_process import start_servers
    from mmrl.rollout.transfer_group import nbytes
    from mmrl.rollout.vllm_client import ServerClient
    from mmrl.rollout.weight_sync import rollout_weights

    model = load_model(path, dtype, device="cpu")
    for n, p in model.named_parameters():
        p.requires_grad_("visual" not in n)
    weights = rollout_weights(model, only_changed=True, dtype=getattr(torch, dtype))
    size = nbytes([(n, str(t.dtype).removeprefix("torch."), list(t.shape)) for n, t in weights])
    (server,) = start_servers(path, log_dir, 1, SECRET, dtype=dtype, max_model_len=1024)
    rows = []
    try:
        for transfer in ("collective", "http"):
            client = ServerClient([server.url], timeout=600, secret=SECRET, transfer=transfer)
            setup = 0.0
            if transfer == "collective":
                t0 = time.perf_counter()
                client.join()
                setup = time.perf_counter() - t0
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                client.load_weights(weights)
                client.reset_caches()
                times.append(time.perf_counter() - t0)
            rows.append({"model": name, "dtype": dtype, "transfer": transfer, "tensors": len(weights), "bytes": size,
                         "seconds": statistics.median(times), "all_seconds": times, "setup_seconds": setup})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        server.stop()
    return rows


def table(rows) -> str:
    out = ["| model | dtype | transfer | MB per sync | s per sync (median) | MB/s | group set-up s |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['dtype']} | {r['transfer']} | {r['bytes'] / 1e6:.1f} | {r['seconds']:.2f} | "
                   f"{r['bytes'] / 1e6 / r['seconds']:.0f} | {r['setup_seconds']:.2f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tiny-only", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--sizes", action="store_true", help="only the bytes per sync at the published 3B/7B shapes")
    a = p.parse_args(argv)
    if a.sizes:
        for r in sync_sizes():
            print(f"| {r['model']} | {r['update']} | {r['params'] / 1e9:.3f} B | {r['bf16_GB']:.2f} GB |")
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, path, dtype) in enumerate(checkpoints(Path(tmp))):
            rows += measure(name, path, dtype, a.repeats, Path(tmp))
            if a.tiny_only:
                break
    print(table(rows))
    if a.out:
        Path(a.out).write_text(json.dumps({"command": " ".join(["bench/weight_transfer.py", *(argv or sys.argv[1:])]),
                                           "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
