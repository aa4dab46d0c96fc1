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
    assert "# ranks: 16" in p.stdout and "rendezvous: node-1:" in p.stdout
    assert "path: /models/qwen3b" in p.stdout and "train: /data/train.json" in p.stdout


ALL = sorted(p.name for p in (REPO / "scripts").glob("train_*.sh"))


def _captured(script: str, tmp_path, **env) -> list:
    """Run ``script`` with DRY_RUN=1 and a PY that records its arguments (no Python start per script); returns
    the recorded mmrl command lines (``-m mmrl ...``)."""
    log = tmp_path / "argv"
    fake = tmp_path / "py"
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done >> {log}\necho --- >> {log}\n')
    fake.chmod(0o755)
    full = dict(os.environ, DRY_RUN="1", PY=str(fake), **env)
    p = subprocess.run(["bash", str(REPO / "scripts" / script)], cwd=REPO, env=full, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    calls = [c.strip("\n").split("\n") for c in log.read_text().split("---\n") if c.strip()]
    return p.stdout, calls


def test_every_script_names_its_config_and_validates(tmp_path, capsys, monkeypatch):
    """`for s in scripts/train_*.sh; do DRY_RUN=1 $s; done`: each script's dry-run command resolves, validates and
    prints its plan (run in this process), and its header says it needs GPUs."""
    from mmrl.cli import main

    monkeypatch.chdir(REPO)
    assert len(ALL) >= 20
    for script in ALL:
        head = (REPO / "scripts" / script).read_text().splitlines()[:4]
        assert any("Needs" in x and "GPU" in x for x in head), (script, head)
        out, calls = _captured(script, tmp_path, OUT_DIR=str(tmp_path / "out" / script))
        assert "# launch: " in out or "# stage " in out, script
        for argv in calls:
            assert argv[:2] == ["-m", "mmrl"] and "--dry-run" in argv, (script, argv)
            assert main(argv[2:]) == 0, (script, capsys.readouterr().err)
            printed = capsys.readouterr().out
            assert "# plan: mmrl" in printed and ("checkpoints/" in printed or "sft/final" in printed), script
        (tmp_path / "argv").unlink()


def test_recipes_name_no_hub_id_and_state_their_hardware():
    import re

    for path in sorted((REPO / "configs" / "recipes").glob("*.yaml")) + [REPO / "configs" / f for f in
                                                                          ("grpo_qwen2_5_vl_3b.yaml", "bpo_qwen2_5_vl_7b.yaml",
                                                                           "lora_qwen2_5_vl_7b.yaml")]:
        text = path.read_text()
        assert not re.search(r"path:\s*(Qwen|OpenGVLab|[\w-]+/[\w.-]+-Instruct)\b", text), path
        if "path:" in text:
            assert "${oc.env:MODEL_PATH" in text, path
        assert "GPU" in text or "include:" in text, path


def test_multi_node_rendezvous_is_the_hostfiles_first_host(tmp_path):
    """issue 26 item 3: without MASTER_ADDR, the rendezvous is the hostfile's first host, never loopback."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# nodes\n\nnode-a slots=8\nnode-b slots=8\n")
    out, _ = _captured("train_bpo_qwen2_5_vl_7b.sh", tmp_path, NUM_NODES="2", HOSTFILE=str(hostfile))
    assert "--master_addr node-a" in out and "rendezvous: node-a:29500" in out, out
    assert "127.0.0.1" not in out
    out, _ = _captured("train_bpo_qwen2_5_vl_7b.sh", tmp_path, NUM_NODES="2", HOSTFILE=str(hostfile),
                       MASTER_ADDR="10.0.0.5")
    assert "--master_addr 10.0.0.5" in out and "rendezvous: 10.0.0.5:29500" in out


def test_a_bad_override_fails_before_anything_starts():
    p = run("train_lora_qwen2_5_vl_7b.sh", "train.stepz=3")
    assert p.returncode == 2 and "train.stepz" in p.stderr


def test_multi_node_dry_run_without_a_hostfile_refuses_as_the_launch_does(tmp_path):
    """issue 42 item 1: the plan of a 2-node launch without HOSTFILE showed rendezvous 127.0.0.1 and exited 0; the
    real launch refuses it, so the dry run does too (exit 2, the same line, no plan)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HOSTFILE", "MASTER_ADDR")}
    full = dict(env, DRY_RUN="1", PY=sys.executable, NUM_NODES="2", OUT_DIR=str(tmp_path / "out"))
    p = subprocess.run(["bash", str(REPO / "scripts" / "train_grpo_qwen2_5_vl_3b.sh")], cwd=REPO, env=full,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout[-2000:]
    assert "NUM_NODES=2 needs HOSTFILE" in p.stderr
    assert "127.0.0.1" not in p.stdout and "# plan" not in p.stdout


def test_the_gpu_recipes_probe_a_sample_of_the_media():
    """docs/recipes.md: the recipes probe `sample 256` (issue 42: the three top-level ones did not include the shared
    base and probed every file on every rank); the recipes that include them too."""
    from mmrl.config import load_config

    files = [REPO / "configs" / f for f in ("grpo_qwen2_5_vl_3b.yaml", "bpo_qwen2_5_vl_7b.yaml",
                                            "lora_qwen2_5_vl_7b.yaml")]
    files += [p for p in sorted((REPO / "configs" / "recipes").glob("*.yaml")) if not p.name.startswith("_")
              and "vhop" not in p.name]  # vhop: a retrieval recipe with its own data section
    for path in files:
        cfg = load_config([str(path)], [], registries=False)
        assert cfg.data.preflight == "sample 256", (path, cfg.data.preflight)
