"""scripts/rollout_server.sh and scripts/train_grpo_rollout_servers.sh with DRY_RUN=1: both sides' commands and
addresses for a 2-node layout, and loopback refused wherever the other side runs on another host."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(script: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("MMRL_ROLLOUT_SECRET", "MMRL_TRANSFER_ADDR")}
    full.update(DRY_RUN="1", PY=sys.executable, **env)
    return subprocess.run(["bash", str(REPO / "scripts" / script)], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=120)


def test_two_nodes_print_both_sides_without_the_secret():
    p = run("rollout_server.sh", SERVER_HOST="node-2", TRAINER_HOST="node-1", ROLLOUT_GPUS="0,1",
            MODEL_PATH="/ckpt/q7b", MMRL_ROLLOUT_SECRET="s3cr3t-value")
    assert p.returncode == 0, p.stderr
    assert "CUDA_VISIBLE_DEVICES=1 " in p.stdout and "--host node-2 --port 8001" in p.stdout
    assert "ROLLOUT_SERVERS=http://node-2:8000,http://node-2:8001 MASTER_ADDR=node-1" in p.stdout
    assert "secret: set" in p.stdout and "s3cr3t-value" not in p.stdout
    t = run("train_grpo_rollout_servers.sh", ROLLOUT_SERVERS="http://node-2:8000,http://node-2:8001",
            MASTER_ADDR="node-1", MODEL_PATH="/ckpt/q7b", MMRL_ROLLOUT_SECRET="s3cr3t-value")
    assert t.returncode == 0, t.stderr[-2000:]
    assert "weights from rank 0 via node-1:29600" in t.stdout and "s3cr3t-value" not in t.stdout
    assert "rollout.vllm_mode=server rollout.servers=[http://node-2:8000,http://node-2:8001]" in t.stdout
    assert "vllm_mode: server" in t.stdout  # the trainer's dry run validated the servers


def test_loopback_is_refused_across_hosts():
    p = run("rollout_server.sh", SERVER_HOST="127.0.0.1", TRAINER_HOST="node-1")
    assert p.returncode == 2 and "SERVER_HOST=127.0.0.1 is loopback but the trainer runs on node-1" in p.stderr
    t = run("train_grpo_rollout_servers.sh", ROLLOUT_SERVERS="http://127.0.0.1:8000", NUM_NODES="2")
    assert t.returncode == 2 and "is loopback but the trainer spans 2 nodes" in t.stderr
    t = run("train_grpo_rollout_servers.sh", ROLLOUT_SERVERS="http://node-2:8000")
    assert t.returncode == 2 and "MMRL_TRANSFER_ADDR=127.0.0.1:29600 is loopback" in t.stderr
    assert run("rollout_server.sh").returncode == 0  # both on this node: loopback is right
