"""ZeRO-3 weight sync to a rollout server, 2 DeepSpeed CPU ranks (``ds_zero3_sync.py``): the server receives exactly
the 1-process model's weights (bit for bit; LoRA merged as ``W + BA*alpha/r`` in fp32), and at no bucket were more
parameter elements whole than one bucket holds (counted on DeepSpeed's parameter status, every parameter
partitioned: ``stage3_param_persistence_threshold`` 0). The frozen vision tower is never gathered."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from test_deepspeed_cpu import needs_deepspeed

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def run_ranks(tmp_path: Path, model: str, lora: bool, bucket_bytes: int) -> dict:
    ds = json.loads((REPO / "configs/deepspeed/zero3.json").read_text())
    ds["zero_optimization"]["stage3_param_persistence_threshold"] = 0  # every parameter sharded: all are counted
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), str(HERE)]))
    out = tmp_path / "sync.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           str(HERE / "ds_zero3_sync.py"), model, str(out), str(lora).lower(), str(bucket_bytes), str(tmp_path / "ds.json")]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return torch.load(out)


def one_process_weights(model_path: str, lora: bool):
    """What the 1-process trainer sends: the same model, vision frozen, the same LoRA factors (B non-zero)."""
    from ds_zero3_sync import fill_lora

    from mmrl.config import LoraConfig
    from mmrl.models.loading import load_model
    from mmrl.rollout.weight_sync import hf_name, rollout_weights

    model = load_model(model_path, freeze_vision=True, lora=LoraConfig(enabled=True) if lora else None)
    fill_lora(model)
    factors = sum(p.numel() for n, p in model.named_parameters() if ".lora_" in n)
    bases = {hf_name(n): p.detach() for n, p in model.named_parameters() if n.endswith(".base_layer.weight")}
    return rollout_weights(model), factors, bases


@pytest.mark.slow
@needs_deepspeed
@pytest.mark.parametrize("lora,bucket_bytes", [(False, 400_000), (True, 80_000)], ids=["full", "lora"])
def test_zero3_sync_sends_the_whole_model_one_bucket_at_a_time(tmp_path, tiny_model_path, lora, bucket_bytes):
    got = run_ranks(tmp_path, str(tiny_model_path), lora, bucket_bytes)
    want, factors, bases = one_process_weights(str(tiny_model_path), lora)
    assert [n for n, _ in got["received"]] == [n for n, _ in want]
    assert not any("visual" in n for n, _ in want)
    for (name, a), (_, b) in zip(got["received"], want):
        assert a.dtype == b.dtype and torch.equal(a, b), name
    if lora:  # q/k/v/o of each layer, merged with non-zero factors: none is its base W
        assert len(want) == len(bases) == 8 and all(not torch.equal(t, bases[n].float()) for n, t in want)

    per_bucket = [whole for whole, _ in got["gathered"]]
    bound = bucket_bytes // 4 + (factors if lora else 0)  # fp32 elements of a bucket, plus its layers' LoRA factors
    sent = sum(t.numel() for _, t in want)
    # several buckets (no tensor is larger than one: 64 KiB LoRA q/o, 307 KiB embedding), each gathered for its send
    assert len(per_bucket) >= sent * 4 // bucket_bytes >= 3
    assert 0 < max(per_bucket) <= bound < got["all_elements"] // 3
    assert all(vision == 0 for _, vision in got["gathered"])
