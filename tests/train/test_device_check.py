"""The device check (issue 43): its FLOPs accounting on hand-computed cases, its CPU rehearsal through the same
script the GPU machine runs, and the carried wheels under the 64 MiB a device run may send."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mmrl.models.tiny import TinySpec, build_model
from mmrl.train.device_check import param_split, peak_flops, step_flops

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 64 * 2**20  # what one device run may send: the working tree plus carried paths


def test_step_flops_by_hand():
    # N_lm 10, N_vis 3, prompt 5, responses 2 and 3 tokens, 4 patches: vision 2*3*4 = 24
    f = step_flops(10, 3, 5, [2, 3], 4)
    assert f == {"generation": 2 * 10 * 10 + 24, "update": 6 * 10 * 10 + 24, "update_verl": 6 * 10 * 15 + 24}


def test_peak_flops_of_the_lent_cards():
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12 and peak_flops("NVIDIA H200") == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12 and peak_flops("cpu") is None


@pytest.mark.parametrize("tied", [True, False])
def test_param_split_counts_the_lm_head_not_the_lookup(tied):
    """Tiny Qwen2.5-VL (hidden 128, 2 layers, 4 heads of 32, 2 KV heads, MLP 256): per layer q 128*128+128,
    k and v 128*64+64 each, o 128*128, MLP 3*128*256, 2 norms of 128; final norm 128; LM head V*128. Untied, the
    embedding is a second V*128 block that must not count."""
    model, proc = build_model(TinySpec(tie_embeddings=tied))
    vocab = model.config.get_text_config().vocab_size
    layer = (128 * 128 + 128) + 2 * (128 * 64 + 64) + 128 * 128 + 3 * 128 * 256 + 2 * 128
    n_lm, n_vis = param_split(model)
    assert n_lm == 2 * layer + 128 + vocab * 128
    assert n_vis == sum(p.numel() for p in model.model.visual.parameters())


def _manifest():
    rows = []
    for line in (ROOT / "scripts" / "device_wheels.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            pin, wheel, size = line.split()
            rows.append((pin, wheel, int(size)))
    return rows


def _tree_bytes() -> int:
    """Bytes of what a device run sends besides carried paths: tracked and untracked-not-ignored files."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout.decode()
    return sum((ROOT / p).stat().st_size for p in out.split("\0") if p and (ROOT / p).is_file())


def test_device_wheels_fit_the_limit():
    """The pinned wheels (their recorded bytes; the real folder's when `make device-wheels` made it) plus the tree
    stay under 64 MiB; one version per package (two stop `pip install --no-deps`); each file is its pin's."""
    rows = _manifest()
    names = [re.sub(r"[-_.]+", "_", pin.split("==")[0]).lower() for pin, _, _ in rows]
    assert len(set(names)) == len(names)
    for (pin, wheel, _), name in zip(rows, names):
        assert wheel.lower().startswith(f"{name}-{pin.split('==')[1]}-") and wheel.endswith(".whl"), (pin, wheel)
    wheels = sum(size for _, _, size in rows)
    folder = ROOT / ".device_wheels"
    if folder.is_dir():
        present = {p.name: p.stat().st_size for p in folder.glob("*.whl")}
        assert present == {wheel: size for _, wheel, size in rows}, "make device-wheels again: folder != manifest"
        wheels = sum(present.values())
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tree's size is unknown")
    assert wheels + _tree_bytes() < LIMIT, f"{(wheels + _tree_bytes()) / 2**20:.1f} MiB"


@pytest.mark.slow
def test_cpu_rehearsal_through_the_device_script(tmp_path):
    """``scripts/device_check.sh --cpu`` (the GPU run's code on the tiny and a 3B-wide depth-1 model): every row
    passes, every response runs its full length, fp32 masters keep a 1e-6 step that bf16 rounds away, the LoRA sync
    sends exactly the fp32 merge, and the bf16 sampler and scorer agree within 0.05."""
    env = {**os.environ, "PY": sys.executable, "OUT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", "scripts/device_check.sh", "--cpu"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| check | ok | numbers |" in proc.stdout
    rows = {k: v for line in (tmp_path / "device_check.jsonl").read_text().splitlines()
            for k, v in json.loads(line).items()}
    model_rows = {m: ["build", "rollout", "update[sdpa,no-ckpt]", "update[sdpa,ckpt]", "update[eager,no-ckpt]",
                      "update[eager,ckpt]"] + extra + ["lora_sync"]
                  for m, extra in (("tiny", ["precision"]), ("3b-depth1", []))}
    assert list(rows) == ["env", "imports"] + [f"{m}/{s}" for m, secs in model_rows.items() for s in secs]
    assert rows["env"]["transformers"] and rows["imports"]["broken"] == "-"
    p = rows["tiny/precision"]
    assert p["fp32_master_changed"] > 0.99 and p["pure_bf16_changed"] < 0.1
    for model in model_rows:
        r = rows[f"{model}/rollout"]
        assert r["tokens"] == 2 * 8 and r["logprob_gap_max"] < 0.05
        lora = rows[f"{model}/lora_sync"]
        assert lora["sent_minus_formula"] == 0.0 and lora["base_entries_changed"] == 0 and lora["merged_MB"] > 0
    assert rows["3b-depth1/build"]["N_lm_B"] > 0.07  # 3B widths: one 2048-wide layer + the LM head
