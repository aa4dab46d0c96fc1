"""Smoke run of bench/vs_trl.py: 1 step x 1 repetition of every arm (mmrl, TRL, mmrl on video, the five
algorithms) at a miniature size, through the command line as users run it. Checks the plumbing, not the numbers."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl is not installed (pip install -e '.[bench]')")
def test_vs_trl_smoke(tiny_model_path, tmp_path):
    out = tmp_path / "vs_trl"
    cmd = [sys.executable, str(REPO / "bench" / "vs_trl.py"), "--steps", "1", "--warmup", "0", "--reps", "1",
           "--prompts", "2", "--n", "2", "--micro-batch", "4", "--n-train", "8", "--algo-sft-steps", "2",
           "--mmrl-baseline", "--out", str(out)]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    table = (out / "table.md").read_text()
    for text in ("mmrl (image)", "TRL GRPOTrainer (image)", "mmrl (video, 4 frames)", "steps/s ratio",
                 "peak RSS ratio", "| GRPO |", "| DAPO |", "| GSPO |", "| BPO |", "| T-GRPO |", "view_time_share"):
        assert text in table, text
    assert table.strip() in p.stdout
    res = json.loads((out / "results.json").read_text())["results"]
    assert len(res["trl"]) == 1 and len(res["mmrl"]) == 1 and len(res["algo_BPO"]) == 1
    # equal work: both frameworks generated prompts x n completions in the step
    assert res["trl"][0]["per_step"][0]["samples"] == res["mmrl"][0]["per_step"][0]["samples"] == 4
    assert res["algo_BPO"][0]["per_step"][0]["view_time_share"] > 0
