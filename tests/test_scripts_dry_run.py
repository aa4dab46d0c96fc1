"""The launch scripts in scripts/train_*.sh: with DRY_RUN=1 each builds its config (configs/*.yaml + the script's
overrides), prints the plan through `mmrl train --dry-run` without loading weights, and exits 0."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = {
    "train_grpo_qwen2_5_vl_3b.sh": ("grpo", "zero2.json", "Qwen2.5-VL-3B-Instruct"),
    "train_bpo_qwen2_5_vl_7b.sh": ("bpo", "zero3.json", "Qwen2.5-VL-7B-Instruct"),
    "train_lora_qwen2_5_vl_7b.sh": ("grpo", "zero2.json", "Qwen2.5-VL-7B-Instruct"),
}


def run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ, DRY_RUN="1", PY=sys.executable, **env)
    return subprocess.run(["bash", str(REPO / "scripts" / script), *args], cwd=REPO, env=full,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_dry_run_prints_the_plan(script, tmp_path):
    algo, ds, model = SCRIPTS[script]
    p = run(script, "train.steps=7", OUT_DIR=str(tmp_path / "out"))
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout
    assert "# plan: mmrl train (dry run" in out
    assert "7 steps x" in out and f"# algorithm: {algo} " in out and "backend deepspeed, engine vllm" in out
    assert "passes per step: generate" in out and "responses per prompt" in out
    assert f"configs/deepspeed/{ds}" in out and model in out
    assert "# launch: " in out and "deepspeed --num_gpus 8 --master_port" in out and "--no_local_rank --module mmrl train" in out
    if "lora" in script:
        assert "enabled: true" in out
    if algo == "bpo":
        assert "views/bpo_video.yaml" in out and "bpo_contract" in out


def test_multi_node_uses_the_hostfile(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node-1 slots=8\nnode-2 slots=8\n")
    p = run("train_grpo_qwen2_5_vl_3b.sh", NUM_NODES="2", NUM_GPUS="8", HOSTFILE=str(hostfile),
            MASTER_ADDR="node-1", MODEL_PATH="/models/qwen3b", DATA_PATH="/data/train.json")
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"--num_nodes 2 --hostfile {hostfile} --master_addr node-1" in p.stdout
    assert "# ranks: 16" in p.stdout
    assert "path: /models/qwen3b" in p.stdout and "train: /data/train.json" in p.stdout


def test_a_bad_override_fails_before_anything_starts():
    p = run("train_lora_qwen2_5_vl_7b.sh", "train.stepz=3")
    assert p.returncode == 2 and "train.stepz" in p.stderr
