"""Smoke run of bench/vs_trl.py: 1 step x 1 repetition of every arm (mmrl and TRL at 1 and 2 threads, mmrl async,
mmrl on video, the five algorithms) at a miniature size, through the command line as users run it. Checks the
plumbing, not the numbers."""
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
    assert table.startswith("Headline: mmrl at its best setting vs TRL at its best")
    for text in ("mmrl (image) | 1 process x 1 thread", "mmrl (image) | 1 process x 2 threads",
                 "mmrl async k=1 (image) | 2 processes x 1 thread", "TRL GRPOTrainer (image) | 1 process x 2 threads",
                 "Overlap efficiency", "mmrl (video, 4 frames)", "floor, plain torch (image)",
                 "floor, plain torch (video)", "steps/s ratio",
                 "peak RSS ratio", "| GRPO |", "| DAPO |", "| GSPO |", "| BPO |", "| T-GRPO |", "view_time_share"):
        assert text in table, text
    assert table.strip() in p.stdout
    res = json.loads((out / "results.json").read_text())["results"]
    assert len(res["trl"]) == 1 and len(res["mmrl"]) == 1 and len(res["algo_BPO"]) == 1
    # equal work: both frameworks generated prompts x n completions in the step
    assert res["trl"][0]["per_step"][0]["samples"] == res["mmrl"][0]["per_step"][0]["samples"] == 4
    assert res["algo_BPO"][0]["per_step"][0]["view_time_share"] > 0
    # the async arm: 2 processes, the worker's peak RSS measured and counted, its batch as big as the sync arm's
    asy = res["mmrl_async"][0]
    assert asy["processes"] == 2 and asy["children_peak_rss_kb"] > 100 << 10 and asy["per_step"][0]["samples"] == 4
    assert res["mmrl_t2"][0]["threads"] == 2 and res["trl_t2"][0]["threads"] == 2 and res["mmrl"][0]["children"] == 0


def test_vs_trl_lengths_smoke(tiny_model_path, tmp_path):
    """``--lengths``: every arm at each length in one invocation, one table with a row per length first (at 70
    new tokens and n = 4 mmrl runs the expand layout, at 2 the packed one)."""
    out = tmp_path / "vs_trl_lengths"
    cmd = [sys.executable, str(REPO / "bench" / "vs_trl.py"), "--steps", "1", "--warmup", "0", "--reps", "1",
           "--prompts", "2", "--n", "4", "--micro-batch", "8", "--n-train", "8", "--no-algos", "--no-trl",
           "--thread-counts", "1", "--no-async", "--lengths", "2", "70", "--out", str(out)]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    table = (out / "table.md").read_text()
    assert table.startswith("Headline:")  # then the table by length: its heading, a blank line, its rows
    by_length = table[table.index("mmrl vs TRL and the floor by response length"):].split("\n\n")[1]
    rows = [l for l in by_length.splitlines() if l.startswith("| 2 |") or l.startswith("| 70 |")]
    assert len(rows) == 2 and all(l.count("|") == 14 for l in rows)
    res = json.loads((out / "results.json").read_text())["results"]
    assert sorted(res) == ["2", "70"] and {"mmrl", "floor", "mmrl_video", "floor_video"} <= set(res["70"])
    assert res["70"]["floor"][0]["per_step"][0]["tokens"] == 2 * 4 * 70  # the floor samples every token
